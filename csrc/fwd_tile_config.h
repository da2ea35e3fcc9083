// Per-head-dim tile sizes of the forward kernel: one table, one row per compiled head dim.
//
// Constraints: smem = (kBlockM + 2*kBlockN) * d * 2 B must fit 227 KB (sm90) / 163 KB (sm80);
// per-thread accumulators are kBlockM*d/threads (O) + kBlockM*kBlockN/threads (S) floats and
// must stay under 255 registers with the MMA fragments, or the kernel spills.
// kSplit: kSplitMaskedLoop of FwdTraits (masked blocks in their own loop, kernel_traits.h).
//
// Chosen by measurement on the H200: bf16, FA2-paper grid (batch*seqlen = 16k, hidden 2048),
// C++ bench (benchmarks/cpp/tune_fwd.sh), TFLOP/s at seqlen 2k / 16k, non-causal | causal.
// Each line is one config; "split"/"1-loop" is kSplitMaskedLoop. Full tables: benchmarks/NOTES.md.
//   d=32   128x128x4 split  228 / 244 | 195 / 237   <- chosen (144 B spills, still fastest)
//          128x64x4  split  194 / 224 | 183 / 219;   128x64x4 1-loop 158 / 167 | 144 / 164
//   d=64   128x64x4  split  302 / 323 | 265 / 312   <- chosen
//          128x128x4 split  283 / 300 | 240 / 288   (100 B spills)
//          128x128x4 1-loop 271 / 286 | 234 / 272
//          128x128x8 split  250 / 267 | 220 / 269;   64x128x4 split 260 / 273 | 224 / 272
//   d=96   128x64x4  split  337 / 339 | 277 / 326   <- chosen
//          128x64x4  1-loop 303 / 317 | 263 / 303;   64x64x4 split 256 / 264 | 231 / 255
//   d=128  128x64x4  1-loop 345 / 356 | 284 / 328   <- chosen (the first kernel; the shipped
//                                                      1-loop form has the same SASS)
//          128x64x4  split  317 / 333 | 264 / 309   (split spills more here)
//          128x128x8 split  305 / 324 | 260 / 325;   64x64x4 split 272 / 280 | 247 / 282
//   d=160  128x64x8  split  282 / 296 | 236 / 299   <- chosen
//          64x64x4   split  272 / 278 | 240 / 278
//   d=192  128x64x8  split  299 / 312 | 246 / 313   <- chosen
//          64x64x4   split  287 / 293 | 252 / 292
//   d=224  128x64x8  split  285 / 299 | 234 / 272   <- chosen
//          64x64x4   split  280 / 283 | 241 / 274
//   d=256  128x64x8  split  302 / 321 | 249 / 323   <- chosen
//          128x64x8  1-loop 295 / 309 | 240 / 308
//          64x64x4   split  287 / 297 | 249 / 295;   128x32x8 split 246 / 256 | 203 / 258
#pragma once

namespace flash {

template <int kHeadDim> struct FwdTileConfig;

#define FLASH_FWD_TILE(D, BM, BN, WARPS, SPLIT)                                   \
  template <> struct FwdTileConfig<D> {                                          \
    static constexpr int kBlockM = BM, kBlockN = BN, kNWarps = WARPS;            \
    static constexpr bool kSplitMaskedLoop = SPLIT;                              \
  };
//             d    kBlockM kBlockN warps kSplit
FLASH_FWD_TILE(32,  128,    128,    4,    true)
FLASH_FWD_TILE(64,  128,    64,     4,    true)
FLASH_FWD_TILE(96,  128,    64,     4,    true)
FLASH_FWD_TILE(128, 128,    64,     4,    false)
FLASH_FWD_TILE(160, 128,    64,     8,    true)
FLASH_FWD_TILE(192, 128,    64,     8,    true)
FLASH_FWD_TILE(224, 128,    64,     8,    true)
FLASH_FWD_TILE(256, 128,    64,     8,    true)
#undef FLASH_FWD_TILE

}  // namespace flash
