// Host-side, torch-free choices made from static shapes only (never from tensor values, so a
// captured CUDA graph stays valid while lengths change between replays).
#pragma once

#include <algorithm>
#include <cmath>

namespace flash {

// Most key splits a KV-cache call may use (the combine reads num_splits partials per row).
constexpr int kMaxSplits = 128;

// How many splits of the key axis fill the GPU: FA2's rule (flash_api.cpp,
// num_splits_heuristic), written for our decode tile. work_blocks thread blocks exist without
// splitting; slots = SMs x thread blocks per SM; n_blocks = K/V blocks of the longest possible
// sequence (the cache's capacity). No split when the work already fills 80 % of the slots;
// else the fewest splits whose wave efficiency (waves / ceil(waves)) is within 85 % of the best,
// skipping split counts that give every split the same number of blocks as one split fewer.
inline int num_splits_heuristic(int work_blocks, int slots, int n_blocks, int max_splits = kMaxSplits) {
  if (work_blocks <= 0 || slots <= 0 || float(work_blocks) >= 0.8f * float(slots)) { return 1; }
  max_splits = std::min({max_splits, slots, n_blocks});
  auto eligible = [&](int s) { return s == 1 || (n_blocks + s - 1) / s != (n_blocks + s - 2) / (s - 1); };
  auto efficiency = [&](int s) {
    const float waves = float(work_blocks) * float(s) / float(slots);
    return waves / std::ceil(waves);
  };
  float best = 0.f;
  for (int s = 1; s <= max_splits; ++s) {
    if (eligible(s)) { best = std::max(best, efficiency(s)); }
  }
  for (int s = 1; s <= max_splits; ++s) {
    if (eligible(s) && efficiency(s) >= 0.85f * best) { return s; }
  }
  return 1;
}

}  // namespace flash
