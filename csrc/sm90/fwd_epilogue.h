// Epilogue of the sm90 forward, per consumer warpgroup: normalise O, write it as Element into
// the warpgroup's 64 rows of shared memory (the Q rows it no longer reads), one thread issues the
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
  template <class TensorO, class SO, class GO, class TmaO>
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
    Tensor tOsO = thr_pv.partition_C(sO);  // same shape as tOrO
    CUTE_UNROLL
    for (int i = 0; i < size(tOrO); ++i) { tOsO(i) = Element(tOrO(i)); }

    // The TMA (async proxy) reads what st.shared wrote: fence in every writing thread, then
    // the warpgroup barrier.
    cutlass::arch::fence_view_async_shared();
    constexpr int kW = Traits::kNConsumerWG;  // epilogue barrier W + cwg (fwd_mainloop.h)
    cutlass::arch::NamedBarrier::arrive_and_wait(128, kW == 2 ? (cwg == 0 ? 2u : 3u) : uint32_t(kW + cwg));
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
    if (tid == 0) { tma_store_wait<0>(); }  // shared memory stays valid until the store read it
  }
};

}  // namespace flash::sm90
