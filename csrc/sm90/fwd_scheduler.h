// Tile order of the sm90 forward. Tile t covers query rows [128 m, 128 m + 128) of one (head,
// batch): t = (batch * nheads + head) * num_m + (causal ? num_m - 1 - m : m). A head's tiles are
// adjacent (its K/V stay in L2 while they run); causal ones run longest first (the last query
// rows see the most keys). CTA b handles tiles b, b + gridDim.x, ...: one tile each when the grid
// has a CTA per tile, a static round-robin when the grid is persistent (one CTA per SM).
#pragma once

#include <cute/config.hpp>

#include "../params.h"

namespace flash::sm90 {

template <int kBlockM, bool kCausal>
struct FwdScheduler {
  int num_m, nheads, num_tiles;

  CUTE_HOST_DEVICE explicit FwdScheduler(const FwdParams& p)
      : num_m((p.seqlen_q + kBlockM - 1) / kBlockM), nheads(p.nheads), num_tiles(num_m * p.nheads * p.batch) {}

  CUTE_HOST_DEVICE void decode(int t, int& m_block, int& head, int& batch) const {
    const int hb = t / num_m, m = t - hb * num_m;
    m_block = kCausal ? num_m - 1 - m : m;
    batch = hb / nheads;
    head = hb - batch * nheads;
  }
};

}  // namespace flash::sm90
