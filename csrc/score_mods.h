// Score modifiers applied to the raw S = Q K^T tile before masking and the softmax, in the
// reference order (flash_attn_cuda.reference.attention_ref): scale -> softcap -> ALiBi -> mask.
// softcap and ALiBi combine (as in flash-attn): S = tanh(s / softcap) - slope / softcap * |i + shift - j|.
//
// softcap > 0 replaces the scaled score s = softmax_scale * q.k by softcap * tanh(s / softcap).
// The kernels keep scores in units of softcap then (S holds tanh(q.k * softmax_scale / softcap))
// and the caller sets scale_log2 = softcap * log2(e), so exp2 and the LSE need nothing else.
#pragma once

#include <cute/tensor.hpp>

#include "params.h"

namespace flash {

using namespace cute;

// MUFU.TANH: max relative error 2^-11, below bf16/fp16 input rounding (FA2 uses it too).
CUTE_DEVICE float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The unit the kernels' scores are in: LSE = row max * score_unit + log(row sum).
CUTE_HOST_DEVICE float score_unit(FwdParams const& p) { return p.softcap > 0.f ? p.softcap : p.softmax_scale; }

// S <- tanh(S * softmax_scale / softcap), in place, when params.softcap > 0. acc_s: any register
// fragment (fp32). Everything is read from params (the constant bank) at the point of use:
// hoisting the flags and factors into registers across the main loop cost the plain path
// 56 B of spills in the d=128 backward (ptxas, sm_90).
template <class Engine, class Layout>
CUTE_DEVICE void apply_softcap(Tensor<Engine, Layout>& acc_s, FwdParams const& params) {
  if (params.softcap > 0.f) {
    CUTE_UNROLL
    for (int i = 0; i < size(acc_s); ++i) { acc_s(i) = tanh_approx(acc_s(i) * params.softcap_tanh_scale); }
  }
}

// The ALiBi slope of this (batch, head) in the kernels' score units (0 without ALiBi).
CUTE_DEVICE float alibi_slope_units(FwdParams const& params, int batch, int head) {
  if (params.alibi_slopes_ptr == nullptr) { return 0.f; }
  return params.alibi_slopes_ptr[batch * params.alibi_slopes_batch_stride + head] / score_unit(params);
}

// i + shift - j at this thread's first column of row r of a rowcol tile view (coords: its identity
// partition; row0 / col0: the tile's first query row and key), and the offset of column c from
// that first column (a compile-time constant after unrolling): |i + shift - j| = |diag - offset|.
template <class CoordTensor>
CUTE_DEVICE int alibi_diag(CoordTensor const& coords, int r, int row0, int col0, int shift) {
  return row0 + get<0>(coords(r, 0)) + shift - col0 - get<1>(coords(0, 0));
}
template <class CoordTensor>
CUTE_DEVICE int alibi_col_offset(CoordTensor const& coords, int r, int c) {
  return get<1>(coords(r, c)) - get<1>(coords(0, 0));
}

// S(i, j) -= slope * |i + shift - j| (slope in score units; skipped when 0). acc_s, coords:
// rowcol views ((2, MMA_M), (2, MMA_N)) of the S tile and of its identity partition; row0, col0:
// the tile's first query row and key.
template <class AccEngine, class AccLayout, class CoordTensor>
CUTE_DEVICE void apply_alibi(Tensor<AccEngine, AccLayout>& acc_s, CoordTensor const& coords, float slope,
                             int row0, int col0, int shift) {
  if (slope == 0.f) { return; }
  CUTE_UNROLL
  for (int r = 0; r < size<0>(acc_s); ++r) {
    const int diag = alibi_diag(coords, r, row0, col0, shift);
    CUTE_UNROLL
    for (int c = 0; c < size<1>(acc_s); ++c) {
      acc_s(r, c) -= slope * static_cast<float>(abs(diag - alibi_col_offset(coords, r, c)));
    }
  }
}

// dS *= d(softcap * tanh(x / softcap)) / dx = 1 - t^2, t the tanh value, when params.softcap > 0.
// The backward recovers t from P = exp2((t - slope * |i + shift - j|) * scale_log2 - lse_log2)
// instead of keeping the tanh tile live: t = (log2(P) + lse_log2) / scale_log2 + slope * |i + shift - j|
// (slope: the ALiBi slope in score units, 0 without ALiBi). Where P == 0 the factor is moot (dS = 0).
// kSigned: P carries the dropout sign encoding (dropout.h: dropped elements negated); its magnitude
// is used.
//   ds, p: rowcol views (rows, cols) of dS and P; lse_log2: per row; coords, row0, col0, shift as
//   apply_alibi's
template <bool kSigned = false, class DS, class P, class Lse, class CoordTensor>
CUTE_DEVICE void apply_softcap_grad(DS& ds, P const& p, Lse const& lse_log2, FwdParams const& params,
                                    CoordTensor const& coords, float slope, int row0, int col0, int shift) {
  if (params.softcap > 0.f) {
    CUTE_UNROLL
    for (int r = 0; r < size<0>(ds); ++r) {
      const int diag = alibi_diag(coords, r, row0, col0, shift);
      CUTE_UNROLL
      for (int c = 0; c < size<1>(ds); ++c) {
        const float bias = slope * static_cast<float>(abs(diag - alibi_col_offset(coords, r, c)));
        const float pr = kSigned ? fabsf(p(r, c)) : p(r, c);
        const float t = __fdividef(__log2f(pr) + lse_log2[r], params.scale_log2) + bias;
        ds(r, c) *= pr > 0.f ? 1.f - t * t : 0.f;
      }
    }
  }
}

}  // namespace flash
