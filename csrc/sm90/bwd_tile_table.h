// Tile choice of the sm90 backward per head dim (d = 64, 128: two consumer warpgroups of 64 keys, kBlockN = 128).
// Numbers: H200, bf16, TFLOP/s (benchmarks/NOTES.md, "Hopper backward (issue 12)"), as measured.
#pragma once

#include <type_traits>

#include "bwd_traits.h"
#include "bwd_traits_split.h"

namespace flash::sm90 {

template <int kHeadDim>
struct BwdTile;

// block_m(causal, dropout): query rows per step; stages(block_m, causal): Q / dO pipeline stages;
// dq_stages(block_m, causal): sdQ buffers of the dQ writer (bwd_traits.h). A tile may pick them per causality
// and dropout: those kernels are separate instances either way (bwd_launch.h), so this costs no build time.
// The deterministic calls run the plain calls' tile (its kernel with the dQ writer's turns).

// d = 64: 64 query rows per step; each consumer's dQ part is 64 x 32 (K in 64-byte swizzle,
// bwd_traits.h). FA3's 128 x 128 is an option (BWD64_NC_BLOCK_M / BWD64_C_BLOCK_M below).
// Non-causal 4 Q / dO stages and 3 sdQ stages: Q, dO 2 x 4 x 8 KB, K, V 2 x 16 KB, dS 2 x 16 KB, dQ fp32
// 3 x 16 KB = 176 KB. Causal 2 and 2 (128 KB). H200 bf16, backward TFLOP/s at 512 / 1k / 2k / 4k, in
// the fifteenth session's device calls (benchmarks/NOTES.md), 2 and 2 against 4 and 3 in the same call:
//   non-causal 263.3 / 332.1 / 360.8 / 402.8 -> 269.0 / 336.7 / 371.6 / 414.8 (call 2),
//              264.1 / 332.4 / 359.0 / 405.8 -> 269.5 / 338.6 / 368.1 / 418.1 (call 3): +2-3 %;
//   causal     169.8 / 248.3 / 319.9 / 349.8 -> 167.6 / 245.3 / 315.2 / 344.0 (call 3): -1-2 %, so 2 and 2.
// 3 and 2 or 2 and 3 alone gained 1 % non-causal (call 2). This tile, A B B A with cuDNN (call 4,
// results/h200_bwd64st.md): non-causal 265.7 / 338.8 / 376.7 / 411.5 = 0.95 / 0.96 / 0.95 / 0.96x cuDNN
// (0.93-0.95x before, results/h200_fwdbwd14.md). Deeper still (calls 6 and 7, non-causal, 512 / 1k / 2k / 4k):
// 6 and 3 271.6 / 343.2 / 372.3 / 412.7 against this tile's 269.5 / 340.3 / 378.0 / 413.4 and 269.0 / 340.5 /
// 370.4 / 416.7 in the same run (within noise), 4 and 4 below 6 and 3 at 512 / 1k in its run: 4 and 3 stay;
// 2 and 2 in that run 262.9 / 330.9 / 358.0 / 405.1.
// FLASH_ATTN_CUDA_SM90_BWD64_NC_STAGES / _NC_DQ_STAGES: the non-causal pair, for comparisons
// (scripts/variants_gpu.sh).
#ifndef FLASH_ATTN_CUDA_SM90_BWD64_NC_STAGES
#define FLASH_ATTN_CUDA_SM90_BWD64_NC_STAGES 4
#endif
#ifndef FLASH_ATTN_CUDA_SM90_BWD64_NC_DQ_STAGES
#define FLASH_ATTN_CUDA_SM90_BWD64_NC_DQ_STAGES 3
#endif
// FLASH_ATTN_CUDA_SM90_BWD64_NC_BLOCK_M=128: FA3's d = 64 tile, 128 x 128, for the non-causal kernel without
// dropout (2 stages, 2 sdQ stages: Q, dO 2 x 2 x 16 KB, K, V 2 x 16 KB, dS 2 x 32 KB, dQ fp32 2 x 32 KB = 224 KB).
// Deterministic calls take it too (bwd_launch.h: one tile per causality and dropout) since the thirty-first
// session: the dQ writer's turns did not fit its registers while it rounded P^T early (C7511, wgmma serialised,
// eighteenth session), and now do (0 spills, no C751x).
// Predicted +3-6 % (half the steps, each with twice the GEMM work against the same waits and dQ hand-over);
// measured (eighteenth session, H100 SXM, A / B / A, results/h100_bwd_wide_tiles.md) -1.5 / -1.3 / -0.8 / -1.6 %
// at 512 / 1k / 2k / 4k, when the tile rounded P^T early and waited for dV before dQ (bwd_mainloop.h kPRounded,
// since off at d = 64) and kept dQ's rows in order: those serialise what the 64-row step overlaps. Off; tests and
// sanitizers passed on it then.
#ifndef FLASH_ATTN_CUDA_SM90_BWD64_NC_BLOCK_M
#define FLASH_ATTN_CUDA_SM90_BWD64_NC_BLOCK_M 64
#endif
// FLASH_ATTN_CUDA_SM90_BWD64_C_BLOCK_M=128: the same 128 x 128 for the causal kernels without dropout (FA3 steps
// 128 query rows at d = 64 causal too; 2 stages, 2 sdQ stages, 224 KB). Since the thirty-first session the
// 128-row d = 64 tiles keep P^T in fp32 until dS^T is made, and dV's GEMM runs under dQ's, as the 64-row
// step does (bwd_mainloop.h kPRounded is for d > 64), and they permute dQ's rows (bwd_traits.h kDQRowPerm):
// ptxas (nvcc 13.0) 0 spills, no C751x. Not yet measured in this form.
#ifndef FLASH_ATTN_CUDA_SM90_BWD64_C_BLOCK_M
#define FLASH_ATTN_CUDA_SM90_BWD64_C_BLOCK_M 64
#endif
template <>
struct BwdTile<64> {
  static_assert(FLASH_ATTN_CUDA_SM90_BWD64_NC_BLOCK_M == 64 || FLASH_ATTN_CUDA_SM90_BWD64_NC_BLOCK_M == 128,
                "FLASH_ATTN_CUDA_SM90_BWD64_NC_BLOCK_M is 64 or 128");
  static_assert(FLASH_ATTN_CUDA_SM90_BWD64_C_BLOCK_M == 64 || FLASH_ATTN_CUDA_SM90_BWD64_C_BLOCK_M == 128,
                "FLASH_ATTN_CUDA_SM90_BWD64_C_BLOCK_M is 64 or 128");
  static constexpr int block_m(bool causal, bool dropout) {
    if (dropout) { return 64; }
    return causal ? FLASH_ATTN_CUDA_SM90_BWD64_C_BLOCK_M : FLASH_ATTN_CUDA_SM90_BWD64_NC_BLOCK_M;
  }
  static constexpr int stages(int block_m, bool causal) {
    return causal || block_m == 128 ? 2 : FLASH_ATTN_CUDA_SM90_BWD64_NC_STAGES;
  }
  static constexpr int dq_stages(int block_m, bool causal) {
    return causal || block_m == 128 ? 2 : FLASH_ATTN_CUDA_SM90_BWD64_NC_DQ_STAGES;
  }
};

// d = 128: 64 query rows per step (FA3's causal 64 x 128), 2 stages and 2 sdQ stages: Q, dO 2 x 2 x 16 KB,
// K, V 2 x 32 KB, dS 2 x 16 KB, dQ fp32 2 x 32 KB = 224 KB (+ LSE / delta rows and barriers: 226 KB of 227).
// FLASH_ATTN_CUDA_SM90_BWD128_NC_BLOCK_M=80 gives the non-causal kernel without dropout FA3's non-causal
// 80 x 128: a fifth more GEMM work per step against the same per-step costs (the Q / dO waits, the dS
// meeting, the dQ hand-over and its reduce-add), dQ^T computed swapped (bwd_traits.h kDQSwapAB), one sdQ
// stage: Q, dO 2 x 2 x 20 KB, K, V 2 x 32 KB, dS 2 x 20 KB, dQ fp32 40 KB = 224 KB (+ rows, barriers:
// 226 KB). Predicted +4-7 % at >= 2k, +2-4 % at 512 / 1k; measured (eighteenth session, H100 SXM, A / B / A,
// results/h100_bwd_wide_tiles.md) -4.2 / -1.1 / -2.2 / -3.8 % at 512 / 1k / 2k / 4k (the 64-row step's
// overlap lost to kPRounded's waits, scalar dQ stores, one sdQ stage). Off; tests and sanitizers passed on it.
#ifndef FLASH_ATTN_CUDA_SM90_BWD128_NC_BLOCK_M
#define FLASH_ATTN_CUDA_SM90_BWD128_NC_BLOCK_M 64
#endif
template <>
struct BwdTile<128> {
  static_assert(FLASH_ATTN_CUDA_SM90_BWD128_NC_BLOCK_M == 64 || FLASH_ATTN_CUDA_SM90_BWD128_NC_BLOCK_M == 80,
                "FLASH_ATTN_CUDA_SM90_BWD128_NC_BLOCK_M is 64 or 80");
  static constexpr int block_m(bool causal, bool dropout) {
    return causal || dropout ? 64 : FLASH_ATTN_CUDA_SM90_BWD128_NC_BLOCK_M;
  }
  static constexpr int stages(int, bool) { return 2; }
  static constexpr int dq_stages(int block_m, bool) { return block_m == 80 ? 1 : 2; }
};

// d = 256: the role-split tile (bwd_traits_split.h): 64 keys per CTA, consumer 0 S^T / P^T / dV,
// consumer 1 dP^T / dS^T / dK, dQ halves by vector reductions in whole lines (bwd_mainloop_split.h
// red_dq: 1.25-1.31x the backward of 8-byte reductions at 1k / 4k non-causal, 1.13-1.22x causal, H200
// bf16, benchmarks/NOTES.md "Twelfth session"). 64 query rows, 2 stages: Q, dO 2 x 2 x 32 KB,
// K, V 2 x 32 KB, dS 8 KB, sP fp32 16 KB = 217 KB. The two-consumers-of-64-keys tile of d = 64 / 128
// needs dK + dV = 256 fp32 registers per thread here; FA3's 64 x 80 (S = Q K^T non-swapped, P and dS
// through shared memory, dK/dV swapAB, dQ by atomics) splits every GEMM between the warpgroups.
template <>
struct BwdTile<256> {
  static constexpr int block_m(bool, bool) { return 64; }
  static constexpr int stages(int, bool) { return 2; }
  static constexpr int dq_stages(int, bool) { return 2; }  // no sdQ in the role-split tile
};

// No defaults: the causal, non-causal and dropout kernels may have different tiles (bwd_launch.h run_bwd_).
template <typename Element, int kHeadDim, bool kCausal, bool kDropout,
          int kM = BwdTile<kHeadDim>::block_m(kCausal, kDropout)>
using BwdTraitsFor = std::conditional_t<
    kHeadDim == 256, BwdTraitsSplit<kHeadDim, kM, BwdTile<kHeadDim>::stages(kM, kCausal), Element>,
    BwdTraits<kHeadDim, kM, 128, BwdTile<kHeadDim>::stages(kM, kCausal), Element,
              BwdTile<kHeadDim>::dq_stages(kM, kCausal)>>;

}  // namespace flash::sm90
