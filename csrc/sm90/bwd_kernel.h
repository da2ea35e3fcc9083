// The sm90 backward main kernel: one CTA per (kBlockN keys, head, batch); 384 threads.
//   warpgroup 0 (producer, 24 registers): thread 0 loads K and V once (one mbarrier), then per
//     query block Q with its LSE_log2 rows and dO with its delta rows through two PipelineTmaAsync
//     pipelines of Traits::kStages stages (the LSE/delta rows by 1-D bulk copies on the same
//     barriers); thread 32 (warp 1) is the dQ writer: per query block one TMA reduce-add of the
//     sdQ stage the consumers filled (bwd_store_dq);
//   warpgroups 1, 2 (consumers, 240 registers): bwd_mainloop.h, then dK (scaled), dV to global.
// The role-split tile (Traits::kRoleSplit, bwd_traits_split.h, d = 256): no sdQ and no writer (dQ by
// vector reductions from the consumers, red_dq); consumer 0 runs BwdMainloopSplit::run_p_dv and
// stores dV, consumer 1 run_ds_dk and stores dK.
// The pre-pass (delta, LSE_log2 into the padded scratch, dq_accum zeroed unless the kernel stores
// first, bwd_api.h) and the dQ conversion are sm90/bwd_passes.h's, launched around this kernel by run_bwd_ (bwd_launch.h).
// Causal: the query blocks before the first one that sees the CTA's first key are skipped.
// kDropout: the forward's dropout mask regenerated (bwd_dropout.h, bwd_mainloop.h; the role-split
// tile: bwd_mainloop_split.h), a variant of its own (instantiations/sm90_bwd_*_dropout.cu); its mask
// words (BwdDropoutT::kWords per consumer warpgroup; the role-split tile keeps its mask in registers)
// follow SharedStorage in dynamic shared memory (kDropoutSmemBytes), so the plain kernel's storage and
// code are as without it.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/pipeline/sm90_pipeline.hpp>

#include "../dropout.h"
#include "../params.h"
#include "bwd_dropout.h"
#include "bwd_mainloop.h"
#include "bwd_mainloop_split.h"
#include "dq_adders.h"
#include "dq_turns.h"
#include "bwd_tma.h"
#include "bwd_walk.h"
#include "fwd_layouts.h"

namespace flash::sm90 {

using namespace cute;

// Query blocks [m_min, m_max) that see any of the keys [n0, n0 + kBlockN).
template <class Traits, bool kCausal>
CUTE_DEVICE void q_block_range(const BwdParams& p, int n0, int& m_min, int& m_max) {
  constexpr int kM = Traits::kBlockM;
  m_min = 0;
  m_max = (p.seqlen_q + kM - 1) / kM;
  if constexpr (kCausal) {
    // The first query that sees key n0: n0 - (seqlen_k - seqlen_q).
    const int first = n0 - (p.seqlen_k - p.seqlen_q);
    m_min = first <= 0 ? 0 : first / kM;
  }
}

// The scratch's padding rows (bwd_passes.h: lse_log2 +inf, delta 0), for the rows a query tile reaches
// past seqlen_q_rounded (copy_scratch_rows). One copy per translation unit.
namespace {
constexpr int kPadRows = 128;
__device__ alignas(16) const float kLseLog2Pad[kPadRows] = {
#define FLASH_INF8 INFINITY, INFINITY, INFINITY, INFINITY, INFINITY, INFINITY, INFINITY, INFINITY
    FLASH_INF8, FLASH_INF8, FLASH_INF8, FLASH_INF8, FLASH_INF8, FLASH_INF8, FLASH_INF8, FLASH_INF8,
    FLASH_INF8, FLASH_INF8, FLASH_INF8, FLASH_INF8, FLASH_INF8, FLASH_INF8, FLASH_INF8, FLASH_INF8};
#undef FLASH_INF8
__device__ alignas(16) const float kDeltaPad[kPadRows] = {};
}  // namespace

// Query tile m's kBlockM scratch rows (lse_log2 or delta of one (batch, head), from `rows`; `pad`: the
// padding rows' value) to shared memory by 1-D bulk copies on `bar`, whose pipeline expects kBlockM rows.
// Tiles that do not divide kBwdRowAlign (Traits::kRowGuard, 80 rows) copy only the rows below
// seqlen_q_rounded (m kBlockM < seqlen_q <= seqlen_q_rounded, both multiples of 16: whole 16-byte units)
// and the rest from `pad`, so every row past seqlen_q reads as a padding row.
template <class Traits>
CUTE_DEVICE void copy_scratch_rows(const float* rows, const float* pad, int m, int seqlen_q_rounded, uint64_t* bar,
                                   float* smem) {
  constexpr int kM = Traits::kBlockM;
  static_assert(kM <= kPadRows);
  int n = kM;
  if constexpr (Traits::kRowGuard) { n = min(kM, seqlen_q_rounded - m * kM); }
  SM90_BULK_COPY_G2S::copy(rows + m * kM, bar, smem, n * int(sizeof(float)));
  if constexpr (Traits::kRowGuard) {
    if (n < kM) { SM90_BULK_COPY_G2S::copy(pad, bar, smem + n, (kM - n) * int(sizeof(float))); }
  }
}

// The shared tiles as CuTe tensors (shapes in bwd_mainloop.h). Both tiles' operands: Q, dO and their
// transposed views, K, V, K^T, dS and dS^T, the LSE_log2 / delta rows.
template <class Traits>
struct BwdOperandTensors {
  template <class Layout, class T = typename Traits::Element>
  using Smem = decltype(make_tensor(make_smem_ptr(static_cast<T*>(nullptr)), Layout{}));
  Smem<typename Traits::SmemLayoutQ> q, dout;
  Smem<typename Traits::SmemLayoutQt> qt, dot;
  Smem<typename Traits::SmemLayoutK> k, v;
  Smem<typename Traits::SmemLayoutKt> kt;
  Smem<typename Traits::SmemLayoutDS> ds;
  Smem<typename Traits::SmemLayoutDSt> dst;
  float* lse_log2;
  float* delta;

  CUTE_DEVICE explicit BwdOperandTensors(typename Traits::SharedStorage& ss)
      : q(make_tensor(make_smem_ptr(ss.q.data()), typename Traits::SmemLayoutQ{})),
        dout(make_tensor(make_smem_ptr(ss.dout.data()), typename Traits::SmemLayoutDO{})),
        qt(make_tensor(make_smem_ptr(ss.q.data()), typename Traits::SmemLayoutQt{})),
        dot(make_tensor(make_smem_ptr(ss.dout.data()), typename Traits::SmemLayoutQt{})),
        k(make_tensor(make_smem_ptr(ss.k.data()), typename Traits::SmemLayoutK{})),
        v(make_tensor(make_smem_ptr(ss.v.data()), typename Traits::SmemLayoutV{})),
        kt(make_tensor(make_smem_ptr(ss.k.data()), typename Traits::SmemLayoutKt{})),
        ds(make_tensor(make_smem_ptr(ss.ds.data()), typename Traits::SmemLayoutDS{})),
        dst(make_tensor(make_smem_ptr(ss.ds.data()), typename Traits::SmemLayoutDSt{})),
        lse_log2(ss.lse_log2.data()),
        delta(ss.delta.data()) {}
};

// The tile with the dQ writer (bwd_traits.h): also sdQ and its stages' mbarriers.
template <class Traits>
struct BwdSmemTensors : BwdOperandTensors<Traits> {
  typename BwdOperandTensors<Traits>::template Smem<typename Traits::SmemLayoutDQ, float> dq;  // fp32
  typename BwdOperandTensors<Traits>::template Smem<typename Traits::SmemLayoutDQt, float> dqt;  // its transpose
  uint64_t* dq_full;   // (kDQStages,) mbarriers, bwd_traits.h
  uint64_t* dq_empty;

  CUTE_DEVICE explicit BwdSmemTensors(typename Traits::SharedStorage& ss)
      : BwdOperandTensors<Traits>(ss),
        dq(make_tensor(make_smem_ptr(ss.dq.data()), typename Traits::SmemLayoutDQ{})),
        dqt(make_tensor(make_smem_ptr(ss.dq.data()), typename Traits::SmemLayoutDQt{})),
        dq_full(ss.barrier_dq_full),
        dq_empty(ss.barrier_dq_empty) {}
};

// The role-split tile (bwd_mainloop_split.h): no sdQ; sP.
template <class Traits>
struct BwdSmemTensorsSplit : BwdOperandTensors<Traits> {
  float* p;  // (kPValues / 4, 128) float4

  CUTE_DEVICE explicit BwdSmemTensorsSplit(typename Traits::SharedStorage& ss)
      : BwdOperandTensors<Traits>(ss), p(ss.p.data()) {}
};

template <class Traits>
CUTE_DEVICE auto bwd_smem(typename Traits::SharedStorage& ss) {
  if constexpr (Traits::kRoleSplit) {
    return BwdSmemTensorsSplit<Traits>(ss);
  } else {
    return BwdSmemTensors<Traits>(ss);
  }
}

// dK or dV of one consumer warpgroup (its 64 keys from key0) to global memory as Element, rows
// past seqlen_k dropped; pairs of adjacent columns as one 32-bit store.
template <class Traits, class TensorAcc>
CUTE_DEVICE void store_dkv(TensorAcc const& acc, float scale, typename Traits::Element* base, int64_t row_stride,
                           int key0, int seqlen_k, int tid) {
  using Element = typename Traits::Element;
  typename Traits::MmaKV mma_kv;
  auto thr = mma_kv.get_thread_slice(tid);
  Tensor coords = thr.partition_C(make_identity_tensor(select<0, 1>(typename Traits::TileKV{})));
  CUTE_UNROLL
  for (int i = 0; i < size(acc); i += 2) {
    const int row = key0 + get<0>(coords(i)), col = get<1>(coords(i));
    if (row < seqlen_k) {
      const Element pair[2] = {Element(acc(i) * scale), Element(acc(i + 1) * scale)};
      uint32_t packed;
      memcpy(&packed, pair, sizeof(packed));
      *reinterpret_cast<uint32_t*>(base + row * row_stride + col) = packed;  // col even, row_stride even
    }
  }
}

// The dQ writer (one thread of the producer warpgroup). Step i of the walk (i = step - m_min; query
// tile m = walk.tile(step), bwd_walk.h) uses sdQ stage s = i % kDQStages: wait until all consumer
// threads wrote their parts of it (dq_full[s], completion i / kDQStages), reduce-add it into dq_accum's
// tile m, and once the reduce of step i - (kDQStages - 1) has read its stage (bulk wait_group.read)
// hand that stage back (dq_empty, one arrival). The consumers wait on dq_empty before writing a stage
// (bwd_mainloop.h), so none waits for the reduce of the block it just finished.
// kTurns (deterministic, p.dq_semaphore_ptr set): the adds into each tile take turns by K/V block
// (dq_turns.h); the semaphore's address is recomputed from the kernel parameters at each use (the
// writer runs in the producer's 24 registers).
// The turn of K/V block n_block at query tile m: n_block (ascending; non-causal, every K/V block adds
// into every tile and all start at tile 0). Causal with kDqTurnsCausalDescending: N(m) - 1 - n_block,
// N(m) = the K/V blocks that add into tile m (those with m_min(n) <= m, q_block_range): the last of
// them reaches tile m first (its first tile), the one before it one K/V block's worth of tiles later,
// so no block waits long. Ascending, K/V block n waits at its first tile m_min(n) until blocks
// 0 .. n - 1 have walked there (0.49-0.66x the default backward at d = 128 causal on the H200). The
// kernel then launches the causal kTurns blocks last-first (bwd_kernel: n_block = gridDim.x - 1 -
// blockIdx.x) so that the block waited for is always resident.
template <class Traits, bool kCausal>
CUTE_DEVICE int dq_turn_number(const BwdParams& p, int m, int n_block) {
  if constexpr (kCausal && kDqTurnsCausalDescending) {
    return dq_tile_adders<Traits::kBlockM, Traits::kBlockN>(m, p.seqlen_q, p.seqlen_k, true) - 1 - n_block;
  } else {
    return n_block;
  }
}

// Query tile m's semaphore: entry m of its (batch, head)'s seqlen_q_rounded / kBwdSemaphoreRows (tiles of
// at least kBwdSemaphoreRows rows are no more than those entries).
template <class Traits>
CUTE_DEVICE int* dq_turn_of(const BwdParams& p, int m) {
  static_assert(Traits::kBlockM >= kBwdSemaphoreRows, "one semaphore per query tile");
  const int64_t head_row0 = (int64_t(blockIdx.z) * p.nheads + blockIdx.y) * (p.seqlen_q_rounded / kBwdSemaphoreRows);
  return p.dq_semaphore_ptr + head_row0 + m;
}

// Store-first kernels (bwd_api.h bwd_store_first) with the semaphores given: the first block to reach
// each tile stores instead of adding (dq_turns.h: a ticket; deterministic: turn 0), and the others
// wait for its store.
// FLASH_ATTN_CUDA_SM90_BWD_TICKET_EARLY=1 (off; not yet measured): the writer takes step i's ticket before it
// waits for the consumers' dq_full of step i, not after, so the atomic's round trip (returned value) runs
// under that wait instead of between it and the reduce-add. Who is first may change (a block whose writer
// is idle earlier), never that exactly one block stores.
#ifndef FLASH_ATTN_CUDA_SM90_BWD_TICKET_EARLY
#define FLASH_ATTN_CUDA_SM90_BWD_TICKET_EARLY 0
#endif
constexpr bool kBwdTicketEarly = FLASH_ATTN_CUDA_SM90_BWD_TICKET_EARLY != 0;
template <class Traits, bool kTurns, bool kCausal, bool kDropout, class Smem, class TmaDQ, class TmaDQStore, class GDQ,
          class Walk>
CUTE_DEVICE void bwd_store_dq(Smem const& sm, TmaDQ const& tma_dq, [[maybe_unused]] TmaDQStore const& tma_dq_store,
                              GDQ const& gdQ, Walk const& walk, const BwdParams& p, int n_block) {
  constexpr int kS = Traits::kDQStages;
  constexpr bool kStoreFirst = kStoreFirstOf<Traits, kCausal, kDropout>;
  // (TMA, stage) and (TMA, m_blocks); the store descriptor has the same boxes, so the same partition
  auto [tdQgdQ, tdQsdQ] = tma_partition(tma_dq, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sm.dq), group_modes<0, 2>(gdQ));
  [[maybe_unused]] const bool store_first = kStoreFirst && p.dq_semaphore_ptr != nullptr;
#pragma unroll 1
  for (int step = walk.m_min; step < walk.m_max; ++step) {
    const int i = step - walk.m_min, stage = i % kS;
    const int m = walk.tile(step);
    // first: this block stores the tile (kStoreFirst) instead of adding into it.
    [[maybe_unused]] bool first = false;
    if constexpr (!kTurns && kStoreFirst && kBwdTicketEarly) {  // the atomic's round trip under the dq_full wait
      first = store_first && dq_first_ticket(dq_turn_of<Traits>(p, m));
    }
    cutlass::arch::ClusterBarrier::wait(sm.dq_full + stage, (i / kS) & 1);
    if constexpr (kTurns) {  // the semaphores are given (launch_bwd_main)
      const int turn = dq_turn_number<Traits, kCausal>(p, m, n_block);
      first = kStoreFirst && turn == 0;
      dq_turn_wait(dq_turn_of<Traits>(p, m), turn);
    } else if constexpr (kStoreFirst) {
      if constexpr (!kBwdTicketEarly) { first = store_first && dq_first_ticket(dq_turn_of<Traits>(p, m)); }
      if (store_first && !first) { dq_first_wait(dq_turn_of<Traits>(p, m)); }
    }
    if constexpr (kStoreFirst) {
      if (first) {
        copy(tma_dq_store, tdQsdQ(_, stage), tdQgdQ(_, m));
      } else {
        copy(tma_dq, tdQsdQ(_, stage), tdQgdQ(_, m));
      }
    } else {
      copy(tma_dq, tdQsdQ(_, stage), tdQgdQ(_, m));
    }
    tma_store_arrive();
    if constexpr (kTurns) {
      dq_turn_pass(dq_turn_of<Traits>(p, m));
    } else if constexpr (kStoreFirst) {
      if (first) { dq_first_pass(dq_turn_of<Traits>(p, m)); }
    }
    tma_store_wait<kS - 1>();  // the reduces of blocks <= i - (kS - 1) have read shared memory
    if (i >= kS - 1) { cutlass::arch::ClusterBarrier::arrive(sm.dq_empty + (i - (kS - 1)) % kS); }
  }
  tma_store_wait<0>();  // shared memory stays valid until the last reduce read it
}

// A consumer of the role-split tile: consumer 0 accumulates dV, consumer 1 dK (64 keys x d each),
// both add their dQ halves into dq_accum rows [scratch_row0, + seqlen_q_rounded) (row-major), then
// store their gradient. kDropout: drop as BwdMainloopSplit reads it; dV = (P o M / (1 - p))^T dO.
template <class Traits, bool kCausal, bool kDropout = false, class Smem, class Pipeline>
CUTE_DEVICE void bwd_consumer_split(Smem const& sm, typename Traits::SharedStorage& ss, Pipeline& pipe_q,
                                    Pipeline& pipe_do, const BwdParams& p, int cwg, int tid, int n0, int m_min,
                                    int m_max, int64_t scratch_row0, BwdDropoutArgs const& drop = BwdDropoutArgs{}) {
  using Element = typename Traits::Element;
  using Mainloop = BwdMainloopSplit<Traits, kCausal, kDropout>;
  using TileKV = decltype(select<0, 1>(typename Traits::TileKV{}));
  Tensor acc = partition_fragment_C(typename Traits::MmaKV{}, TileKV{});  // ((2,2,d/8),1,1) fp32: dV or dK
  clear(acc);
  float* dq_rows = p.dq_accum_ptr + scratch_row0 * Traits::kHeadDim;
  if (m_max > m_min) {
    cutlass::arch::ClusterTransactionBarrier::wait(&ss.barrier_kv, 0);
    if (cwg == 0) {
      Mainloop::run_p_dv(sm, pipe_q, pipe_do, acc, tid, n0, m_min, m_max, p.seqlen_q, p.seqlen_k, p.scale_log2,
                         dq_rows, drop);
    } else {
      Mainloop::run_ds_dk(sm, pipe_q, pipe_do, acc, tid, m_min, m_max, dq_rows, drop);
    }
  }
  const int batch = blockIdx.z, head = blockIdx.y;
  if (cwg == 0) {
    Element* dv = static_cast<Element*>(p.dv_ptr) + batch * p.dv_batch_stride + head * p.dv_head_stride;
    store_dkv<Traits>(acc, kDropout ? p.rp_dropout : 1.f, dv, p.dv_row_stride, n0, p.seqlen_k, tid);
  } else {
    Element* dk = static_cast<Element*>(p.dk_ptr) + batch * p.dk_batch_stride + head * p.dk_head_stride;
    store_dkv<Traits>(acc, p.softmax_scale, dk, p.dk_row_stride, n0, p.seqlen_k, tid);
  }
}


// The mask words after SharedStorage (kDropout): 512 B per consumer warpgroup (the role-split tile
// makes its mask in registers, bwd_mainloop_split.h: none).
template <class Traits>
constexpr int kDropoutSmemBytes =
    Traits::kRoleSplit ? 0 : Traits::kNConsumerWG * BwdDropoutT::kWords * int(sizeof(uint32_t));

// kTurns: deterministic (p.dq_semaphore_ptr set; tiles with the dQ writer only): the writer's adds
// take turns (dq_turns.h). A variant of its own: with the turn code in the plain kernel, ptxas
// allocated the consumers' registers differently (d = 128 causal: 12 B of spills against 4, 3 % slower
// at 1k on the H200).
template <class Traits, bool kCausal, bool kDropout = false, bool kTurns = false>
__global__ void __launch_bounds__(Traits::kNThreads, 1)
    bwd_kernel(CUTE_GRID_CONSTANT typename BwdTmaFor<Traits, kCausal, kDropout>::Params const kp) {
  using Element = typename Traits::Element;
  using Storage = typename Traits::SharedStorage;
  using Pipeline = typename Traits::Pipeline;
  constexpr int kD = Traits::kHeadDim;
  constexpr int kM = Traits::kBlockM;

  extern __shared__ __align__(1024) char smem_raw[];
  Storage& ss = *reinterpret_cast<Storage*>(smem_raw);
  const BwdParams& p = kp.p;

  const int wg = cutlass::canonical_warp_group_idx();
  // Descending causal turns: last K/V block first (dq_turn_number: the block a tile waits for is
  // launched earlier).
  constexpr bool kLastFirst = kTurns && kCausal && kDqTurnsCausalDescending;
  const int n_block = kLastFirst ? int(gridDim.x) - 1 - int(blockIdx.x) : int(blockIdx.x);
  const int head = blockIdx.y, batch = blockIdx.z;
  const int head_k = head / (p.nheads / p.nheads_k);
  const int n0 = n_block * Traits::kBlockN;
  int m_min, m_max;
  q_block_range<Traits, kCausal>(p, n0, m_min, m_max);
  constexpr bool kRotate = kBwdRotates<Traits::kHeadDim, kCausal, kDropout, kTurns, Traits::kDQByTma>;
  const auto walk = make_q_walk<kRotate>(m_min, m_max, n_block, int(gridDim.x));  // step -> query tile

  typename Pipeline::Params pp;
  pp.transaction_bytes = Traits::kTmaBytesQ;
  pp.role = wg == 0 ? Pipeline::ThreadCategory::Producer : Pipeline::ThreadCategory::Consumer;
  pp.is_leader = threadIdx.x == 0;
  pp.num_consumers = Traits::kNConsumerThreads;
  Pipeline pipe_q(ss.pipe_q, pp, Shape<_1, _1, _1>{});
  Pipeline pipe_do(ss.pipe_do, pp, Shape<_1, _1, _1>{});
  if (threadIdx.x == 0) {
    cutlass::arch::ClusterTransactionBarrier::init(&ss.barrier_kv, 1);
    if constexpr (Traits::kDQByTma) {
      for (int s = 0; s < Traits::kDQStages; ++s) {
        cutlass::arch::ClusterBarrier::init(&ss.barrier_dq_full[s], Traits::kDQFullArrivals);
        cutlass::arch::ClusterBarrier::init(&ss.barrier_dq_empty[s], 1);
      }
    }
  }
  cutlass::arch::fence_barrier_init();
  __syncthreads();

  auto sm = bwd_smem<Traits>(ss);
  // Scratch rows of this (batch, head): lse_log2 / delta (seqlen_q_rounded,) float32.
  const int64_t scratch_row0 = (int64_t(batch) * p.nheads + head) * p.seqlen_q_rounded;

  if (wg == 0) {
    cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegs>();
    if (m_max <= m_min) { return; }
    if constexpr (Traits::kDQByTma) {
      if (threadIdx.x == 32) {
        Tensor mdQ = kp.tma_dq.get_tma_tensor(make_shape(p.seqlen_q_rounded, Int<kD>{}, p.nheads, p.batch));
        Tensor gdQ = local_tile(mdQ(_, _, head, batch), Shape<Int<kM>, Int<kD>>{}, make_coord(_, _0{}));  // (M, d, m_blocks)
        bwd_store_dq<Traits, kTurns, kCausal, kDropout>(sm, kp.tma_dq, kp.tma_dq_store, gdQ, walk, p, n_block);
        return;
      }
    }
    if (threadIdx.x != 0) { return; }
    using RowsD = Shape<Int<kM>, Int<kD>>;
    using KeysD = Shape<Int<Traits::kBlockN>, Int<kD>>;
    Tensor mQ = kp.tma_q.get_tma_tensor(make_shape(p.seqlen_q, Int<kD>{}, p.nheads, p.batch));
    Tensor mdO = kp.tma_do.get_tma_tensor(make_shape(p.seqlen_q, Int<kD>{}, p.nheads, p.batch));
    Tensor mK = kp.tma_k.get_tma_tensor(make_shape(p.seqlen_k, Int<kD>{}, p.nheads_k, p.batch));
    Tensor mV = kp.tma_v.get_tma_tensor(make_shape(p.seqlen_k, Int<kD>{}, p.nheads_k, p.batch));
    Tensor gQ = local_tile(mQ(_, _, head, batch), RowsD{}, make_coord(_, _0{}));  // (M, d, m_blocks)
    Tensor gdO = local_tile(mdO(_, _, head, batch), RowsD{}, make_coord(_, _0{}));
    Tensor gK = local_tile(mK(_, _, head_k, batch), KeysD{}, make_coord(n_block, _0{}));  // (N, d)
    Tensor gV = local_tile(mV(_, _, head_k, batch), KeysD{}, make_coord(n_block, _0{}));

    cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&ss.barrier_kv, Traits::kTmaBytesKV);
    {
      auto [tKgK, tKsK] = tma_partition(kp.tma_k, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sm.k), group_modes<0, 2>(gK));
      copy(kp.tma_k.with(ss.barrier_kv), tKgK, tKsK);
      auto [tVgV, tVsV] = tma_partition(kp.tma_v, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sm.v), group_modes<0, 2>(gV));
      copy(kp.tma_v.with(ss.barrier_kv), tVgV, tVsV);
    }
    auto [tQgQ, tQsQ] = tma_partition(kp.tma_q, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sm.q), group_modes<0, 2>(gQ));
    auto [tdOgdO, tdOsdO] =
        tma_partition(kp.tma_do, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sm.dout), group_modes<0, 2>(gdO));
    // Q and dO advance together (same stage count, one of each per block): one state for both. Not
    // unrolled: with the dQ writer in the same 24-register warpgroup, ptxas's 4-way unrolled loader
    // spilled 44 bytes.
    auto st = cutlass::make_producer_start_state<Pipeline>();
#pragma unroll 1
    for (int step = m_min; step < m_max; ++step) {
      const int m = walk.tile(step);  // query tile
      pipe_q.producer_acquire(st);
      uint64_t* bar_q = pipe_q.producer_get_barrier(st);
      copy(kp.tma_q.with(*bar_q, 0, bwd_hint_qdo()), tQgQ(_, m), tQsQ(_, st.index()));
      copy_scratch_rows<Traits>(p.lse_log2_ptr + scratch_row0, kLseLog2Pad, m, p.seqlen_q_rounded, bar_q, sm.lse_log2 + st.index() * kM);
      pipe_do.producer_acquire(st);
      uint64_t* bar_do = pipe_do.producer_get_barrier(st);
      copy(kp.tma_do.with(*bar_do, 0, bwd_hint_qdo()), tdOgdO(_, m), tdOsdO(_, st.index()));
      copy_scratch_rows<Traits>(p.delta_ptr + scratch_row0, kDeltaPad, m, p.seqlen_q_rounded, bar_do, sm.delta + st.index() * kM);
      ++st;
    }
    return;
  }

  cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegs>();
  const int cwg = wg - 1;
  const int tid = threadIdx.x % 128;
  if constexpr (Traits::kRoleSplit) {
    if constexpr (kDropout) {
      bwd_consumer_split<Traits, kCausal, true>(sm, ss, pipe_q, pipe_do, p, cwg, tid, n0, m_min, m_max, scratch_row0,
                                                BwdDropoutArgs{&p, batch, head, nullptr});
    } else {
      bwd_consumer_split<Traits, kCausal>(sm, ss, pipe_q, pipe_do, p, cwg, tid, n0, m_min, m_max, scratch_row0);
    }
  } else {
    using TileKV = decltype(select<0, 1>(typename Traits::TileKV{}));
    Tensor tdKrdK = partition_fragment_C(typename Traits::MmaKV{}, TileKV{});  // ((2,2,d/8),1,1) fp32
    Tensor tdVrdV = partition_fragment_C(typename Traits::MmaKV{}, TileKV{});
    clear(tdKrdK);
    clear(tdVrdV);
    if (m_max > m_min) {
      cutlass::arch::ClusterTransactionBarrier::wait(&ss.barrier_kv, 0);
      if constexpr (kDropout) {
        static_assert(sizeof(Storage) % 16 == 0, "the mask words are read 16 bytes at a time");
        uint32_t* smask = reinterpret_cast<uint32_t*>(smem_raw + sizeof(Storage)) + BwdDropoutT::kWords * cwg;
        BwdMainloop<Traits, kCausal, true>::run(sm, pipe_q, pipe_do, tdKrdK, tdVrdV, cwg, tid, n0, walk,
                                                p.seqlen_q, p.seqlen_k, p.scale_log2,
                                                BwdDropoutArgs{&p, batch, head, smask});
      } else {
        BwdMainloop<Traits, kCausal>::run(sm, pipe_q, pipe_do, tdKrdK, tdVrdV, cwg, tid, n0, walk, p.seqlen_q,
                                          p.seqlen_k, p.scale_log2);
      }
    }
    const int key0 = n0 + Traits::kWGKeys * cwg;
    Element* dk = static_cast<Element*>(p.dk_ptr) + batch * p.dk_batch_stride + head * p.dk_head_stride;
    Element* dv = static_cast<Element*>(p.dv_ptr) + batch * p.dv_batch_stride + head * p.dv_head_stride;
    store_dkv<Traits>(tdKrdK, p.softmax_scale, dk, p.dk_row_stride, key0, p.seqlen_k, tid);
    store_dkv<Traits>(tdVrdV, kDropout ? p.rp_dropout : 1.f, dv, p.dv_row_stride, key0, p.seqlen_k, tid);  // dV = (P o M / (1 - p))^T dO
  }
}

}  // namespace flash::sm90
