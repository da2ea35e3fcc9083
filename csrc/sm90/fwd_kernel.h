// The sm90 forward kernel: one CTA per (kBlockM-row query tile, head, batch); Traits::kNThreads threads
// (fwd_traits.h: kNConsumerWG = 2 -> 128 rows, 384 threads; 3 -> 192 rows, 512 threads).
//   warpgroup 0 (producer, kProducerRegs): thread 0 loads Q (one 64-row TMA box per consumer on one
//     mbarrier) and every K and V block through two PipelineTmaAsync pipelines of Traits::kStages stages;
//   warpgroups 1 .. kNConsumerWG (consumers, kConsumerRegs): fwd_mainloop.h, then fwd_epilogue.h.
// The K/V stages' empty barriers count one arrival per consumer thread (PipelineTmaAsync with
// num_consumers = kNConsumerThreads and a cluster of one CTA: CUTLASS 4.2 sets the arrival count to
// num_consumers then; per-warpgroup signalling threads are for clusters).
// Q's mbarrier: one arrival (thread 0) + kBlockM * d * 2 bytes; TMA counts a box's full bytes also
// where it lies past seqlen_q (zero fill), so the tail tiles complete like the full ones.
// Blocks that no query row of the tile sees are never loaded: causal tiles stop at the diagonal.
// kDropout: attention dropout (dropout.h) in the consumers' softmax, a variant of its own
// (instantiations/sm90_fwd_*_dropout.cu) so the plain kernels compile exactly as without it.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/pipeline/sm90_pipeline.hpp>

#include "../dropout.h"
#include "../params.h"
#include "fwd_epilogue.h"
#include "fwd_mainloop.h"
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

template <class Traits, bool kCausal, bool kDropout>
__global__ void __launch_bounds__(Traits::kNThreads, 1)
    fwd_kernel(CUTE_GRID_CONSTANT typename FwdTma<Traits>::Params const kp) {
  using Element = typename Traits::Element;
  using Storage = typename Traits::SharedStorage;
  using Pipeline = typename Traits::Pipeline;
  constexpr int kD = Traits::kHeadDim;
  constexpr int kWGRows = Traits::kWGRows;

  extern __shared__ __align__(1024) char smem_raw[];
  Storage& ss = *reinterpret_cast<Storage*>(smem_raw);
  const FwdParams& p = kp.p;
  if constexpr (kDropout) { write_rng_state(p); }  // thread 0 of block (0, 0, 0), before any return

  const int wg = cutlass::canonical_warp_group_idx();
  // Causal: the tiles of a head run longest first (the last query rows see the most keys).
  const int m_block = kCausal ? int(gridDim.x) - 1 - int(blockIdx.x) : int(blockIdx.x);
  const int head = blockIdx.y, batch = blockIdx.z;
  const int head_k = head / (p.nheads / p.nheads_k);
  const int m0 = m_block * Traits::kBlockM;
  int n_min, n_max;
  kv_block_range<Traits, kCausal>(p, m0, n_min, n_max);

  typename Pipeline::Params pp;
  pp.transaction_bytes = Traits::kTmaBytesKV;
  pp.role = wg == 0 ? Pipeline::ThreadCategory::Producer : Pipeline::ThreadCategory::Consumer;
  pp.is_leader = threadIdx.x == 0;
  pp.num_consumers = Traits::kNConsumerThreads;
  Pipeline pipe_k(ss.pipe_k, pp, Shape<_1, _1, _1>{});
  Pipeline pipe_v(ss.pipe_v, pp, Shape<_1, _1, _1>{});
  if (threadIdx.x == 0) { cutlass::arch::ClusterTransactionBarrier::init(&ss.barrier_q, 1); }
  cutlass::arch::fence_barrier_init();
  __syncthreads();

  // (rows, d) global tiles as TMA coordinates, (rows, d[, stage]) shared tiles.
  Tensor mQ = kp.tma_q.get_tma_tensor(make_shape(p.seqlen_q, Int<kD>{}, p.nheads, p.batch));
  Tensor mK = kp.tma_k.get_tma_tensor(make_shape(p.seqlen_k, Int<kD>{}, p.nheads_k, p.batch));
  Tensor mV = kp.tma_v.get_tma_tensor(make_shape(p.seqlen_k, Int<kD>{}, p.nheads_k, p.batch));
  Tensor mO = kp.tma_o.get_tma_tensor(make_shape(p.seqlen_q, Int<kD>{}, p.nheads, p.batch));
  using WGTile = Shape<Int<kWGRows>, Int<kD>>;
  using KVTile = Shape<Int<Traits::kBlockN>, Int<kD>>;
  Tensor gK = local_tile(mK(_, _, head_k, batch), KVTile{}, make_coord(_, _0{}));  // (N, d, n_blocks)
  Tensor gV = local_tile(mV(_, _, head_k, batch), KVTile{}, make_coord(_, _0{}));
  Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename Traits::SmemLayoutK{});  // (N, d, stages)
  Tensor sV = make_tensor(make_smem_ptr(ss.v.data()), typename Traits::SmemLayoutV{});
  Tensor sVt = make_tensor(make_smem_ptr(ss.v.data()), typename Traits::SmemLayoutVt{});  // (d, N, stages)
  constexpr int kQWGElems = cosize_v<typename Traits::SmemLayoutQWG>;
  auto sQ_wg = [&](int c) {  // (64, d): consumer warpgroup c's Q rows, later its O rows
    return make_tensor(make_smem_ptr(ss.q.data() + c * kQWGElems), typename Traits::SmemLayoutQWG{});
  };

  if (wg == 0) {
    cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegs>();
    if (threadIdx.x != 0 || n_max <= n_min) { return; }
    cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&ss.barrier_q, Traits::kTmaBytesQ);
    CUTE_UNROLL
    for (int c = 0; c < Traits::kNConsumerWG; ++c) {
      Tensor gQ = local_tile(mQ(_, _, head, batch), WGTile{}, make_coord(m_block * Traits::kNConsumerWG + c, _0{}));
      Tensor sQ = sQ_wg(c);
      auto [tQgQ, tQsQ] = tma_partition(kp.tma_q, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
      copy(kp.tma_q.with(ss.barrier_q), tQgQ, tQsQ);
    }
    auto [tKgK, tKsK] = tma_partition(kp.tma_k, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
    auto [tVgV, tVsV] = tma_partition(kp.tma_v, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sV), group_modes<0, 2>(gV));
    auto st_k = cutlass::make_producer_start_state<Pipeline>();
    auto st_v = cutlass::make_producer_start_state<Pipeline>();
    for (int n = n_max - 1; n >= n_min; --n) {
      pipe_k.producer_acquire(st_k);
      copy(kp.tma_k.with(*pipe_k.producer_get_barrier(st_k)), tKgK(_, n), tKsK(_, st_k.index()));
      ++st_k;
      pipe_v.producer_acquire(st_v);
      copy(kp.tma_v.with(*pipe_v.producer_get_barrier(st_v)), tVgV(_, n), tVsV(_, st_v.index()));
      ++st_v;
    }
    return;
  }

  cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegs>();
  const int cwg = wg - 1;
  const int tid = threadIdx.x % 128;
  Tensor tOrO = partition_fragment_C(typename Traits::MmaPV{}, select<0, 1>(typename Traits::TilePV{}));  // ((2,2,d/8),1,1)
  clear(tOrO);
  OnlineSoftmax<2> softmax(p.scale_log2);
  DropoutRng rng{};  // only the kDropout variant reads it
  if constexpr (kDropout) { rng = dropout_rng(p, batch, head); }
  Tensor sQ = sQ_wg(cwg);
  if (n_max > n_min) {
    cutlass::arch::ClusterTransactionBarrier::wait(&ss.barrier_q, 0);
    FwdMainloop<Traits, kCausal, kDropout>::run(sQ, sK, sVt, pipe_k, pipe_v, tOrO, softmax, rng, cwg, tid, m0, n_min,
                                                n_max, p.seqlen_q, p.seqlen_k);
  }
  Tensor gO = local_tile(mO(_, _, head, batch), WGTile{}, make_coord(m_block * Traits::kNConsumerWG + cwg, _0{}));
  float* lse_head = p.lse_ptr + (int64_t(batch) * p.nheads + head) * p.seqlen_q;
  FwdEpilogue<Traits, kDropout>::run(tOrO, softmax, sQ, gO, kp.tma_o, lse_head, m0 + kWGRows * cwg, p.seqlen_q, cwg,
                                     tid, p.rp_dropout);
}

}  // namespace flash::sm90
