// Register-fragment views of wgmma accumulators (sm90). One consumer warpgroup's accumulator of a
// 64 x N wgmma has, per thread, values ((2, 2, N/8), MMA_M, MMA_N): (column pair, row half,
// 8-column block). Thread t of the warpgroup holds rows 16 (t/32) + (t%32)/4 + {0, 8} and
// columns 8 j + 2 (t%4) + {0, 1}: the four threads of a quad share a row.
#pragma once

#include <cute/tensor.hpp>

namespace flash::sm90 {

using namespace cute;

// ((2, 2, V), M, N) -> (rows (2, M), cols (2, V, N)): index a fragment by (row, col).
template <class Layout>
CUTE_HOST_DEVICE constexpr auto acc_rowcol(Layout l) {
  static_assert(decltype(rank(l))::value == 3 && decltype(rank<0>(l))::value == 3);
  auto v = get<0>(l);
  return make_layout(make_layout(get<1>(v), get<1>(l)), make_layout(get<0>(v), get<2>(v), get<2>(l)));
}

// The accumulator of S (64 x N, fp32) reinterpreted as the register A operand of O += P V
// (64 x N K-extent): ((2, 2, V), M, N) -> ((2, 2, 2), M, (V/2) * N). The value order matches:
// an A fragment of a 64 x 16 k-block holds columns 8 c + 2 (t%4) + a, c in {0, 1}, so the
// accumulator's 8-column blocks pair up into k-blocks.
template <class Layout>
CUTE_HOST_DEVICE constexpr auto acc_as_a_operand(Layout l) {
  auto v = get<0>(l);  // (2, 2, V)
  constexpr int kV = decltype(size<2>(v))::value;
  static_assert(kV % 2 == 0, "N must be a multiple of 16");
  constexpr int kStride = decltype(stride<2>(v))::value;
  auto lo = make_layout(_2{}, Int<kStride>{});               // the two 8-column blocks of a k-block
  auto hi = make_layout(Int<kV / 2>{}, Int<2 * kStride>{});  // k-blocks
  return make_layout(make_layout(get<0>(v), get<1>(v), lo), get<1>(l), coalesce(make_layout(hi, get<2>(l))));
}

// fp32 fragment -> Element fragment with the same layout.
template <typename To, class Engine, class Layout>
CUTE_DEVICE auto convert_fragment(Tensor<Engine, Layout> const& t) {
  Tensor out = make_tensor<To>(t.layout());
  constexpr int n = decltype(size(t))::value;
  static_assert(n % 2 == 0);
  CUTE_UNROLL
  for (int i = 0; i < n; ++i) { out(i) = To(t(i)); }
  return out;
}

}  // namespace flash::sm90
