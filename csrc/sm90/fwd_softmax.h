// Online softmax of the sm90 forward, per consumer thread: each thread holds kRows rows of S
// (rowcol view, fwd_layouts.h), the four threads of a quad share a row. exp2 with the folded
// scale (params.scale_log2); the normalisation by the row sum is deferred to the end.
#pragma once

#include <cmath>
#include <cute/tensor.hpp>

#include "../tensor_utils.h"

namespace flash::sm90 {

using namespace cute;

using flash::quad_max;  // tensor_utils.h: reductions over the 4 threads of a quad (one row)
using flash::quad_sum;

template <int kRows>
struct OnlineSoftmax {
  float row_max[kRows];  // running max of the raw scores (-inf: no visible key yet)
  float row_sum[kRows];  // this thread's partial sum of exp2(s * scale_log2 - max * scale_log2)
  float scale_log2;

  CUTE_DEVICE explicit OnlineSoftmax(float scale_log2_) : scale_log2(scale_log2_) {
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) { row_max[r] = -INFINITY; row_sum[r] = 0.f; }
  }

  // s (rows, cols): raw scores in, P = exp2((s - max) * scale_log2) out. corr[r]: the factor the
  // caller multiplies row r of O by (the old max's weight under the new max).
  // kCheckInf = false: only for a block with no masked key (every score finite, so the new max is too);
  // it drops the -inf guard (FSETP + FSEL per row), as FA3 does outside its masked blocks.
  template <bool kCheckInf = true, class TensorS>
  CUTE_DEVICE void step(TensorS& s, float (&corr)[kRows]) {
    static_assert(decltype(size<0>(s))::value == kRows);
    constexpr int kCols = decltype(size<1>(s))::value;
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const float m_scaled = new_max<kCheckInf>(s, r, corr[r]);
      add_sum(r, exp_cols<0, kCols>(s, r, m_scaled, 0.f), corr[r]);
    }
  }

  // step with the exponentials of columns [kSplit, cols) after mid() (fwd_mainloop.h: the PV GEMM's wait, so
  // that ptxas can interleave those exps with the O rescale and the P conversion that must follow it, as in
  // FA3's SASS). The same operations in the same order per row as step: bit-identical P, sums and maxima.
  template <int kSplit, class TensorS, class Mid>
  CUTE_DEVICE void step_split(TensorS& s, float (&corr)[kRows], Mid&& mid) {
    constexpr int kCols = decltype(size<1>(s))::value;
    static_assert(kSplit > 0 && kSplit < kCols, "the split column lies inside the row");
    float m_scaled[kRows], sum[kRows];
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      m_scaled[r] = new_max<true>(s, r, corr[r]);
      sum[r] = exp_cols<0, kSplit>(s, r, m_scaled[r], 0.f);
    }
    mid();
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) { add_sum(r, exp_cols<kSplit, kCols>(s, r, m_scaled[r], sum[r]), corr[r]); }
  }

  // Row r's new running max from s; sets corr_r and row_max[r], returns the max scaled for the exponentials.
  // (Four partial maxima instead of the serial FMNMX chain, FLASH_ATTN_CUDA_SM90_FWD_TREE_MAX in the
  // twenty-fifth session: no gain measured, removed; benchmarks/NOTES.md.)
  template <bool kCheckInf, class TensorS>
  CUTE_DEVICE float new_max(TensorS const& s, int r, float& corr_r) {
    float m = row_max[r];
    CUTE_UNROLL
    for (int c = 0; c < size<1>(s); ++c) { m = fmaxf(m, s(r, c)); }
    m = quad_max(m);
    // A row that has seen only masked keys keeps max -inf: subtract 0 so exp2 gives 0, not NaN.
    const float m_scaled = kCheckInf && m == -INFINITY ? 0.f : m * scale_log2;
    corr_r = exp2f(row_max[r] * scale_log2 - m_scaled);
    row_max[r] = m;
    return m_scaled;
  }

  // exp2 of row r's columns [kC0, kC1) in place; returns sum plus their sum, added in column order.
  template <int kC0, int kC1, class TensorS>
  CUTE_DEVICE float exp_cols(TensorS& s, int r, float m_scaled, float sum) const {
    CUTE_UNROLL
    for (int c = kC0; c < kC1; ++c) {
      s(r, c) = exp2f(fmaf(s(r, c), scale_log2, -m_scaled));
      sum += s(r, c);
    }
    return sum;
  }

  CUTE_DEVICE void add_sum(int r, float sum, float corr_r) { row_sum[r] = fmaf(row_sum[r], corr_r, sum); }

  // After the last block: inv[r] = 1 / row sum (0 for a row that saw no key), lse[r] natural-log
  // LSE of the scaled scores (-inf for a row that saw no key).
  CUTE_DEVICE void finalize(float (&inv)[kRows], float (&lse)[kRows]) {
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const float sum = quad_sum(row_sum[r]);
      const bool empty = !(sum > 0.f);
      inv[r] = empty ? 0.f : 1.f / sum;
      lse[r] = empty ? -INFINITY : (row_max[r] * scale_log2 + __log2f(sum)) * 0.693147180559945309f;
    }
  }
};

// Experiment (FLASH_ATTN_CUDA_SM90_SKIP_RESCALE=1): the O rescale between blocks is skipped when no
// row of the warp changed its max (every factor exactly 1: the same O bit for bit); one vote per warp
// keeps the branch uniform. Measured (H200, d = 128 bf16, persistent kernel, base / skip / base in one
// call, results/history/h200_skr_*): 4k 604.4 / 602.9 / 606.9, 16k 628.2 / 629.7 / 623.3 TFLOP/s, causal
// the same to 0.5 %, 1k within its run-to-run noise (581 / 590 / 537); O and LSE bit-identical
// (scripts/fwd_bits.py, both kernels). No gain: off (the decode kernel's skip pays because its rescale
// is not hidden under a GEMM).
#ifndef FLASH_ATTN_CUDA_SM90_SKIP_RESCALE
#define FLASH_ATTN_CUDA_SM90_SKIP_RESCALE 0
#endif
template <class TensorO, int kRows>
CUTE_DEVICE void scale_rows(TensorO& o, float const (&f)[kRows]) {
  CUTE_UNROLL
  for (int r = 0; r < kRows; ++r) {
    CUTE_UNROLL
    for (int c = 0; c < size<1>(o); ++c) { o(r, c) *= f[r]; }
  }
}

template <class TensorO, int kRows>
CUTE_DEVICE void scale_rows_between_blocks(TensorO& o, float const (&f)[kRows]) {
  if constexpr (FLASH_ATTN_CUDA_SM90_SKIP_RESCALE != 0) {
    bool moved = false;
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) { moved = moved || f[r] != 1.f; }
    if (!__any_sync(0xffffffffu, moved)) { return; }
  }
  scale_rows(o, f);
}

}  // namespace flash::sm90
