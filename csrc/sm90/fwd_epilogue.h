// Epilogue of the sm90 forward, per consumer warpgroup: normalise O, write it as Element into
// the warpgroup's 64 rows of shared memory (the Q rows it no longer reads, or the persistent
// kernel's O buffer, fwd_persistent.h), one thread issues the
// TMA store (TMA clips rows >= seqlen_q), and the quad leaders write the LSE of rows < seqlen_q.
// kDropout: O is also scaled by rp_dropout = 1 / (1 - p) (folded into 1 / row sum; the LSE is the
// undropped softmax's).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "../params.h"
#include "fwd_layouts.h"
#include "fwd_mainloop.h"
#include "fwd_softmax.h"

namespace flash::sm90 {

using namespace cute;

template <class Traits, bool kDropout>
struct FwdEpilogue {
  using Element = typename Traits::Element;
  static constexpr int kRows = 2;

  // sO: this warpgroup's (64, d) tile in shared memory; gO_tma: TMA coordinates of the same rows
  // in global memory; lse_row: lse of the warpgroup's first row (nullptr-free: lse is required).
  // kDeferStoreWait (the persistent kernel with an O buffer of its own, fwd_persistent.h): the
  // store's read of sO is waited for before the next tile writes sO (here, at the start; the kernel
  // waits once more before it exits), not right after the store is issued.
  template <bool kDeferStoreWait = false, class TensorO, class SO, class GO, class TmaO>
  CUTE_DEVICE static void run(TensorO& tOrO, OnlineSoftmax<kRows>& softmax, SO& sO, GO const& gO_tma,
                              TmaO const& tma_o, float* lse_head, int row0, int seqlen_q, int cwg, int tid,
                              float rp_dropout) {
    float inv[kRows], lse[kRows];
    softmax.finalize(inv, lse);
    if constexpr (kDropout) {
      CUTE_UNROLL
      for (int r = 0; r < kRows; ++r) { inv[r] *= rp_dropout; }
    }
    Tensor o = make_tensor(tOrO.data(), acc_rowcol(tOrO.layout()));
    scale_rows(o, inv);

    typename Traits::MmaPV mma_pv;
    auto thr_pv = mma_pv.get_thread_slice(tid);
    // O to Element in registers, then stmatrix (8 x 8 blocks of 16-bit values, 16-byte rows: the
    // 128-byte swizzle keeps them whole) through the position-independent view (the swizzle on the
    // offset), so the stores stay shared-space: the element-wise stores through the swizzled
    // pointer compiled to generic ST.E.U16 (d = 128: 64 per thread) with 64-bit address arithmetic.
    Tensor rO = make_tensor<Element>(tOrO.layout());  // ((2,2,d/8),1,1)
    CUTE_UNROLL
    for (int i = 0; i < size(tOrO); ++i) { rO(i) = Element(tOrO(i)); }
    auto r2s_o = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, mma_pv);
    auto r2s_thr_o = r2s_o.get_thread_slice(tid);
    Tensor tOrO_r2s = r2s_thr_o.retile_S(rO);                                       // ((8,1),1,d/16)
    Tensor tOsO = r2s_thr_o.partition_D(as_position_independent_swizzle_tensor(sO));  // same, in sO
    const uint32_t barrier = epilogue_barrier<Traits::kNConsumerWG>(cwg);
    if constexpr (kDeferStoreWait) {  // the last tile's store has read sO before anyone writes it
      if (tid == 0) { tma_store_wait<0>(); }
      __syncwarp();  // warp 0 converged again before the aligned barrier
      cutlass::arch::NamedBarrier::arrive_and_wait(128, barrier);
    }
    copy(r2s_o, tOrO_r2s, tOsO);

    // The TMA (async proxy) reads what st.shared wrote: fence in every writing thread, then
    // the warpgroup barrier.
    cutlass::arch::fence_view_async_shared();
    cutlass::arch::NamedBarrier::arrive_and_wait(128, barrier);
    if (tid == 0) {
      auto [tOgO, tOsO_tma] = tma_partition(tma_o, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sO), group_modes<0, 2>(gO_tma));
      copy(tma_o, tOsO_tma, tOgO);
      tma_store_arrive();
    }

    // LSE: the thread with t % 4 == 0 of each quad owns its rows.
    Tensor cO = make_identity_tensor(select<0, 1>(typename Traits::TilePV{}));
    Tensor tOcO = thr_pv.partition_C(cO);
    Tensor tOcO_rc = make_tensor(tOcO.data(), acc_rowcol(tOcO.layout()));
    if (tid % 4 == 0) {
      CUTE_UNROLL
      for (int r = 0; r < kRows; ++r) {
        const int row = row0 + get<0>(tOcO_rc(r, 0));
        if (row < seqlen_q) { lse_head[row] = lse[r]; }
      }
    }
    if constexpr (!kDeferStoreWait) {
      if (tid == 0) { tma_store_wait<0>(); }  // shared memory stays valid until the store read it
    }
  }

  // Persistent kernel (fwd_persistent.h): a tile whose rows see no key (causal, seqlen_q >
  // seqlen_k) gets O = 0 and LSE = -inf for this warpgroup's rows [row0, row0 + 64) < seqlen_q,
  // by plain 16-byte stores (no shared memory: the producer may already load the next tile's Q
  // into this warpgroup's rows). o_head: O of the tile's (batch, head), row stride o_row_stride.
  CUTE_DEVICE static void run_empty(Element* o_head, int64_t o_row_stride, float* lse_head, int row0, int seqlen_q,
                                    int tid) {
    constexpr int kChunks = Traits::kHeadDim / 8;  // 16-byte chunks per row
    static_assert(Traits::kHeadDim % 8 == 0, "rows of whole 16-byte chunks");
    for (int i = tid; i < Traits::kWGRows * kChunks; i += 128) {
      const int row = row0 + i / kChunks;
      if (row < seqlen_q) {
        *reinterpret_cast<uint4*>(o_head + int64_t(row) * o_row_stride + (i % kChunks) * 8) = make_uint4(0, 0, 0, 0);
      }
    }
    if (tid < Traits::kWGRows && row0 + tid < seqlen_q) { lse_head[row0 + tid] = -INFINITY; }
  }
};

}  // namespace flash::sm90
