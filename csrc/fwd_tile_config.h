// Per-head-dim tile sizes of the forward kernel: one table, one row per compiled head dim.
//
// Constraints: smem = (kBlockM + 2*kBlockN) * d * 2 B must fit 227 KB (sm90) / 163 KB (sm80);
// per-thread accumulators are kBlockM*d/threads (O) + kBlockM*kBlockN/threads (S) floats and
// must stay under 255 registers with the MMA fragments, or the kernel spills.
// kSplit: kSplitMaskedLoop of FwdTraits (masked blocks in their own loop, kernel_traits.h).
//
// Measured on the H200, bf16, FA2-paper grid, C++ bench (benchmarks/cpp/tune_fwd.sh),
// TFLOP/s at seqlen 2k / 16k, non-causal | causal. Full tables: benchmarks/NOTES.md.
//   d=64   128x64x4  split  302 / 323 | 265 / 312   <- chosen
//          128x128x4 split  283 / 300 | 240 / 288   (100 B spills)
//          128x128x4 1-loop 271 / 286 | 234 / 272
//          128x128x8 split  250 / 267 | 220 / 269;   64x128x4 split 260 / 273 | 224 / 272
//   d=128  128x64x4  1-loop 345 / 356 | 284 / 328   <- chosen
//          128x64x4  split  317 / 333 | 264 / 309   (split spills more here)
//          128x128x8 split  305 / 324 | 260 / 325;   64x64x4 split 272 / 280 | 247 / 282
//   d=256  128x64x8  split  302 / 321 | 249 / 323   <- chosen
//          128x64x8  1-loop 295 / 309 | 240 / 308
//          64x64x4   split  287 / 297 | 249 / 295;   128x32x8 split 246 / 256 | 203 / 258
// Head dims 32, 96, 160, 192, 224: see NOTES.md for whether they were measured; rows below
// say so.
#pragma once

namespace flash {

template <int kHeadDim> struct FwdTileConfig;

#define FLASH_FWD_TILE(D, BM, BN, WARPS, SPLIT)                                   \
  template <> struct FwdTileConfig<D> {                                          \
    static constexpr int kBlockM = BM, kBlockN = BN, kNWarps = WARPS;            \
    static constexpr bool kSplitMaskedLoop = SPLIT;                              \
  };
//             d    kBlockM kBlockN warps kSplit
FLASH_FWD_TILE(32,  128,    64,     4,    true)   // by analogy with d=64
FLASH_FWD_TILE(64,  128,    64,     4,    true)   // measured, above
FLASH_FWD_TILE(96,  128,    64,     4,    true)   // by analogy with d=64
FLASH_FWD_TILE(128, 128,    64,     4,    false)  // measured, above
FLASH_FWD_TILE(160, 128,    64,     8,    true)   // by analogy with d=256
FLASH_FWD_TILE(192, 128,    64,     8,    true)   // by analogy with d=256
FLASH_FWD_TILE(224, 128,    64,     8,    true)   // by analogy with d=256
FLASH_FWD_TILE(256, 128,    64,     8,    true)   // measured, above
#undef FLASH_FWD_TILE

}  // namespace flash
