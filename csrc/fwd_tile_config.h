// Per-head-dim tile sizes of the forward kernel: one table, one row per (head dim, shared-memory
// budget) where the budget needs its own tile (smem_budget.h: 227 KB default, 163 KB, 99 KB).
//
// Constraints: smem = (kBlockM + 2*kBlockN) * d * 2 B must fit the row's budget;
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

#include <cuda_runtime.h>

#include <type_traits>

#include "kernel_traits.h"
#include "params.h"
#include "smem_budget.h"

namespace flash {

// FwdTileConfig<d, budget_kb>: the tile of head dim d under a shared-memory budget (smem_budget.h).
// A budget without its own row inherits the next larger budget's tile.
template <int kHeadDim, int kBudgetKB = kDefaultBudgetKB>
struct FwdTileConfig : FwdTileConfig<kHeadDim, larger_budget_kb(kBudgetKB)> {};

template <int kHeadDim, int kBudgetKB, typename Element = cutlass::half_t>
using FwdTraitsFor = FwdTraits<kHeadDim, FwdTileConfig<kHeadDim, kBudgetKB>::kBlockM,
                               FwdTileConfig<kHeadDim, kBudgetKB>::kBlockN, FwdTileConfig<kHeadDim, kBudgetKB>::kNWarps,
                               Element, FwdTileConfig<kHeadDim, kBudgetKB>::kSplitMaskedLoop>;

// Whether budget_kb's row holds a tile of its own (else it inherits one: no extra instantiation).
template <int kHeadDim, int kBudgetKB>
constexpr bool fwd_tile_is_own() {
  return kBudgetKB == kDefaultBudgetKB ||
         !std::is_same_v<FwdTraitsFor<kHeadDim, kBudgetKB>, FwdTraitsFor<kHeadDim, larger_budget_kb(kBudgetKB)>>;
}

// Every row is checked where it is written: its tile divides its operands (FwdTraits' asserts),
// fits its budget, and a smaller budget's row exists only because the larger row's tile does not
// fit it (else the dispatch would never launch it).
#define FLASH_FWD_TILE(D, KB, BM, BN, WARPS, SPLIT)                                                      \
  template <> struct FwdTileConfig<D, KB> {                                                              \
    static constexpr int kBlockM = BM, kBlockN = BN, kNWarps = WARPS;                                    \
    static constexpr bool kSplitMaskedLoop = SPLIT;                                                      \
  };                                                                                                     \
  static_assert(FwdTraitsFor<D, KB>::kSmemBytes <= (KB) * 1024, "fwd tile exceeds its budget");         \
  static_assert((KB) == kDefaultBudgetKB ||                                                              \
                    FwdTraitsFor<D, larger_budget_kb(KB)>::kSmemBytes > (KB) * 1024,                     \
                "fwd row never launched: the larger budget's tile fits");
// Default tiles (227 KB; the measurements above). Shared memory (kBlockM + 2 kBlockN) * d * 2 B:
// 24, 32, 48, 64, 80, 96, 112, 128 KB for d = 32 ... 256, so every head dim fits A100's 163 KB and
// all up to d = 192 fit 99 KB.
//             d    KB   kBlockM kBlockN warps kSplit
FLASH_FWD_TILE(32,  227, 128,    128,    4,    true)
FLASH_FWD_TILE(64,  227, 128,    64,     4,    true)
FLASH_FWD_TILE(96,  227, 128,    64,     4,    true)
FLASH_FWD_TILE(128, 227, 128,    64,     4,    false)
FLASH_FWD_TILE(160, 227, 128,    64,     8,    true)
FLASH_FWD_TILE(192, 227, 128,    64,     8,    true)
FLASH_FWD_TILE(224, 227, 128,    64,     8,    true)
FLASH_FWD_TILE(256, 227, 128,    64,     8,    true)
// 99 KB (sm86/sm89): d = 224, 256 halve kBlockM: 84 / 96 KB. 64x64x4 split was the runner-up
// at both on the H200 (280 / 283 and 287 / 297 TFLOP/s non-causal, within 2-7 % of the default
// tile; FA2 makes the same choice for sm86/sm89). Prediction; benchmarks/NOTES.md ("Tiles for
// 163 KB and 99 KB") has the measurement under FLASH_ATTN_CUDA_SMEM_BUDGET=99.
FLASH_FWD_TILE(224, 99,  64,     64,     4,    true)
FLASH_FWD_TILE(256, 99,  64,     64,     4,    true)
#undef FLASH_FWD_TILE

// The tile of head dim kHeadDim the dispatch launches under budget_bytes (budget_kb 0: none fits).
template <int kHeadDim>
KernelTile fwd_tile_under(int budget_bytes) {
  return tile_under(budget_bytes, [](auto kb) {
    using Cfg = FwdTileConfig<kHeadDim, decltype(kb)::value>;
    KernelTile row;
    row.block_m = Cfg::kBlockM, row.block_n = Cfg::kBlockN, row.warps = Cfg::kNWarps;
    row.smem_bytes = FwdTraitsFor<kHeadDim, decltype(kb)::value>::kSmemBytes;
    return row;
  });
}

// One instantiation per (element type, compiled head dim, budget row with a tile of its own):
// csrc/instantiations/fwd_hdim<d>_<dtype>[_smem<KB>].cu (tools/gen_instantiations.py SMEM_TILES).
template <typename Element, int kHeadDim, int kBudgetKB = kDefaultBudgetKB>
cudaError_t run_fwd_(const FwdParams& params, cudaStream_t stream);

}  // namespace flash
