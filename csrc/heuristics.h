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
// thread blocks already fill 80 % of the GPU's slots (SMs x blocks per SM). Else:
//   - short caches (at most kShortBlocksPerSplit K/V blocks per split when every SM takes one thread
//     block): one thread block per SM, floor(SMs / work_blocks) splits (fewer if the cache has fewer
//     K/V blocks). Such a call is mostly fixed cost (launch, first tile, merge, combine) and a second
//     block on an SM only shares the SM.
//   - otherwise one full wave of slots, floor(slots / work_blocks) splits, at least kMinBlocksPerSplit
//     K/V blocks each (two blocks per SM keep twice the K/V in flight).
// n_blocks: K/V blocks of the longest possible sequence (from the cache's capacity).
// H200, bf16, GQA 32/8, d=128, batch 1 (slots 264, work 8), us for 8 / 16 / 32 / 64 / 128 splits
// (2026-12-01, before PDL and the parallel combine):
//   4k:   22.4 / 18.4 / 20.0 / 32.0 / 37.7
//   32k: 106.2 / 60.7 / 47.0 / 71.9 / 108.3
//   128k: 394 / 204 / 137.7 / 163 / 200      (FA2's wave-efficiency rule took 29: 150.7)
// After PDL (2026-12-02, results/h200_splits_decode.md), us for the rule / other counts:
//   1 x 32k: 37.6 (33) / 39.4 (28), 42.0 (24), 45.4 (40), 43.3 (48), 43.3 (66), 47.1 (12)
//   8 x 4k:  38.6 (4)  / 40.9 (3), 44.8 (5), 41.6 (6), 41.6 (8), 43.0 (12)
//   8 x 32k: 242.3 (4) / 263.5 (3), 258.4 (6), 243.8 (8), 245.4 (12), 250.5 (24)
// With the L2 prefetch (2026-12-02, eighth session, results/history/h200_splits2_*), us by count:
//   1 x 2k: 9.89 (8, the rule before: 4 blocks each) / 9.21 (12) / 8.06 (16) / 8.88 (24) / 9.40 (32) /
//           9.15 (33); cuDNN 8.61
//   1 x 4k: 9.88 (16) / 9.75 (16, forced) / 12.2 (12) / 11.05 (24) / 11.31 (32) / 11.51 (33)
//   8 x 2k: 23.12 (4) / 23.39 (2) / 26.51 (6) / 26.99 (8);  8 x 4k: 37.58 (4) / 39.75 (2) / 41.46 (6)
//   1 x 1k: 7.01 (16) / 8.11 (8) / 9.38 (4) / 8.48 (32); cuDNN 7.49
//   1 x 8k: 13.58 (16) / 14.55 (32) / 21.38 (8) / 31.52 (4); cuDNN 15.25
// So one block per SM wins up to 8 K/V blocks per split (1 x 8k: 16 splits of 8 beat 32 of 4), while
// 16 per split at one block per SM is even with 8 at two (8 x 2k: 2 splits 23.39, 4 splits 23.12)
// and 32 loses (1 x 32k: 16 splits 60.7 against 33 splits 47.0, the 2026-12-01 sweep).
constexpr int kMinBlocksPerSplit = 4;
constexpr int kShortBlocksPerSplit = 8;
inline int decode_num_splits(int work_blocks, int num_sms, int slots, int n_blocks) {
  if (work_blocks <= 0 || slots <= 0 || float(work_blocks) >= 0.8f * float(slots)) { return 1; }
  const int sm_wave = std::max(1, num_sms / work_blocks);  // splits at one thread block per SM
  if (n_blocks <= kShortBlocksPerSplit * sm_wave) { return std::max(1, std::min({sm_wave, n_blocks, kMaxSplits})); }
  const int wave = slots / work_blocks;
  const int by_length = (n_blocks + kMinBlocksPerSplit - 1) / kMinBlocksPerSplit;
  return std::max(1, std::min({wave, by_length, kMaxSplits}));
}

// Whether a decode call takes the wide tile (decode_traits.h kWide: 128 keys x 4 warps, one thread block
// per SM) where the head dim has one. It pays on long K/V ranges per thread block and loses where each
// block streams few K/V blocks (its first 64 KB tile is the whole wait) or where the grid runs in several
// waves of short blocks. work_blocks: batch x K/V heads x packed-row tiles; n_blocks: the wide tile's K/V
// blocks of the cache's capacity (static shapes only, like the split count). A paged call takes the tile
// its contiguous twin takes (bit-identical outputs); paged caches gain less from the wide tile.
// H100 SXM, twenty-second session, d = 128 bf16, one token, same runs (cuDNN in each), base / wide / the
// first form of this rule (several waves from 32 blocks) / base again, results/history/h100_wide_*; wide
// against the mean of the base runs, contiguous (paged 16):
//   GQA 32/8:  1 x 1k / 2k / 4k 0.946 / 0.957 / 0.970 (each block streams 1-2 K/V blocks)
//              1 x 8k 1.062 (0.991), 1 x 32k 1.033 (0.992); 8 x 1k 1.170 (0.969), 8 x 2k 1.014 (0.950),
//              8 x 4k 1.025 (0.978), 8 x 32k 1.017; 16 x 1k 1.121 (1.101), 16 x 4k 1.046, 16 x 32k 1.004
//              32 x 1k / 2k / 4k 0.977 / 0.990 / 0.997 (0.980), 32 x 8k / 32k 1.005 / 1.008
//              64 x 1k / 2k / 4k 0.963 / 0.991 / 0.996 (0.978), 64 x 8k / 32k 1.002 / 1.013
//   MHA 32/32: 1 x 1k 0.984, 1 x 2k 1.061, 1 x 4k 1.000 (0.936), 1 x 8k 1.023 (0.971), 1 x 32k 1.019;
//              8 x 1k / 2k 0.966 / 0.993, 8 x 4k 1.007, 8 x 8k / 32k 1.013 / 1.018; 16 x 4k 0.999,
//              16 x 32k 1.010; 32 x 4k / 8k 1.005 / 1.009; 64 x 4k / 8k 1.009 / 1.012
// H200 (ninth session, ours / cuDNN base against wide): 8 x 1k 0.96 / 1.04, 1 x 1k 1.07 / 1.04,
//   32 x 1k 1.02 / 0.93, 32 x 2k 0.99 / 0.96 (two waves of 8 or 16 blocks each), 32 x 4k 0.99 / 0.99.
// So: at least 4 wide K/V blocks per thread block (16 when the keys are split: the split calls with fewer,
// GQA 1 x 8k, 8 x 1k / 2k and MHA 1 x 2k / 4k, gained up to 17 % contiguous but lost up to 6 % paged, and
// paged 16 fell to 0.88 of contiguous at 8 x 1k), and one wave, or several waves from 8k keys (64 blocks; at
// 4k the several-wave shapes moved -0.4 .. +0.9 % contiguous and -1 .. -2 % paged).
constexpr int kWideMinBlocksPerSplit = 4;         // fewer per thread block: the base tile
constexpr int kWideMinBlocksPerSplitSplit = 16;   // the same with more than one split
constexpr int kWideWavesMinBlocks = 64;           // several waves: only from 8k keys (64 wide blocks) up
inline bool decode_pick_wide(int work_blocks, int num_sms, int n_blocks) {
  if (work_blocks <= 0 || num_sms <= 0 || n_blocks <= 0) { return false; }
  const int splits = decode_num_splits(work_blocks, num_sms, num_sms, n_blocks);
  if (n_blocks / splits < (splits > 1 ? kWideMinBlocksPerSplitSplit : kWideMinBlocksPerSplit)) { return false; }
  return int64_t(work_blocks) * splits <= num_sms || n_blocks >= kWideWavesMinBlocks;
}

// Whether fwd() (flash_attn_cuda.attention) should run on the KV-cache kernel: when the query
// rows of one K/V head (seqlen_q x GQA group) fit its 16-row packed tile. The FA2 forward would
// give each query head a 128-row tile of which seqlen_q rows live and read K/V once per query
// head (H200, GQA 32/8, d=128, one token: 0.13 TB/s at batch 1 x 32k, 0.7 TB/s at batch 64 x 8k;
// the decode kernel: 2.9 and 4.1 TB/s, benchmarks/results/h200_decode.md).
inline bool prefer_decode_kernel(int seqlen_q, int group) { return int64_t(seqlen_q) * group <= 16; }

}  // namespace flash
