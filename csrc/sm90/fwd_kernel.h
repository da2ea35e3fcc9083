// The sm90 forward kernel: 384 threads per CTA, looping over the tiles fwd_scheduler.h gives it
// (one tile per CTA, or persistent: one CTA per SM).
//   warpgroup 0 (producer, 24 registers): thread 0 loads every tile's Q (a 64-row TMA box per
//     consumer warpgroup, once that warpgroup's previous O store has read its rows out) and every
//     K and V block through two PipelineTmaAsync pipelines of Traits::kStages stages; the first
//     K block of a tile goes out before its Q, so it overlaps the previous tile's epilogue;
//   warpgroups 1, 2 (consumers, 240 registers): fwd_mainloop.h, then fwd_epilogue.h.
// Blocks no query row of a tile sees are never loaded: causal tiles stop at the diagonal; a tile
// that sees no key at all loads nothing and writes O = 0, LSE = -inf.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/pipeline/sm90_pipeline.hpp>

#include "../params.h"
#include "fwd_epilogue.h"
#include "fwd_mainloop.h"
#include "fwd_scheduler.h"
#include "fwd_softmax.h"
#include "fwd_tma.h"

namespace flash::sm90 {

using namespace cute;

// Key blocks [n_min, n_max) that rows [m0, m0 + kBlockM) see (n_max <= n_min: none).
template <class Traits, bool kCausal>
CUTE_DEVICE void kv_block_range(const FwdParams& p, int m0, int& n_min, int& n_max) {
  constexpr int kN = Traits::kBlockN;
  n_min = 0;
  n_max = (p.seqlen_k + kN - 1) / kN;
  if constexpr (kCausal) {
    // Last visible key of the tile's last row: m0 + kBlockM - 1 + seqlen_k - seqlen_q.
    const int end = m0 + Traits::kBlockM + p.seqlen_k - p.seqlen_q;
    n_max = end <= 0 ? 0 : min(n_max, (end + kN - 1) / kN);
  }
}

template <class Traits, bool kCausal>
__global__ void __launch_bounds__(Traits::kNThreads, 1)
    fwd_kernel(CUTE_GRID_CONSTANT typename FwdTma<Traits>::Params const kp) {
  using Storage = typename Traits::SharedStorage;
  using Pipeline = typename Traits::Pipeline;
  using PipelineState = typename Traits::PipelineState;
  using QFull = cutlass::arch::ClusterTransactionBarrier;
  using QEmpty = cutlass::arch::ClusterBarrier;
  constexpr int kD = Traits::kHeadDim;
  constexpr int kWGRows = Traits::kWGRows;
  constexpr int kNWG = Traits::kNConsumerWG;

  extern __shared__ __align__(1024) char smem_raw[];
  Storage& ss = *reinterpret_cast<Storage*>(smem_raw);
  const FwdParams& p = kp.p;
  const FwdScheduler<Traits::kBlockM, kCausal> sched(p);
  const int wg = cutlass::canonical_warp_group_idx();

  typename Pipeline::Params pp;
  pp.transaction_bytes = Traits::kTmaBytesKV;
  pp.role = wg == 0 ? Pipeline::ThreadCategory::Producer : Pipeline::ThreadCategory::Consumer;
  pp.is_leader = threadIdx.x == 0;
  pp.num_consumers = Traits::kNConsumerThreads;
  Pipeline pipe_k(ss.pipe_k, pp, Shape<_1, _1, _1>{});
  Pipeline pipe_v(ss.pipe_v, pp, Shape<_1, _1, _1>{});
  if (threadIdx.x == 0) {
    CUTE_UNROLL
    for (int c = 0; c < kNWG; ++c) {
      QFull::init(&ss.q_full[c], 1);
      QEmpty::init(&ss.q_empty[c], 1);
    }
  }
  cutlass::arch::fence_barrier_init();
  __syncthreads();

  // (rows, d) global tiles as TMA coordinates, (rows, d[, stage]) shared tiles.
  Tensor mQ = kp.tma_q.get_tma_tensor(make_shape(p.seqlen_q, Int<kD>{}, p.nheads, p.batch));
  Tensor mK = kp.tma_k.get_tma_tensor(make_shape(p.seqlen_k, Int<kD>{}, p.nheads_k, p.batch));
  Tensor mV = kp.tma_v.get_tma_tensor(make_shape(p.seqlen_k, Int<kD>{}, p.nheads_k, p.batch));
  Tensor mO = kp.tma_o.get_tma_tensor(make_shape(p.seqlen_q, Int<kD>{}, p.nheads, p.batch));
  using WGTile = Shape<Int<kWGRows>, Int<kD>>;
  using KVTile = Shape<Int<Traits::kBlockN>, Int<kD>>;
  Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename Traits::SmemLayoutK{});  // (N, d, stages)
  Tensor sV = make_tensor(make_smem_ptr(ss.v.data()), typename Traits::SmemLayoutV{});
  Tensor sVt = make_tensor(make_smem_ptr(ss.v.data()), typename Traits::SmemLayoutVt{});  // (d, N, stages)
  constexpr int kQWGElems = cosize_v<typename Traits::SmemLayoutQWG>;
  auto sQ_wg = [&](int c) {  // (64, d): consumer warpgroup c's Q rows, later its O rows
    return make_tensor(make_smem_ptr(ss.q.data() + c * kQWGElems), typename Traits::SmemLayoutQWG{});
  };

  if (wg == 0) {
    cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegs>();
    if (threadIdx.x != 0) { return; }
    PipelineState st_k = cutlass::make_producer_start_state<Pipeline>();
    PipelineState st_v = cutlass::make_producer_start_state<Pipeline>();
    int loaded = 0;  // tiles whose Q this CTA loaded
    for (int t = blockIdx.x; t < sched.num_tiles; t += gridDim.x) {
      int m_block, head, batch, n_min, n_max;
      sched.decode(t, m_block, head, batch);
      kv_block_range<Traits, kCausal>(p, m_block * Traits::kBlockM, n_min, n_max);
      if (n_max <= n_min) { continue; }
      const int head_k = head / (p.nheads / p.nheads_k);
      Tensor gK = local_tile(mK(_, _, head_k, batch), KVTile{}, make_coord(_, _0{}));  // (N, d, n_blocks)
      Tensor gV = local_tile(mV(_, _, head_k, batch), KVTile{}, make_coord(_, _0{}));
      auto [tKgK, tKsK] = tma_partition(kp.tma_k, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
      auto [tVgV, tVsV] = tma_partition(kp.tma_v, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sV), group_modes<0, 2>(gV));
      auto load_k = [&](int n) {
        pipe_k.producer_acquire(st_k);
        copy(kp.tma_k.with(*pipe_k.producer_get_barrier(st_k)), tKgK(_, n), tKsK(_, st_k.index()));
        ++st_k;
      };
      auto load_v = [&](int n) {
        pipe_v.producer_acquire(st_v);
        copy(kp.tma_v.with(*pipe_v.producer_get_barrier(st_v)), tVgV(_, n), tVsV(_, st_v.index()));
        ++st_v;
      };
      load_k(n_max - 1);
      CUTE_UNROLL
      for (int c = 0; c < kNWG; ++c) {
        if (loaded > 0) { QEmpty::wait(&ss.q_empty[c], (loaded - 1) & 1); }
        Tensor gQ = local_tile(mQ(_, _, head, batch), WGTile{}, make_coord(m_block * kNWG + c, _0{}));
        Tensor sQ = sQ_wg(c);
        auto [tQgQ, tQsQ] = tma_partition(kp.tma_q, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
        QFull::arrive_and_expect_tx(&ss.q_full[c], Traits::kTmaBytesQWG);
        copy(kp.tma_q.with(ss.q_full[c]), tQgQ, tQsQ);
      }
      ++loaded;
      load_v(n_max - 1);
      for (int n = n_max - 2; n >= n_min; --n) {
        load_k(n);
        load_v(n);
      }
    }
    return;
  }

  cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegs>();
  const int cwg = wg - 1;
  const int tid = threadIdx.x % 128;
  Tensor sQ = sQ_wg(cwg);
  PipelineState st_k, st_v;  // consumer start: stage 0, phase 0
  if constexpr (Traits::kOverlap) {
    // Warpgroup 0 takes the first GEMM turn (fwd_mainloop.h); the turns then alternate for the
    // whole kernel (both warpgroups run the same blocks of the same tiles).
    if (cwg == 0) { cutlass::arch::NamedBarrier::arrive(2 * 128, uint32_t(FwdBarrier::kTurnWG0)); }
  }
  int loaded = 0;
  for (int t = blockIdx.x; t < sched.num_tiles; t += gridDim.x) {
    int m_block, head, batch, n_min, n_max;
    sched.decode(t, m_block, head, batch);
    const int m0 = m_block * Traits::kBlockM;
    const int row0 = m0 + kWGRows * cwg;
    kv_block_range<Traits, kCausal>(p, m0, n_min, n_max);
    float* lse_head = p.lse_ptr + (int64_t(batch) * p.nheads + head) * p.seqlen_q;
    if (n_max <= n_min) {
      FwdEpilogue<Traits>::run_empty(p, head, batch, lse_head, row0, tid);
      continue;
    }
    Tensor tOrO = partition_fragment_C(typename Traits::MmaPV{}, select<0, 1>(typename Traits::TilePV{}));  // ((2,2,d/8),1,1)
    clear(tOrO);
    OnlineSoftmax<2> softmax(p.scale_log2);
    QFull::wait(&ss.q_full[cwg], loaded & 1);
    FwdMainloop<Traits, kCausal>::run(sQ, sK, sVt, pipe_k, pipe_v, st_k, st_v, tOrO, softmax, cwg, tid, m0, n_min,
                                      n_max, p.seqlen_q, p.seqlen_k);
    Tensor gO = local_tile(mO(_, _, head, batch), WGTile{}, make_coord(m_block * kNWG + cwg, _0{}));
    FwdEpilogue<Traits>::run(tOrO, softmax, sQ, gO, kp.tma_o, lse_head, row0, p.seqlen_q, cwg, tid);
    if (tid == 0) { QEmpty::arrive(&ss.q_empty[cwg]); }  // after its tma_store_wait: the rows are free
    ++loaded;
  }
}

}  // namespace flash::sm90
