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

// A wgmma wait placed after independent work, e.g. the forward's softmax of S_n before waiting for the
// PV GEMM still in flight (fwd_mainloop.h kOverlap), the backward's P^T before waiting for dP^T
// (bwd_mainloop.h p_and_ds): nothing of that work depends on the wait, and ptxas (nvcc 13.0) scheduled
// the wait (SASS WARPGROUP.DEPBAR) near the top of the work's basic block, so the work ran after the
// GEMM had completed: in the forward every MUFU.EX2 of a block after the PV wait (d = 64 / 128 / 256,
// causal and not; FA3's d = 128 causal kernel, same nvcc: 13 / 32 of 66 before it), in the backward 5 of 32 before
// the dP^T wait. end_block_before_wait(x) ends the basic block there: a branch on x < 0 around a memory
// barrier, where x is never negative in practice (seqlen_k; the OR of P^T's words, negative only for a
// NaN), and if it were, the barrier would merely run.
// ptxas schedules within basic blocks, so the work above stays above, and the wait after it stays
// after it. Cost: one ISETP and a uniform branch (BSSY / BSYNC) per call. SASS with it: every MUFU of the
// forward's block before the wait, at every head dim; in the backward 19 of 32 with an opaque int (ptxas
// sank 13 with their LSE loads below the boundary), all 32 with the branch on the OR of the P^T words
// (bwd_mainloop.h); registers and spills unchanged.
// FLASH_ATTN_CUDA_SM90_FWD_SCHEDULE_BLOCK / _BWD_SCHEDULE_BLOCK = 1 place it (fwd_mainloop.h, bwd_mainloop.h);
// measured (benchmarks/NOTES.md, "Twenty-first session"): the forward's on by default at d = 128 (+4 % causal
// at 4k / 8k), the backward's off (2-5 % slower).
CUTE_DEVICE void end_block_before_wait(int x) {
  asm volatile(
      "{\n"
      "  .reg .pred p;\n"
      "  setp.lt.s32 p, %0, 0;\n"
      "  @p membar.cta;\n"
      "}\n" ::"r"(x)
      : "memory");
}

}  // namespace flash::sm90
