// Masking of one S block (sm90 forward): keys past seqlen_k, and for causal the keys right of
// the bottom-right-aligned diagonal: key j is visible to query i iff j <= i + seqlen_k - seqlen_q.
#pragma once

#include <cute/tensor.hpp>

namespace flash::sm90 {

using namespace cute;

// Whether block n_block (keys [n_block * kBlockN, +kBlockN)) needs any masking for the query
// rows [m0, m0 + kBlockM) of the CTA. Uniform across the CTA.
template <int kBlockM, int kBlockN, bool kCausal>
CUTE_DEVICE bool block_needs_mask(int n_block, int m0, int seqlen_q, int seqlen_k) {
  const int key_end = (n_block + 1) * kBlockN;
  if (key_end > seqlen_k) { return true; }
  if constexpr (kCausal) { return key_end - 1 > m0 + seqlen_k - seqlen_q; }
  return false;
}

// S (rowcol view: (rows, cols) fp32) gets -inf where the key is masked. tScS holds the (row, col)
// coordinate of every element within the warpgroup's 64 x kBlockN tile (same rowcol view).
// row0: first query row of the warpgroup; col0: first key of the block.
template <bool kCausal, class TensorS, class TensorC>
CUTE_DEVICE void apply_mask(TensorS& s, TensorC const& tScS, int row0, int col0, int seqlen_q, int seqlen_k) {
  CUTE_UNROLL
  for (int r = 0; r < size<0>(s); ++r) {
    const int row = row0 + get<0>(tScS(r, 0));
    // Keys [0, limit) are visible to this row.
    int limit = seqlen_k - col0;
    if constexpr (kCausal) { limit = min(limit, row + seqlen_k - seqlen_q + 1 - col0); }
    CUTE_UNROLL
    for (int c = 0; c < size<1>(s); ++c) {
      if (get<1>(tScS(r, c)) >= limit) { s(r, c) = -INFINITY; }
    }
  }
}

}  // namespace flash::sm90
