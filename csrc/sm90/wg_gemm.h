// One warpgroup GEMM on sm90 (wgmma): C (+)= A B over the K modes, committed as one wgmma batch;
// the caller waits (warpgroup_wait<N>) when it needs C. Shared by the forward and the backward.
#pragma once

#include <cute/tensor.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>

namespace flash::sm90 {

using namespace cute;

// A from registers (P, dS) unless it is a tensor of shared-memory descriptors (Q, K, dS in smem).
template <bool kZeroInit, class Mma, class TA, class TB, class TC>
CUTE_DEVICE void wg_gemm(Mma& mma, TA const& a, TB const& b, TC& c) {
  constexpr bool kRS = !is_base_of<GMMA::DescriptorIterator, typename TA::engine_type::iterator>::value;
  if constexpr (kRS) { warpgroup_fence_operand(const_cast<TA&>(a)); }
  warpgroup_fence_operand(c);
  warpgroup_arrive();
  mma.accumulate_ = kZeroInit ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
  CUTE_UNROLL
  for (int k = 0; k < size<2>(a); ++k) {
    cute::gemm(mma, a(_, _, k), b(_, _, k), c);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  warpgroup_fence_operand(c);
  if constexpr (kRS) { warpgroup_fence_operand(const_cast<TA&>(a)); }
}

}  // namespace flash::sm90
