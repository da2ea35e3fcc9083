// Host-side, torch-free choices made from static shapes only (never from tensor values, so a
// captured CUDA graph stays valid while lengths change between replays).
#pragma once

#include <algorithm>
#include <cstdint>

namespace flash {

// Most key splits a KV-cache call may use (the combine reads num_splits partials per row).
constexpr int kMaxSplits = 128;
// Widest head the split-KV combine kernel handles (its per-warp sums live in shared memory).
constexpr int kCombineMaxHeadDim = 256;

// How many splits of the key axis the decode kernel (memory-bound) uses: none when the unsplit
// thread blocks already fill 80 % of the GPU's slots (SMs x blocks per SM); else one full wave,
// floor(slots / work_blocks) splits, but at least kMinBlocksPerSplit K/V blocks of the longest
// possible sequence (n_blocks, from the cache's capacity) per split.
// H200, bf16, GQA 32/8, d=128, batch 1 (slots 264, work 8), us for 8 / 16 / 32 / 64 / 128 splits:
//   4k:   22.4 / 18.4 / 20.0 / 32.0 / 37.7   (this rule: 16)
//   32k: 106.2 / 60.7 / 47.0 / 71.9 / 108.3  (this rule: 33)
//   128k: 394 / 204 / 137.7 / 163 / 200      (this rule: 33; FA2's wave-efficiency rule took 29: 150.7)
// Again after PDL (2026-12-02, results/h200_splits_decode.md), us for the rule / other counts:
//   1 x 32k: 37.6 (33) / 39.4 (28), 42.0 (24), 45.4 (40), 43.3 (48), 43.3 (66), 47.1 (12)
//   8 x 4k:  38.6 (4)  / 40.9 (3), 44.8 (5), 41.6 (6), 41.6 (8), 43.0 (12)
//   8 x 32k: 242.3 (4) / 263.5 (3), 258.4 (6), 243.8 (8), 245.4 (12), 250.5 (24)
// One full wave stays the optimum; what 1 x 32k and 8 x 4k lose to the copy rate is not the count.
constexpr int kMinBlocksPerSplit = 4;
inline int decode_num_splits(int work_blocks, int slots, int n_blocks) {
  if (work_blocks <= 0 || slots <= 0 || float(work_blocks) >= 0.8f * float(slots)) { return 1; }
  const int wave = slots / work_blocks;
  const int by_length = (n_blocks + kMinBlocksPerSplit - 1) / kMinBlocksPerSplit;
  return std::max(1, std::min({wave, by_length, kMaxSplits}));
}

// Whether fwd() (flash_attn_cuda.attention) should run on the KV-cache kernel: when the query
// rows of one K/V head (seqlen_q x GQA group) fit its 16-row packed tile. The FA2 forward would
// give each query head a 128-row tile of which seqlen_q rows live and read K/V once per query
// head (H200, GQA 32/8, d=128, one token: 0.13 TB/s at batch 1 x 32k, 0.7 TB/s at batch 64 x 8k;
// the decode kernel: 2.9 and 4.1 TB/s, benchmarks/results/h200_decode.md).
inline bool prefer_decode_kernel(int seqlen_q, int group) { return int64_t(seqlen_q) * group <= 16; }

}  // namespace flash
