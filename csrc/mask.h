// Which keys a query may see: the K/V block range a Q tile visits, and the element mask on
// the blocks that straddle a boundary. Causal is the window (left = -1, right = 0); one
// runtime code path serves full, causal and sliding-window attention.
#pragma once

#include <climits>

#include <cute/tensor.hpp>

#include "params.h"

namespace flash {

using namespace cute;

// Key j is visible to query i iff j < seqlen_k and
//   i + shift - window_left <= j <= i + shift + window_right   (shift = seqlen_k - seqlen_q),
// a negative window side meaning unbounded (bottom-right alignment, as flash-attn >= 2.1).
struct VisibleKeys {
  int seqlen_q, seqlen_k, shift, window_left, window_right;

  CUTE_HOST_DEVICE VisibleKeys(int sq, int sk, int wl, int wr)
      : seqlen_q(sq), seqlen_k(sk), shift(sk - sq), window_left(wl), window_right(wr) {}

  CUTE_HOST_DEVICE bool visible(int i, int j) const {
    return j < seqlen_k && (window_right < 0 || j <= i + shift + window_right) &&
           (window_left < 0 || j >= i + shift - window_left);
  }
};

// K/V blocks [n_min, n_max) that hold at least one key visible to some row of Q tile m_block.
// Blocks outside are skipped entirely; n_max <= n_min means no row of the tile sees a key.
template <int kBlockM, int kBlockN>
struct KvBlockRange {
  int n_min, n_max;

  CUTE_HOST_DEVICE KvBlockRange(VisibleKeys const& vk, int m_block)
      : KvBlockRange(vk, m_block * kBlockM, min(vk.seqlen_q, m_block * kBlockM + kBlockM) - 1) {}

  // Queries first_row..last_row (the decode kernel's packed tiles hold a few tokens).
  CUTE_HOST_DEVICE KvBlockRange(VisibleKeys const& vk, int first_row, int last_row) {
    n_max = (vk.seqlen_k + kBlockN - 1) / kBlockN;
    if (vk.window_right >= 0) {
      const int keys_end = last_row + vk.shift + vk.window_right + 1;  // exclusive
      n_max = keys_end <= 0 ? 0 : min(n_max, (keys_end + kBlockN - 1) / kBlockN);
    }
    n_min = 0;
    if (vk.window_left >= 0) {
      const int first_key = first_row + vk.shift - vk.window_left;
      n_min = first_key <= 0 ? 0 : first_key / kBlockN;
    }
  }

  // The first K/V block whose keys all lie right of the left window edge for every row of Q
  // tile m_block (n_min when there is no left window): blocks below it need the mask.
  CUTE_HOST_DEVICE static int first_block_past_left_edge(VisibleKeys const& vk, int m_block) {
    if (vk.window_left < 0) { return 0; }
    const int last_row = m_block * kBlockM + kBlockM - 1;
    const int edge = last_row + vk.shift - vk.window_left;  // the last row's first visible key
    return edge <= 0 ? 0 : (edge + kBlockN - 1) / kBlockN;
  }

  // True when some element of the (m_block, n_block) tile is invisible: only those tiles pay
  // for the element mask.
  CUTE_HOST_DEVICE static bool needs_mask(VisibleKeys const& vk, int m_block, int n_block) {
    const int first_row = m_block * kBlockM, last_row = first_row + kBlockM - 1;
    const int first_col = n_block * kBlockN, last_col = first_col + kBlockN - 1;
    return last_col >= vk.seqlen_k ||
           (vk.window_right >= 0 && last_col > first_row + vk.shift + vk.window_right) ||
           (vk.window_left >= 0 && first_col < last_row + vk.shift - vk.window_left);
  }
};

// Set invisible scores to -inf. acc_s and coords are rowcol views ((2,MMA_M),(2,MMA_N)) of the
// S accumulator and of its identity partition (tile-local (row, col) of each element).
// Per row, the visible columns are an interval [lo, hi) relative to this thread's first column;
// each element then costs one compare of a compile-time offset (keeping per-element
// coordinates live across the main loop spilled registers).
// row_div > 1: the decode kernel's packed rows, tile row r being query (row0 + r) / row_div.
template <class AccEngine, class AccLayout, class CoordTensor>
CUTE_DEVICE void apply_mask(Tensor<AccEngine, AccLayout>& acc_s, CoordTensor const& coords,
                            VisibleKeys const& vk, int row0, int col0, int row_div = 1) {
  const int col_base = col0 + get<1>(coords(0, 0));
  CUTE_UNROLL
  for (int r = 0; r < size<0>(acc_s); ++r) {
    const int row = (row0 + get<0>(coords(r, 0))) / row_div;
    int hi = vk.seqlen_k;
    if (vk.window_right >= 0) { hi = min(hi, row + vk.shift + vk.window_right + 1); }
    const int lo = vk.window_left >= 0 ? row + vk.shift - vk.window_left : INT_MIN / 2;
    hi -= col_base;
    const int lo_rel = lo - col_base;
    CUTE_UNROLL
    for (int c = 0; c < size<1>(acc_s); ++c) {
      const int col_off = get<1>(coords(r, c)) - get<1>(coords(0, 0));  // compile-time after unrolling
      if (col_off >= hi || col_off < lo_rel) { acc_s(r, c) = -INFINITY; }
    }
  }
}

}  // namespace flash
