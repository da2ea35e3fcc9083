// The persistent sm90 forward (issue 11): fwd_kernel.h's CTA (producer warpgroup, kNConsumerWG = 2
// or 3 consumer warpgroups of 64 rows) looping over the tiles fwd_scheduler.h gives it, grid =
// persistent_grid(): the next tile's first K block and Q load under the previous tile's epilogue,
// one prologue (barrier init, setmaxnreg) per CTA instead of per tile.
//   producer (thread 0): per non-empty tile, K of the first block, then Q of warpgroup c once
//     q_empty[c] says c no longer reads its Q rows (PersistentSmem below), then V of the first
//     block and the remaining K/V blocks, through the same two PipelineTmaAsync pipelines as
//     fwd_kernel.h;
//   consumers: wait q_full[c], FwdMainloop::run_blocks, FwdEpilogue::run (O through shared memory
//     and a TMA store). q_empty[c]: with an O buffer of its own (d <= 128) every thread of c arrives
//     after its last S = QK^T wait of the tile; else (d = 256) thread 0 after its tma_store_wait.
// State that crosses tiles (benchmarks/NOTES.md, "Hopper forward (issue 11)", v4, has the audit):
//   - K/V pipeline states: one producer state, one consumer state per warpgroup, never reset. Per
//     non-empty tile every role sees the same kv_block_range, so the producer issues exactly the
//     K and V blocks both warpgroups wait for and release; a tile with no key issues, waits and
//     releases nothing (its rows get O = 0, LSE = -inf by plain stores: run_empty).
//   - Q: the j-th non-empty tile of the CTA waits parity j & 1 of q_full[c] (consumers) and, for
//     j >= 1, phase j - 1 of q_empty[c] (producer); neither side can get two phases ahead.
//   - GEMM turns (kOverlap): one token circulates 0 -> 1 (-> 2) -> 0. The last warpgroup passes
//     warpgroup 0 its first turn once, before the loop (not warpgroup 0 itself: no warp arrives
//     twice in one barrier generation). All warpgroups run the same blocks of the same tiles, each
//     block one wait on the own turn and one pass, so the pass the last warpgroup makes in a tile's
//     last block is warpgroup 0's first turn of the next.
//   - __syncwarp() at the top of each consumer tile: thread 0's q_empty / TMA-store branch of the
//     last tile must not leave warp 0 diverged at the next tile's aligned bar.sync and wgmma.
//   - Causal tile order (fwd_scheduler.h): dynamic. Only the producer thread draws tiles (its first,
//     then one after each tile's last load: atomicAdd(counter, 1)) and publishes every index, empty
//     tiles and the final out-of-range one included, in tile_slot[j & 1] for the consumers' j-th tile:
//     it waits tile_empty[j & 1] (phase of tile j - 2, for j >= 2: all kNConsumerThreads consumer
//     threads have read that slot), writes the slot, arrives on tile_full[j & 1] (release); each
//     consumer thread waits tile_full[j & 1] parity (j >> 1) & 1 (acquire), reads the slot, arrives on
//     tile_empty[j & 1], and stops at the out-of-range index. Both sides see the same tile list, so
//     the per-tile protocol above holds unchanged. tools/sm90_persistent_model.py (dynamic=True) runs
//     it on several CTAs sharing one counter: every tile exactly once, no deadlock. Non-causal: the
//     same ring for d = 64's tile (kDynamicNonCausal below), else static (the helpers below reduce to
//     t = blockIdx.x; t += gridDim.x).
// Built with FLASH_ATTN_CUDA_SM90_PERSISTENT (fwd_launch.h), the default build's sm90 forward; the
// one-tile kernel (fwd_kernel.h) only with FLASH_ATTN_CUDA_SM90_PERSISTENT=0 or both.
// Every mbarrier wait goes through watchdog.h (a trap with the wait's site in FLASH_ATTN_SM90_WATCHDOG
// debug builds; the plain wait otherwise).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/pipeline/sm90_pipeline.hpp>

#include "../dropout.h"
#include "../params.h"
#include "fwd_epilogue.h"
#include "fwd_kernel.h"
#include "fwd_mainloop.h"
#include "fwd_scheduler.h"
#include "fwd_softmax.h"
#include "fwd_tma.h"
#include "watchdog.h"

namespace flash::sm90 {

using namespace cute;

// The drawing kernels' tile ring (see above): the producer thread's side, publishing its j-th index t
// (j = ss.tile_count, in shared memory: the producer thread's 32-40 registers hold no more loop state).
template <class Storage>
CUTE_DEVICE void publish_tile(Storage& ss, int t) {
  volatile int* count = &ss.tile_count;
  const int j = *count;
  if (j >= 2) { mbar_wait(&ss.tile_empty[j & 1], uint32_t((j >> 1) - 1) & 1u, WaitSite::kTileEmpty, t, j); }
  *reinterpret_cast<volatile int*>(&ss.tile_slot[j & 1]) = t;
  asm volatile("" ::: "memory");  // the slot store before the arrival (mbarrier.arrive: release.cta)
  cutlass::arch::ClusterBarrier::arrive(&ss.tile_full[j & 1]);
  *count = j + 1;
}

// A consumer thread's side: the index of its j-th tile.
template <class Storage>
CUTE_DEVICE int receive_tile(Storage& ss, int j) {
  mbar_wait(&ss.tile_full[j & 1], uint32_t(j >> 1) & 1u, WaitSite::kTileFull, -1, j);
  asm volatile("" ::: "memory");  // the slot load after the wait (acquire)
  const int t = *reinterpret_cast<volatile int*>(&ss.tile_slot[j & 1]);
  asm volatile("" ::: "memory");  // ... and before this thread's release of the slot
  cutlass::arch::ClusterBarrier::arrive(&ss.tile_empty[j & 1]);
  return t;
}

// Non-causal tiles from the counter too, for d = 64's three-warpgroup tile. Static round-robin gives
// CTA b the tiles b, b + gridDim.x, ...: when gridDim.x is a multiple of the query tiles per sequence
// (d = 64 at 512 / 1k / 2k / 4k: 3 / 6 / 11 / 22 tiles of 192 rows, 132 SMs) every short last tile
// lands on the same CTAs, which then finish early while the others set the makespan; drawn from the
// counter in the same index order, the tail is at most one tile. Lengths that are multiples of 192
// rarely occur, so this tile always draws (a run-time choice between the two loops in one kernel
// spilled 16 B of the producer's 32 registers; this one spills 8 B, one STL.64 / LDL.64 pair per V
// load in the producer thread, nvcc 13.0). Only the three-warpgroup tile: the drawing producer needs
// 32 registers, which its 3 x 160 split leaves free (32 + 3 x 160 = 512 x 128), while the
// two-warpgroup tiles would give 8 of their consumers' 240 (and divide the usual lengths, powers of
// two, evenly). The host's side: fwd_api.h fwd_draws_tiles.
// FLASH_ATTN_CUDA_SM90_DYNAMIC_NONCAUSAL=0: static (comparisons). Measured: benchmarks/NOTES.md,
// "Eleventh session".
#ifndef FLASH_ATTN_CUDA_SM90_DYNAMIC_NONCAUSAL
#define FLASH_ATTN_CUDA_SM90_DYNAMIC_NONCAUSAL 1
#endif
template <class Traits>
constexpr bool kDynamicNonCausal = FLASH_ATTN_CUDA_SM90_DYNAMIC_NONCAUSAL != 0 && Traits::kNConsumerWG == 3;

// The kernel draws its tiles from the counter (fwd_scheduler.h): causal always, non-causal where
// kDynamicNonCausal.
template <class Traits, bool kCausal>
constexpr bool kDrawsTiles = kCausal || kDynamicNonCausal<Traits>;

// The producer's first tile: blockIdx.x, or the first index of the launch's counter.
template <bool kDynamic>
CUTE_DEVICE int producer_first_tile(const FwdParams& p) {
  if constexpr (kDynamic) {
    return atomicAdd(p.sm90_tiles.counter, 1);
  } else {
    return int(blockIdx.x);
  }
}

// The producer's loop condition for tile t (kDynamic: publish it first, also the out-of-range one).
template <bool kDynamic, class Storage>
CUTE_DEVICE bool producer_has_tile(Storage& ss, int t, int num_tiles) {
  if constexpr (kDynamic) { publish_tile(ss, t); }
  return t < num_tiles;
}

// The producer's next tile after t (kDynamic: the next one left, from the counter; causal: the longest).
template <bool kDynamic>
CUTE_DEVICE int producer_next_tile(const FwdParams& p, int t) {
  if constexpr (kDynamic) {
    return atomicAdd(p.sm90_tiles.counter, 1);
  } else {
    return t + int(gridDim.x);
  }
}

// A consumer's j-th tile: the published one (kDynamic), else t_static (round-robin).
template <bool kDynamic, class Storage>
CUTE_DEVICE int consumer_tile(Storage& ss, int j, int t_static) {
  if constexpr (kDynamic) {
    return receive_tile(ss, j);
  } else {
    return t_static;
  }
}

// Shared memory of the persistent kernel: the one-tile kernel's (fwd_traits.h SharedStorage, whose
// offsets stay), plus, where it fits (d = 64: 88 + 24 KB, d = 128: 160 + 32 KB; not d = 256: 224 KB
// already), an O buffer of (kNConsumerWG x 64, d) of its own. With it a warpgroup frees its Q rows
// as soon as its last S = QK^T of the tile has completed (q_empty: every consumer thread arrives,
// FwdMainloop::run_blocks' q_free), so the producer loads the next tile's Q under that tile's last
// softmax, last PV GEMM and epilogue instead of after the O store; the epilogue waits for the
// previous store's read of the O buffer before it writes it (FwdEpilogue kDeferStoreWait).
// Without it (d = 256, or FLASH_ATTN_CUDA_SM90_SEPARATE_O=0 for comparisons) O goes through the Q
// rows and q_empty is thread 0's arrival after the store has read them.
#ifndef FLASH_ATTN_CUDA_SM90_SEPARATE_O
#define FLASH_ATTN_CUDA_SM90_SEPARATE_O 1
#endif
template <class Traits>
struct PersistentSmem {
  using Base = typename Traits::SharedStorage;
  static constexpr int kOElems = Traits::kNConsumerWG * cosize_v<typename Traits::SmemLayoutO>;  // (W x 64, d)
  struct WithO : Base {
    cute::array_aligned<typename Traits::Element, kOElems, 1024> o;
  };
  static constexpr bool kSeparateO = FLASH_ATTN_CUDA_SM90_SEPARATE_O != 0 && sizeof(WithO) <= 232448;
  using Storage = std::conditional_t<kSeparateO, WithO, Base>;
  static constexpr int kBytes = int(sizeof(Storage));
  static_assert(kBytes <= 232448, "exceeds the 227 KB per-block shared memory of sm90");
  // Arrivals that free a warpgroup's Q rows: all of its threads after their last S wait, or thread 0
  // after the O store read the rows.
  static constexpr int kQEmptyArrivals = kSeparateO ? 128 : 1;
};

// A consumer warpgroup whose rows all lie past seqlen_q runs FwdMainloop::idle_blocks (no GEMM, no
// softmax, no store) instead of computing rows nobody reads: d = 64's 192-row tile leaves one or two
// such warpgroups in the last query tile of every sequence whose length is not a multiple of 192 (1k:
// 64 live rows in the last of 6 tiles; with causal that tile is also the longest). Measured:
// benchmarks/NOTES.md "Tenth session". FLASH_ATTN_CUDA_SM90_IDLE_WG=0 computes them (comparisons).
#ifndef FLASH_ATTN_CUDA_SM90_IDLE_WG
#define FLASH_ATTN_CUDA_SM90_IDLE_WG 1
#endif
constexpr bool kIdleWarpgroups = FLASH_ATTN_CUDA_SM90_IDLE_WG != 0;

// FwdMainloop::run_blocks' q_free with kSeparateO: this thread's arrival on its warpgroup's q_empty.
struct ArriveQEmpty {
  uint64_t* q_empty;
  CUTE_DEVICE void operator()() const { cutlass::arch::ClusterBarrier::arrive(q_empty); }
};

// kClusterM > 1 (fwd_tile_table.h kFwdClusterM: d = 128 non-causal, an option): clusters of kClusterM CTAs
// (launched with the cluster attribute, gridDim.x a multiple of kClusterM) run adjacent query tiles of one
// (batch, head) in lockstep: the static order with the query tiles rounded up to a multiple of kClusterM
// (FwdScheduler), so both CTAs see the same tiles' key ranges and the same number of tiles. Each CTA's
// producer loads its 1 / kClusterM of every K / V block, multicast to every CTA of the cluster, whose
// full barrier expects the whole block (the pipelines' transaction bytes, unchanged); the pipelines' empty
// barriers take the releases of every CTA's consumer warpgroups (cutlass PipelineTmaAsync with the
// cluster shape: each warpgroup's release arrives on each CTA's barrier), so no producer overwrites a
// stage that some CTA still reads. Barrier init is made visible to the cluster before the first remote
// arrival (cluster barrier instead of __syncthreads), and each producer waits for the last releases of
// its stages before it exits (producer_tail): no arrival lands in an exited CTA's shared memory.
// A tile past seqlen_q (the cluster's last tile of an odd count) runs idle_blocks: it waits for and
// releases every block without GEMMs.
template <class Traits, bool kCausal, bool kDropout, int kClusterM = 1>
__global__ void __launch_bounds__(Traits::kNThreads, 1)
    fwd_kernel_persistent(CUTE_GRID_CONSTANT typename FwdTma<Traits, kClusterM>::Params const kp) {
  using Element = typename Traits::Element;
  using Smem = PersistentSmem<Traits>;
  using Storage = typename Smem::Storage;
  constexpr bool kSeparateO = Smem::kSeparateO;
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
  if constexpr (kDropout) { write_rng_state(p); }  // thread 0 of block (0, 0, 0), before any return
  constexpr bool kDynamic = kDrawsTiles<Traits, kCausal>;
  static_assert(kClusterM == 1 || (!kCausal && !kDropout && !kDynamic && kIdleWarpgroups),
                "clusters: the static non-causal kernel without dropout, with idle warpgroups");
  const FwdScheduler<Traits::kBlockM, kCausal, kDynamic, kClusterM> sched(p);
  using ClusterShape = Shape<Int<kClusterM>, _1, _1>;
  // The producer thread's registers: the drawing kernels' and the cluster kernels' need more than 24 (the
  // cluster's: 36 B of spill on 24 at d = 128, nvcc 13.0: the CTA rank, the multicast mask).
  constexpr bool kWideProducer = kDynamic || kClusterM > 1;
  const int wg = cutlass::canonical_warp_group_idx();

  typename Pipeline::Params pp;
  pp.transaction_bytes = Traits::kTmaBytesKV;
  pp.role = wg == 0 ? Pipeline::ThreadCategory::Producer : Pipeline::ThreadCategory::Consumer;
  pp.is_leader = threadIdx.x == 0;
  pp.num_consumers = Traits::kNConsumerThreads;
  Pipeline pipe_k(ss.pipe_k, pp, ClusterShape{});
  Pipeline pipe_v(ss.pipe_v, pp, ClusterShape{});
  if (threadIdx.x == 0) {
    CUTE_UNROLL
    for (int c = 0; c < kNWG; ++c) {
      QFull::init(&ss.q_full[c], 1);
      QEmpty::init(&ss.q_empty[c], Smem::kQEmptyArrivals);
    }
    if constexpr (kDynamic) {
      CUTE_UNROLL
      for (int s = 0; s < 2; ++s) {
        QEmpty::init(&ss.tile_full[s], 1);
        QEmpty::init(&ss.tile_empty[s], Traits::kNConsumerThreads);
      }
      ss.tile_count = 0;
    }
  }
  cutlass::arch::fence_barrier_init();
  if constexpr (kClusterM > 1) {  // every CTA's barriers initialised before any remote arrival or multicast
    cute::cluster_arrive_relaxed();
    cute::cluster_wait();
  } else {
    __syncthreads();
  }

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
  auto sQ_wg = [&](int c) {  // (64, d): consumer warpgroup c's Q rows (and its O rows without kSeparateO)
    return make_tensor(make_smem_ptr(ss.q.data() + c * kQWGElems), typename Traits::SmemLayoutQWG{});
  };
  auto sO_wg = [&](int c) {  // (64, d): consumer warpgroup c's O rows
    if constexpr (kSeparateO) {
      return make_tensor(make_smem_ptr(ss.o.data() + c * kQWGElems), typename Traits::SmemLayoutO{});
    } else {
      return sQ_wg(c);
    }
  };

  if (wg == 0) {
    cutlass::arch::warpgroup_reg_dealloc<kWideProducer ? Traits::kProducerRegsDynamic : Traits::kProducerRegs>();
    if (threadIdx.x != 0) { return; }
    PipelineState st_k = cutlass::make_producer_start_state<Pipeline>();
    PipelineState st_v = cutlass::make_producer_start_state<Pipeline>();
    int loaded = 0;  // non-empty tiles whose Q this CTA has loaded
    // This CTA's share of each K / V block (kClusterM > 1: multicast to the whole cluster).
    const int cta_rank = kClusterM > 1 ? int(cute::block_rank_in_cluster()) : 0;
    constexpr uint16_t kMcastMask = uint16_t((1u << kClusterM) - 1);
    for (int t = producer_first_tile<kDynamic>(p); producer_has_tile<kDynamic>(ss, t, sched.tiles(p));
         t = producer_next_tile<kDynamic>(p, t)) {
      int m_block, head, batch, n_min, n_max;
      sched.decode(t, m_block, head, batch, p);
      kv_block_range<Traits, kCausal>(p, m_block * Traits::kBlockM, n_min, n_max);
      if (n_max <= n_min) { continue; }  // the consumers skip it too (run_empty)
      const int head_k = head / (p.nheads / p.nheads_k);
      Tensor gK = local_tile(mK(_, _, head_k, batch), KVTile{}, make_coord(_, _0{}));  // (N, d, n_blocks)
      Tensor gV = local_tile(mV(_, _, head_k, batch), KVTile{}, make_coord(_, _0{}));
      auto [tKgK, tKsK] = tma_partition(kp.tma_k, cta_rank, Layout<Int<kClusterM>>{}, group_modes<0, 2>(sK),
                                        group_modes<0, 2>(gK));
      auto [tVgV, tVsV] = tma_partition(kp.tma_v, cta_rank, Layout<Int<kClusterM>>{}, group_modes<0, 2>(sV),
                                        group_modes<0, 2>(gV));
      pipe_producer_acquire(pipe_k, st_k, WaitSite::kKEmpty, t, n_max - 1);
      copy(kp.tma_k.with(*pipe_k.producer_get_barrier(st_k), kMcastMask, hint_kv()), tKgK(_, n_max - 1),
           tKsK(_, st_k.index()));
      ++st_k;
      CUTE_UNROLL
      for (int c = 0; c < kNWG; ++c) {
        if (loaded > 0) { mbar_wait(&ss.q_empty[c], uint32_t(loaded - 1) & 1u, WaitSite::kQEmpty, t, c); }
        Tensor gQ = local_tile(mQ(_, _, head, batch), WGTile{}, make_coord(m_block * kNWG + c, _0{}));
        Tensor sQ = sQ_wg(c);
        auto [tQgQ, tQsQ] = tma_partition(kp.tma_q, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
        QFull::arrive_and_expect_tx(&ss.q_full[c], Traits::kTmaBytesQWG);
        copy(kp.tma_q.with(ss.q_full[c], 0, hint_q()), tQgQ, tQsQ);
      }
      ++loaded;
      pipe_producer_acquire(pipe_v, st_v, WaitSite::kVEmpty, t, n_max - 1);
      copy(kp.tma_v.with(*pipe_v.producer_get_barrier(st_v), kMcastMask, hint_kv()), tVgV(_, n_max - 1),
           tVsV(_, st_v.index()));
      ++st_v;
      for (int n = n_max - 2; n >= n_min; --n) {
        pipe_producer_acquire(pipe_k, st_k, WaitSite::kKEmpty, t, n);
        copy(kp.tma_k.with(*pipe_k.producer_get_barrier(st_k), kMcastMask, hint_kv()), tKgK(_, n), tKsK(_, st_k.index()));
        ++st_k;
        pipe_producer_acquire(pipe_v, st_v, WaitSite::kVEmpty, t, n);
        copy(kp.tma_v.with(*pipe_v.producer_get_barrier(st_v), kMcastMask, hint_kv()), tVgV(_, n), tVsV(_, st_v.index()));
        ++st_v;
      }
    }
    if constexpr (kClusterM > 1) {  // every stage released by every CTA of the cluster: no arrival comes later
      pipe_k.producer_tail(st_k);
      pipe_v.producer_tail(st_v);
    }
    return;
  }

  cutlass::arch::warpgroup_reg_alloc<kWideProducer ? Traits::kConsumerRegsDynamic : Traits::kConsumerRegs>();
  const int cwg = wg - 1;
  const int tid = threadIdx.x % 128;
  Tensor sQ = sQ_wg(cwg);
  Tensor sO = sO_wg(cwg);
  PipelineState st_k, st_v;  // consumer start: stage 0, phase 0
  // kSeparateO: every thread frees the warpgroup's Q rows after its last S wait of the tile.
  const auto free_q = [&ss, cwg]() {
    if constexpr (kSeparateO) {
      return ArriveQEmpty{&ss.q_empty[cwg]};
    } else {
      return NoQFree{};
    }
  }();
  if constexpr (Traits::kOverlap) {
    // The last warpgroup hands warpgroup 0 (turn barrier 0) the first GEMM turn, once per kernel.
    if constexpr (FwdMainloop<Traits, kCausal, kDropout>::kTurns) {
      if (cwg == kNWG - 1) { cutlass::arch::NamedBarrier::arrive(2 * 128, 0u); }
    }
  }
  int loaded = 0;  // non-empty tiles this warpgroup has run
  for (int j = 0, t = consumer_tile<kDynamic>(ss, 0, blockIdx.x); t < sched.tiles(p);
       ++j, t = consumer_tile<kDynamic>(ss, j, t + int(gridDim.x))) {
    __syncwarp();  // also after receive_tile's spin-wait
    int m_block, head, batch, n_min, n_max;
    sched.decode(t, m_block, head, batch, p);
    const int m0 = m_block * Traits::kBlockM;
    const int row0 = m0 + kWGRows * cwg;
    kv_block_range<Traits, kCausal>(p, m0, n_min, n_max);
    float* lse_head = p.lse_ptr + (int64_t(batch) * p.nheads + head) * p.seqlen_q;
    if (n_max <= n_min) {
      Element* o_head = static_cast<Element*>(p.o_ptr) + int64_t(batch) * p.o_batch_stride + int64_t(head) * p.o_head_stride;
      FwdEpilogue<Traits, kDropout>::run_empty(o_head, p.o_row_stride, lse_head, row0, p.seqlen_q, tid);
      continue;
    }
    Tensor tOrO = partition_fragment_C(typename Traits::MmaPV{}, select<0, 1>(typename Traits::TilePV{}));  // ((2,2,d/8),1,1)
    clear(tOrO);
    OnlineSoftmax<2> softmax(p.scale_log2);
    DropoutRng rng{};  // only the kDropout variant reads it
    if constexpr (kDropout) { rng = dropout_rng(p, batch, head); }
    mbar_wait(&ss.q_full[cwg], uint32_t(loaded) & 1u, WaitSite::kQFull, t, cwg);
    if (kIdleWarpgroups && row0 >= p.seqlen_q) {  // no row of this warpgroup exists: no GEMM, no store
      FwdMainloop<Traits, kCausal, kDropout>::template idle_blocks<false>(pipe_k, pipe_v, st_k, st_v, cwg, m0, n_min,
                                                                         n_max, free_q);
      if constexpr (!kSeparateO) {
        // One arrival frees the rows: every warp of the warpgroup must have passed its q_full wait
        // first (the busy path has the epilogue's barriers; without kOverlap nothing else orders it).
        cutlass::arch::NamedBarrier::arrive_and_wait(128, epilogue_barrier<kNWG>(cwg));
        if (tid == 0) { QEmpty::arrive(&ss.q_empty[cwg]); }
      }
      ++loaded;
      continue;
    }
    FwdMainloop<Traits, kCausal, kDropout>::template run_blocks<false>(
        sQ, sK, sVt, pipe_k, pipe_v, st_k, st_v, tOrO, softmax, rng, cwg, tid, m0, n_min, n_max, p.seqlen_q,
        p.seqlen_k, free_q);
    Tensor gO = local_tile(mO(_, _, head, batch), WGTile{}, make_coord(m_block * kNWG + cwg, _0{}));
    FwdEpilogue<Traits, kDropout>::template run<kSeparateO>(tOrO, softmax, sO, gO, kp.tma_o, lse_head, row0,
                                                            p.seqlen_q, cwg, tid, p.rp_dropout);
    if constexpr (!kSeparateO) {
      if (tid == 0) { QEmpty::arrive(&ss.q_empty[cwg]); }  // after its tma_store_wait: the rows are free
    }
    ++loaded;
  }
  if constexpr (kSeparateO) {
    if (tid == 0) { tma_store_wait<0>(); }  // the last store has read the O buffer before the CTA exits
  }
}

}  // namespace flash::sm90
