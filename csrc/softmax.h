// FA2 online softmax on register fragments: running row max and (thread-partial) row sum,
// unnormalised O rescaled only when the max moves, one division per row at the very end.
// Scores stay raw; the softmax scale is folded into exp2 (scale_log2 = scale * log2 e).
#pragma once

#include <cute/tensor.hpp>
#include "tensor_utils.h"

namespace flash {

using namespace cute;

template <int kRows>
struct OnlineSoftmax {
  // Per thread: kRows rows of the Q tile. row_sum holds this thread's share of its columns;
  // the 4 threads of a quad are summed only in finalize (the rescale factor is quad-uniform).
  Tensor<ArrayEngine<float, kRows>, Layout<Shape<Int<kRows>>>> row_max, row_sum;

  CUTE_DEVICE OnlineSoftmax() {
    fill(row_max, -INFINITY);
    fill(row_sum, 0.f);
  }

  // s: (rows, kBlockN) scores in, probabilities P (unnormalised) out.  o: (rows, d) running O.
  // kSkipUnitRescale: rows whose max did not move (correction exactly 1) skip the multiply of O.
  template <bool kSkipUnitRescale = false, class S, class O>
  CUTE_DEVICE void update(S& s, O& o, float scale_log2) {
    static_assert(decltype(size<0>(s))::value == kRows);
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      float m = row_max(r);
      CUTE_UNROLL
      for (int c = 0; c < size<1>(s); ++c) { m = fmaxf(m, s(r, c)); }
      m = quad_max(m);
      // A row that has seen only masked keys keeps max -inf; use 0 so exp2 gives 0, not NaN.
      const float m_scaled = m == -INFINITY ? 0.f : m * scale_log2;
      const float correction = exp2f(row_max(r) * scale_log2 - m_scaled);  // 0 on the first block
      row_max(r) = m;
      float sum = 0.f;
      CUTE_UNROLL
      for (int c = 0; c < size<1>(s); ++c) {
        s(r, c) = exp2f(s(r, c) * scale_log2 - m_scaled);  // one FFMA + MUFU.EX2
        sum += s(r, c);
      }
      row_sum(r) = row_sum(r) * correction + sum;
      if (!kSkipUnitRescale || correction != 1.f) {
        CUTE_UNROLL
        for (int c = 0; c < size<1>(o); ++c) { o(r, c) *= correction; }
      }
    }
  }

  // O /= l per row. Returns LSE = max * scale + log(l) per row in lse; rows that saw no key
  // (l == 0) get O = 0 and LSE = -inf.
  template <class O, class Lse>
  CUTE_DEVICE void finalize(O& o, Lse& lse, float softmax_scale) {
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const float l = quad_sum(row_sum(r));
      const bool empty = l == 0.f;
      const float inv = empty ? 0.f : 1.f / l;
      lse(r) = empty ? -INFINITY : row_max(r) * softmax_scale + logf(l);
      CUTE_UNROLL
      for (int c = 0; c < size<1>(o); ++c) { o(r, c) *= inv; }
    }
  }
};

}  // namespace flash
