// Tile choice of the sm90 backward per head dim (d = 64, 128: two consumer warpgroups of 64 keys, kBlockN = 128).
// Numbers: H200, bf16, TFLOP/s (benchmarks/NOTES.md, "Hopper backward (issue 12)"), as measured.
#pragma once

#include <type_traits>

#include "bwd_traits.h"
#include "bwd_traits_split.h"

namespace flash::sm90 {

template <int kHeadDim>
struct BwdTile;

// d = 64: 64 query rows per step, 2 stages: Q, dO 2 x 2 x 8 KB, K, V 2 x 16 KB, dS 2 x 16 KB, dQ fp32
// 2 x 16 KB = 128 KB; each consumer's dQ part is 64 x 32 (K in 64-byte swizzle, bwd_traits.h). FA3's
// 128 x 128 compiles here with wgmma serialised for lack of registers (ptxas C7512: S^T and dP^T
// are 64 x 128 per warpgroup, 64 registers each).
template <>
struct BwdTile<64> {
  static constexpr int kBlockM = 64;
  static constexpr int kStages = 2;
};

// d = 128: 64 query rows per step (FA3's causal 64 x 128), 2 stages: Q, dO 2 x 2 x 16 KB, K, V
// 2 x 32 KB, dS 2 x 16 KB, dQ fp32 2 x 32 KB = 224 KB (+ LSE / delta rows and barriers: 226 KB of 227).
template <>
struct BwdTile<128> {
  static constexpr int kBlockM = 64;
  static constexpr int kStages = 2;
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
  static constexpr int kBlockM = 64;
  static constexpr int kStages = 2;
};

template <typename Element, int kHeadDim>
using BwdTraitsFor =
    std::conditional_t<kHeadDim == 256, BwdTraitsSplit<kHeadDim, BwdTile<kHeadDim>::kBlockM, BwdTile<kHeadDim>::kStages, Element>,
                       BwdTraits<kHeadDim, BwdTile<kHeadDim>::kBlockM, 128, BwdTile<kHeadDim>::kStages, Element>>;

}  // namespace flash::sm90
