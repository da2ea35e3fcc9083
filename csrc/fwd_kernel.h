// FlashAttention-2 forward kernel. One thread block per (Q block, head, batch); the Q tile stays
// in shared memory while K/V tiles stream through it (cp.async, one buffer each, the next
// load issued under the current MMAs). Each warp owns 16-row slabs of the Q tile, so the
// online softmax lives in registers with no inter-warp traffic.
#pragma once

#include <cute/tensor.hpp>

#include "copy_utils.h"
#include "dropout.h"
#include "kernel_traits.h"
#include "mask.h"
#include "params.h"
#include "score_mods.h"
#include "seq_info.h"
#include "softmax.h"
#include "tensor_utils.h"

namespace flash {

using namespace cute;

// Rows of a Q tile that see no key at all: O = 0, LSE = -inf.
template <typename Traits, class GO, class Lse>
CUTE_DEVICE void write_empty_tile(GO& gO, Lse& gLse, int valid_rows, int headdim) {
  using Element = typename Traits::Element;
  const int tid = threadIdx.x;
  typename Traits::GmemTiledCopyO gmem_copy_O;
  auto gmem_thr_O = gmem_copy_O.get_thread_slice(tid);
  Tensor tOgO = gmem_thr_O.partition_D(gO);                                      // (CPY, CPY_M, CPY_K)
  Tensor tOrO = make_fragment_like<Element>(tOgO);                               // (CPY, CPY_M, CPY_K)
  clear(tOrO);
  Tensor tOcO = gmem_thr_O.partition_D(make_identity_tensor(shape(gO)));         // (CPY, CPY_M, CPY_K)
  store_tile(gmem_copy_O, tOrO, tOgO, tOcO, valid_rows, headdim);
  for (int row = tid; row < valid_rows; row += Traits::kNThreads) { gLse(row) = -INFINITY; }
}

// kMods: score modifiers (softcap, ALiBi), a left window edge or varlen may be present. The plain
// instantiation (kMods = false) compiles none of their code: at 255 registers any extra
// runtime branch in the main loop reshuffled ptxas's allocation into spills (measured: 0 -> 44-64 B
// in the d=128 backward), so the features get their own instantiation, picked at launch.
// kDropout (with kMods): attention dropout (dropout.h), a third instantiation.
template <typename Traits, bool kMods, bool kDropout = false>
__global__ void __launch_bounds__(Traits::kNThreads, 1) fwd_kernel(__grid_constant__ const FwdParams params) {
  static_assert(kMods || !kDropout, "dropout rides on the feature instantiation");
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kHeadDim = Traits::kHeadDim;
  using TileQ = Shape<Int<kBlockM>, Int<kHeadDim>>;
  using TileKV = Shape<Int<kBlockN>, Int<kHeadDim>>;
  using TileS = Shape<Int<kBlockM>, Int<kBlockN>>;
  const int tid = threadIdx.x;

  const SeqInfo<kMods> seq(params, blockIdx.z, blockIdx.y);  // (batch, head)
  const VisibleKeys vk(seq.seqlen_q(), seq.seqlen_k(), params.window_left, params.window_right);
  // With a causal/window bound the last Q tiles do the most work: launch them first so the
  // long blocks do not form the tail of the grid.
  const int m_block = params.window_right >= 0 ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int head = blockIdx.y;
  const int batch = blockIdx.z;
  const int head_k = head / (params.nheads / params.nheads_k);  // GQA: q heads share a K/V head
  if constexpr (kDropout) { write_rng_state(params); }  // before any early return
  if constexpr (kMods) {
    if (m_block * kBlockM >= seq.seqlen_q()) { return; }  // varlen: past this sequence's end
  }
  const int valid_rows = min(kBlockM, seq.seqlen_q() - m_block * kBlockM);

  // ---------------------------------------------------------------- GLOBAL TILES
  // Varlen: batch strides are 0 and the sequence starts at row seq.q_row0() / seq.k_row0().
  Tensor mQ = gmem_rows<Element, kHeadDim>(
      params.q_ptr, batch * params.q_batch_stride + seq.q_row0() * params.q_row_stride + head * params.q_head_stride,
      seq.seqlen_q(), params.q_row_stride);                                                     // (seqlen_q, d)
  Tensor mK = gmem_rows<Element, kHeadDim>(
      params.k_ptr, batch * params.k_batch_stride + seq.k_row0() * params.k_row_stride + head_k * params.k_head_stride,
      seq.seqlen_k(), params.k_row_stride);                                                     // (seqlen_k, d)
  Tensor mV = gmem_rows<Element, kHeadDim>(
      params.v_ptr, batch * params.v_batch_stride + seq.k_row0() * params.v_row_stride + head_k * params.v_head_stride,
      seq.seqlen_k(), params.v_row_stride);                                                     // (seqlen_k, d)
  Tensor mO = gmem_rows<Element, kHeadDim>(
      params.o_ptr, batch * params.o_batch_stride + seq.q_row0() * params.o_row_stride + head * params.o_head_stride,
      seq.seqlen_q(), params.o_row_stride);                                                     // (seqlen_q, d)
  Tensor mLse = make_tensor(make_gmem_ptr(params.lse_ptr + seq.lse_offset()), make_shape(seq.seqlen_q()));  // (seqlen_q)

  Tensor gQ = local_tile(mQ, TileQ{}, make_coord(m_block, 0));                                 // (kBlockM, d)
  Tensor gK = local_tile(mK, TileKV{}, make_coord(_, 0));                                      // (kBlockN, d, n)
  Tensor gV = local_tile(mV, TileKV{}, make_coord(_, 0));                                      // (kBlockN, d, n)
  Tensor gO = local_tile(mO, TileQ{}, make_coord(m_block, 0));                                 // (kBlockM, d)
  Tensor gLse = local_tile(mLse, Shape<Int<kBlockM>>{}, make_coord(m_block));                  // (kBlockM)

  const KvBlockRange<kBlockM, kBlockN> range(vk, m_block);
  if (range.n_max <= range.n_min) {
    write_empty_tile<Traits>(gO, gLse, valid_rows, params.headdim);
    return;
  }

  // ---------------------------------------------------------------- SHARED TILES
  extern __shared__ __align__(128) char smem[];
  Tensor sQ = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(smem)), typename Traits::SmemLayoutQ{});  // (kBlockM, d)
  Tensor sK = make_tensor(sQ.data() + size(sQ), typename Traits::SmemLayoutKV{});               // (kBlockN, d)
  Tensor sV = make_tensor(sK.data() + size(sK), typename Traits::SmemLayoutKV{});              // (kBlockN, d)
  Tensor sVt = make_tensor(sV.data(), typename Traits::SmemLayoutVt{});                                    // (d, kBlockN)

  // ---------------------------------------------------------------- GLOBAL -> SHARED PARTITIONS
  typename Traits::GmemTiledCopyQKV gmem_copy;
  auto gmem_thr = gmem_copy.get_thread_slice(tid);
  Tensor tQgQ = gmem_thr.partition_S(gQ);                                         // (CPY, CPY_M, CPY_K)
  Tensor tQsQ = gmem_thr.partition_D(sQ);                                         // (CPY, CPY_M, CPY_K)
  Tensor tKgK = gmem_thr.partition_S(gK);                                         // (CPY, CPY_N, CPY_K, n)
  Tensor tKsK = gmem_thr.partition_D(sK);                                         // (CPY, CPY_N, CPY_K)
  Tensor tVgV = gmem_thr.partition_S(gV);                                         // (CPY, CPY_N, CPY_K, n)
  Tensor tVsV = gmem_thr.partition_D(sV);                                         // (CPY, CPY_N, CPY_K)
  Tensor tQcQ = gmem_thr.partition_S(make_identity_tensor(TileQ{}));              // (CPY, CPY_M, CPY_K) -> (row, col)
  Tensor tKVcKV = gmem_thr.partition_S(make_identity_tensor(TileKV{}));           // (CPY, CPY_N, CPY_K) -> (row, col)
  // Only the last K/V block can be ragged; it is always a masked step (needs_mask).
  auto load_k = [&](int n, auto check_rows) {
    load_tile<decltype(check_rows)::value>(gmem_copy, tKgK(_, _, _, n), tKsK, tKVcKV,
                                           seq.seqlen_k() - n * kBlockN, params.headdim);
  };
  auto load_v = [&](int n, auto check_rows) {
    load_tile<decltype(check_rows)::value>(gmem_copy, tVgV(_, _, _, n), tVsV, tKVcKV,
                                           seq.seqlen_k() - n * kBlockN, params.headdim);
  };

  // ---------------------------------------------------------------- MMA PARTITIONS
  typename Traits::TiledMma tiled_mma;
  auto thr_mma = tiled_mma.get_thread_slice(tid);
  Tensor tSrQ = thr_mma.partition_fragment_A(sQ);                                 // (MMA, MMA_M, MMA_K)
  Tensor tSrK = thr_mma.partition_fragment_B(sK);                                 // (MMA, MMA_N, MMA_K)
  Tensor tOrVt = thr_mma.partition_fragment_B(sVt);                               // (MMA, MMA_K=d/8, MMA_N)
  Tensor acc_o = partition_fragment_C(tiled_mma, TileQ{});                        // (MMA, MMA_M, d/8) fp32
  Tensor acc_o_rc = make_tensor(acc_o.data(), rowcol_view(acc_o.layout()));       // (rows, d)
  clear(acc_o);

  auto smem_copy_Q = make_tiled_copy_A(typename Traits::SmemCopyAtom{}, tiled_mma);
  auto smem_copy_K = make_tiled_copy_B(typename Traits::SmemCopyAtom{}, tiled_mma);
  auto smem_copy_V = make_tiled_copy_B(typename Traits::SmemCopyAtomTransposed{}, tiled_mma);
  Tensor tSsQ = smem_copy_Q.get_thread_slice(tid).partition_S(sQ);                // (CPY, MMA_M, MMA_K)
  Tensor tSsK = smem_copy_K.get_thread_slice(tid).partition_S(sK);                // (CPY, MMA_N, MMA_K)
  Tensor tOsVt = smem_copy_V.get_thread_slice(tid).partition_S(sVt);              // (CPY, d/8, MMA_N)

  // Tile-local (row, col) of every S accumulator element, for masking and the LSE rows.
  Tensor tScS = thr_mma.partition_C(make_identity_tensor(TileS{}));               // (MMA, MMA_M, MMA_N)
  Tensor tScS_rc = make_tensor(tScS.data(), rowcol_view(tScS.layout()));          // (rows, kBlockN)

  constexpr int kRowsPerThread = decltype(size<0>(acc_o_rc))::value;
  OnlineSoftmax<kRowsPerThread> softmax;
  float alibi_slope = 0.f;  // score units; only the kMods instantiation reads it
  if constexpr (kMods) { alibi_slope = alibi_slope_units(params, batch, head); }
  DropoutRng rng{};  // only the kDropout instantiation reads it
  if constexpr (kDropout) { rng = dropout_rng(params, batch, head); }

  // ---------------------------------------------------------------- PROLOGUE
  // Blocks run from the last K/V block down, so the masked (diagonal / ragged) blocks come first.
  int n_block = range.n_max - 1;
  load_tile(gmem_copy, tQgQ, tQsQ, tQcQ, valid_rows, params.headdim);
  load_k(n_block, true_type{});
  cp_async_fence();

  // ---------------------------------------------------------------- MAIN LOOP
  // Per K/V block: S = Q K^T, mask, online softmax, O += P V. V(n) streams in under the
  // Q K^T MMAs and K(n-1) under softmax and P V. Two forms of the same loop, chosen per head
  // dim by measurement (fwd_tile_config.h): ptxas spills differently in each.
  auto needs_mask = [&](int n) { return KvBlockRange<kBlockM, kBlockN>::needs_mask(vk, m_block, n); };
  if constexpr (Traits::kSplitMaskedLoop) {
    // Split: the masked blocks (ragged end, diagonal, right window edge) run first in their
    // own loop; the interior loop carries no mask or row-check code; blocks crossing a left
    // window edge run last, masked again.
    auto step = [&](int n, auto masked) __attribute__((always_inline)) {
      Tensor acc_s = partition_fragment_C(tiled_mma, TileS{});                   // (MMA, MMA_M, MMA_N) fp32
      Tensor acc_s_rc = make_tensor(acc_s.data(), rowcol_view(acc_s.layout()));  // (rows, kBlockN)
      clear(acc_s);
      cp_async_wait<0>();  // K(n) (and Q) landed ...
      __syncthreads();     // ... for every thread; and every warp is done reading V(n+1)
      load_v(n, masked);   // only a masked block can be ragged
      cp_async_fence();
      gemm_ss(acc_s, tSrQ, tSrK, tSsQ, tSsK, tiled_mma, smem_copy_Q, smem_copy_K);  // S = Q K^T
      if constexpr (kMods) {
        apply_softcap(acc_s, params);
        apply_alibi(acc_s_rc, tScS_rc, alibi_slope, m_block * kBlockM, n * kBlockN, vk.shift);
      }
      if constexpr (decltype(masked)::value) {
        apply_mask(acc_s_rc, tScS_rc, vk, m_block * kBlockM, n * kBlockN);
      }
      cp_async_wait<0>();  // V(n) landed ...
      __syncthreads();     // ... for every thread; and every warp is done reading K(n)
      if (n > range.n_min) {
        load_k(n - 1, false_type{});  // never the last block: never ragged
        cp_async_fence();
      }
      softmax.update(acc_s_rc, acc_o_rc, params.scale_log2);  // row sums of the undropped P
      if constexpr (kDropout) { apply_dropout<1, false>(acc_s_rc, tScS_rc, rng, m_block * kBlockM, n * kBlockN); }
      Tensor rP = convert_type<Element>(acc_s);                                   // (MMA, MMA_M, MMA_N)
      Tensor tOrP = make_tensor(rP.data(), acc_as_a_operand(rP.layout()));        // (MMA, MMA_M, kBlockN/16)
      gemm_rs(acc_o, tOrP, tOrVt, tOsVt, tiled_mma, smem_copy_V);                 // O += P V
    };
    CUTE_NO_UNROLL
    for (; n_block >= range.n_min && needs_mask(n_block); --n_block) { step(n_block, true_type{}); }
    if constexpr (kMods) {
      // First block that a left window edge does not cut (range.n_min when there is none).
      const int n_left = max(range.n_min, KvBlockRange<kBlockM, kBlockN>::first_block_past_left_edge(vk, m_block));
      CUTE_NO_UNROLL
      for (; n_block >= n_left; --n_block) { step(n_block, false_type{}); }
      CUTE_NO_UNROLL
      for (; n_block >= range.n_min; --n_block) { step(n_block, true_type{}); }
    } else {
      CUTE_NO_UNROLL
      for (; n_block >= range.n_min; --n_block) { step(n_block, false_type{}); }
    }
  } else {
    // Single loop, mask decided per block at run time, every load checks rows. The body is
    // written out here rather than shared with `step` above: the shared-lambda form of this
    // loop measured 4-5 % slower at d=128 in one run (benchmarks/NOTES.md).
    CUTE_NO_UNROLL
    for (; n_block >= range.n_min; --n_block) {
      Tensor acc_s = partition_fragment_C(tiled_mma, TileS{});                   // (MMA, MMA_M, MMA_N) fp32
      Tensor acc_s_rc = make_tensor(acc_s.data(), rowcol_view(acc_s.layout()));  // (rows, kBlockN)
      clear(acc_s);
      cp_async_wait<0>();
      __syncthreads();
      load_v(n_block, true_type{});
      cp_async_fence();
      gemm_ss(acc_s, tSrQ, tSrK, tSsQ, tSsK, tiled_mma, smem_copy_Q, smem_copy_K);  // S = Q K^T
      if constexpr (kMods) {
        apply_softcap(acc_s, params);
        apply_alibi(acc_s_rc, tScS_rc, alibi_slope, m_block * kBlockM, n_block * kBlockN, vk.shift);
      }
      if (needs_mask(n_block)) { apply_mask(acc_s_rc, tScS_rc, vk, m_block * kBlockM, n_block * kBlockN); }
      cp_async_wait<0>();
      __syncthreads();
      if (n_block > range.n_min) {
        load_k(n_block - 1, true_type{});
        cp_async_fence();
      }
      softmax.update(acc_s_rc, acc_o_rc, params.scale_log2);
      if constexpr (kDropout) {
        apply_dropout<1, false>(acc_s_rc, tScS_rc, rng, m_block * kBlockM, n_block * kBlockN);
      }
      Tensor rP = convert_type<Element>(acc_s);                                   // (MMA, MMA_M, MMA_N)
      Tensor tOrP = make_tensor(rP.data(), acc_as_a_operand(rP.layout()));        // (MMA, MMA_M, kBlockN/16)
      gemm_rs(acc_o, tOrP, tOrVt, tOsVt, tiled_mma, smem_copy_V);                 // O += P V
    }
  }

  // ---------------------------------------------------------------- EPILOGUE
  Tensor lse = make_tensor<float>(Shape<Int<kRowsPerThread>>{});                  // (rows)
  softmax.finalize(acc_o_rc, lse, kMods ? score_unit(params) : params.softmax_scale);
  if constexpr (kDropout) {  // O = (P o mask) V / (1 - p) / rowsum(P)
    CUTE_UNROLL
    for (int i = 0; i < size(acc_o); ++i) { acc_o(i) *= params.rp_dropout; }
  }

  // LSE: the first thread of each quad owns its rows.
  if (get<1>(tScS_rc(0, 0)) == 0) {
    CUTE_UNROLL
    for (int r = 0; r < kRowsPerThread; ++r) {
      const int row = get<0>(tScS_rc(r, 0));
      if (row < valid_rows) { gLse(row) = lse(r); }
    }
  }

  // O: registers -> shared (Q's buffer, free once every warp is past its last Q K^T) -> global
  // in 16-B vectors.
  Tensor rO = convert_type<Element>(acc_o);                                       // (MMA, MMA_M, d/8)
  Tensor sO = make_tensor(sQ.data(), typename Traits::SmemLayoutO{});             // (kBlockM, d)
  auto smem_copy_O = make_tiled_copy_C(typename Traits::SmemCopyAtomO{}, tiled_mma);
  auto smem_thr_O = smem_copy_O.get_thread_slice(tid);
  __syncthreads();
  copy(smem_copy_O, smem_thr_O.retile_S(rO), smem_thr_O.partition_D(sO));
  __syncthreads();

  typename Traits::GmemTiledCopyO gmem_copy_O;
  auto gmem_thr_O = gmem_copy_O.get_thread_slice(tid);
  Tensor tOsO = gmem_thr_O.partition_S(sO);                                       // (CPY, CPY_M, CPY_K)
  Tensor tOgO = gmem_thr_O.partition_D(gO);                                       // (CPY, CPY_M, CPY_K)
  Tensor tOrO = make_fragment_like(tOgO);                                         // (CPY, CPY_M, CPY_K)
  copy(gmem_copy_O, tOsO, tOrO);
  Tensor tOcO = gmem_thr_O.partition_D(make_identity_tensor(TileQ{}));            // (CPY, CPY_M, CPY_K) -> (row, col)
  store_tile(gmem_copy_O, tOrO, tOgO, tOcO, valid_rows, params.headdim);
}

}  // namespace flash
