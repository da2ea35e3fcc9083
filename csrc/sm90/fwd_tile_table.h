// Tile choice of the sm90 forward per head dim (kBlockM = 128: two consumer warpgroups of 64 rows).
// Numbers: H200, bf16, TFLOP/s on the FA2 grid (batch * seqlen = 16k, hidden 2048), filled in as
// measured (benchmarks/NOTES.md, "Hopper forward (issue 11)").
#pragma once

#include "fwd_traits.h"

namespace flash::sm90 {

template <int kHeadDim>
struct FwdTile;

// d = 128: 128 x 128, 2 stages; shared memory 32 KB Q + 2 x 2 x 32 KB K/V = 160 KB.
template <>
struct FwdTile<128> {
  static constexpr int kBlockN = 128;
  static constexpr int kStages = 2;
};

template <typename Element, int kHeadDim>
using FwdTraitsFor = FwdTraits<kHeadDim, FwdTile<kHeadDim>::kBlockN, FwdTile<kHeadDim>::kStages, Element, true>;

}  // namespace flash::sm90
