// Tile order of the persistent sm90 forward (fwd_persistent.h). Tile t covers query rows
// [128 m, 128 m + 128) of one (head, batch): t = (batch * nheads + head) * num_m + (causal ?
// num_m - 1 - m : m). A head's tiles are adjacent (its K/V stay in L2 while they run); causal ones
// run longest first (the last query rows see the most keys). CTA b handles tiles b, b + gridDim.x,
// ... (a static round-robin; with causal masks the CTAs' loads differ, see benchmarks/NOTES.md).
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

// CTAs of the persistent launch: persistent_ctas > 0 asks for that many (tests run several tiles
// per CTA on small shapes), < 0 for one per SM; never more than there are tiles.
inline int persistent_grid(int num_tiles, int persistent_ctas, int sms) {
  const int want = persistent_ctas > 0 ? persistent_ctas : sms;
  return want < num_tiles ? want : num_tiles;
}

}  // namespace flash::sm90
