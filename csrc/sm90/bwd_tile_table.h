// Tile choice of the sm90 backward per head dim (two consumer warpgroups of 64 keys: kBlockN = 128).
// Numbers: H200, bf16, TFLOP/s (benchmarks/NOTES.md, "Hopper backward (issue 12)"), as measured.
#pragma once

#include "bwd_traits.h"

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

template <typename Element, int kHeadDim>
using BwdTraitsFor = BwdTraits<kHeadDim, BwdTile<kHeadDim>::kBlockM, 128, BwdTile<kHeadDim>::kStages, Element>;

}  // namespace flash::sm90
