// Small CuTe helpers shared by the kernels: fragment layout views, type conversion, warp-quad
// reductions, and the two GEMM shapes attention needs.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/array.h>
#include <cutlass/numeric_conversion.h>

namespace flash {

using namespace cute;

// An SM80 MMA accumulator fragment is ((2,2), MMA_M, MMA_N): per thread, 2 adjacent columns
// x 2 rows 8 apart, repeated over the M and N atoms. View it as (rows, cols) =
// ((2, MMA_M), (2, MMA_N)) so that softmax code can loop over rows and columns.
template <class Layout>
CUTE_HOST_DEVICE constexpr auto rowcol_view(Layout acc) {
  static_assert(decltype(rank(acc))::value == 3);
  static_assert(decltype(rank(get<0>(acc)))::value == 2);
  return make_layout(make_layout(get<0, 1>(acc), get<1>(acc)),   // rows: (row half, MMA_M)
                     make_layout(get<0, 0>(acc), get<2>(acc)));  // cols: (col pair, MMA_N)
}

// The C fragment of two neighbouring n8 atoms is exactly the A fragment of one k16 step, so
// P can feed the next MMA from registers: ((2,2), MMA_M, MMA_N) -> ((2,2,2), MMA_M, MMA_N/2).
template <class Layout>
CUTE_HOST_DEVICE constexpr auto acc_as_a_operand(Layout acc) {
  static_assert(decltype(size<2>(acc))::value % 2 == 0);
  auto l = logical_divide(acc, Shape<Underscore, Underscore, _2>{});  // ((2,2), MMA_M, (2, MMA_N/2))
  return make_layout(make_layout(get<0>(l), get<2, 0>(l)), get<1>(l), get<2, 1>(l));
}

template <typename To, class Engine, class Layout>
CUTE_DEVICE auto convert_type(Tensor<Engine, Layout> const& t) {
  using From = typename Engine::value_type;
  constexpr int N = decltype(size(t))::value;
  cutlass::NumericArrayConverter<To, From, N> convert;
  // An owning register tensor: a view of a local Array would dangle once this returns.
  Tensor out = make_tensor<To>(t.layout());
  *reinterpret_cast<cutlass::Array<To, N>*>(out.data()) =
      convert(*reinterpret_cast<const cutlass::Array<From, N>*>(t.data()));
  return out;
}

// The 4 threads of a quad hold the same MMA rows; these reduce across them.
CUTE_DEVICE float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
  return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
}
CUTE_DEVICE float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffff, x, 2);
  return x + __shfl_xor_sync(0xffffffff, x, 1);
}

// acc += A * B with both operands in shared memory. ldmatrix for k-step i+1 is issued before
// the MMAs of step i so shared-memory latency hides behind tensor-core work.
//   acc:  (MMA, MMA_M, MMA_N) fp32      tCrA: (MMA, MMA_M, MMA_K)   tCsA: (CPY, MMA_M, MMA_K)
//                                       tCrB: (MMA, MMA_N, MMA_K)   tCsB: (CPY, MMA_N, MMA_K)
template <class Acc, class RA, class RB, class SA, class SB, class TiledMma, class CopyA, class CopyB>
CUTE_DEVICE void gemm_ss(Acc& acc, RA& tCrA, RB& tCrB, SA const& tCsA, SB const& tCsB,
                         TiledMma const& tiled_mma, CopyA const& copy_a, CopyB const& copy_b) {
  auto tCrA_view = copy_a.get_thread_slice(threadIdx.x).retile_D(tCrA);  // (CPY, MMA_M, MMA_K)
  auto tCrB_view = copy_b.get_thread_slice(threadIdx.x).retile_D(tCrB);  // (CPY, MMA_N, MMA_K)
  CUTE_STATIC_ASSERT_V(size<1>(tCsA) == size<1>(tCrA_view));             // MMA_M
  CUTE_STATIC_ASSERT_V(size<1>(tCsB) == size<1>(tCrB_view));             // MMA_N
  constexpr int kSteps = decltype(size<2>(tCrA))::value;                  // MMA_K
  copy(copy_a, tCsA(_, _, _0{}), tCrA_view(_, _, _0{}));
  copy(copy_b, tCsB(_, _, _0{}), tCrB_view(_, _, _0{}));
  CUTE_UNROLL
  for (int i = 0; i < kSteps; ++i) {
    if (i + 1 < kSteps) {
      copy(copy_a, tCsA(_, _, i + 1), tCrA_view(_, _, i + 1));
      copy(copy_b, tCsB(_, _, i + 1), tCrB_view(_, _, i + 1));
    }
    cute::gemm(tiled_mma, tCrA(_, _, i), tCrB(_, _, i), acc);
  }
}

// acc += A * B with A already in registers (P after softmax) and B in shared memory (V^T).
template <class Acc, class RA, class RB, class SB, class TiledMma, class CopyB>
CUTE_DEVICE void gemm_rs(Acc& acc, RA const& tCrA, RB& tCrB, SB const& tCsB,
                         TiledMma const& tiled_mma, CopyB const& copy_b) {
  auto tCrB_view = copy_b.get_thread_slice(threadIdx.x).retile_D(tCrB);  // (CPY, MMA_N, MMA_K)
  CUTE_STATIC_ASSERT_V(size<1>(tCsB) == size<1>(tCrB_view));             // MMA_N
  constexpr int kSteps = decltype(size<2>(tCrA))::value;                  // MMA_K
  copy(copy_b, tCsB(_, _, _0{}), tCrB_view(_, _, _0{}));
  CUTE_UNROLL
  for (int i = 0; i < kSteps; ++i) {
    if (i + 1 < kSteps) { copy(copy_b, tCsB(_, _, i + 1), tCrB_view(_, _, i + 1)); }
    cute::gemm(tiled_mma, tCrA(_, _, i), tCrB(_, _, i), acc);
  }
}

}  // namespace flash
