// Per-head-dim tiles of the backward, and what the dispatch needs of them without launching.
// Kernel-free (traits only): bwd_dispatch.cu includes this, never bwd_kernel.h, so each backward
// kernel is compiled once, in its instantiations/bwd_*.cu file.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "bwd_kernel_traits.h"
#include "smem_budget.h"

namespace flash {

// BwdTileConfig<d, budget_kb>: the tile of head dim d under a shared-memory budget (smem_budget.h):
// kBlockM, kBlockN, warps, warp rows of the S/dP, dK/dV, dQ MMAs, Q/dO stages. A budget without a
// row of its own inherits the next larger budget's tile.
template <int kHeadDim, int kBudgetKB = kDefaultBudgetKB>
struct BwdTileConfig : BwdTileConfig<kHeadDim, larger_budget_kb(kBudgetKB)> {};

template <int kHeadDim, typename Element, int kBudgetKB = kDefaultBudgetKB>
using BwdTraitsFor = BwdTraits<kHeadDim, BwdTileConfig<kHeadDim, kBudgetKB>::kBlockM,
                               BwdTileConfig<kHeadDim, kBudgetKB>::kBlockN, BwdTileConfig<kHeadDim, kBudgetKB>::kNWarps,
                               BwdTileConfig<kHeadDim, kBudgetKB>::kAtomMSdP, BwdTileConfig<kHeadDim, kBudgetKB>::kAtomNdKV,
                               BwdTileConfig<kHeadDim, kBudgetKB>::kAtomMdQ, Element,
                               BwdTileConfig<kHeadDim, kBudgetKB>::kQStages>;

// The dropout kernel's traits: the same tile, with the S/dP warps rearranged from 4 across the columns
// to 2 (twice the warp rows) where the tile allows it: a thread then holds whole Philox calls (16
// bytes, dropout.h DropoutWalk) where 4 warps across use half of each -- twice the Philox work per
// element. Shared memory, thread count and the dK/dV and dQ layouts (dq_accum's) are unchanged.
constexpr int dropout_atom_m_sdp(int warps, int atom_m_sdp, int block_m) {
  return warps / atom_m_sdp == 4 && block_m % (32 * atom_m_sdp) == 0 ? 2 * atom_m_sdp : atom_m_sdp;
}
template <int kHeadDim, typename Element, int kBudgetKB = kDefaultBudgetKB>
using BwdDropoutTraitsFor =
    BwdTraits<kHeadDim, BwdTileConfig<kHeadDim, kBudgetKB>::kBlockM, BwdTileConfig<kHeadDim, kBudgetKB>::kBlockN,
              BwdTileConfig<kHeadDim, kBudgetKB>::kNWarps,
              dropout_atom_m_sdp(BwdTileConfig<kHeadDim, kBudgetKB>::kNWarps, BwdTileConfig<kHeadDim, kBudgetKB>::kAtomMSdP,
                                 BwdTileConfig<kHeadDim, kBudgetKB>::kBlockM),
              BwdTileConfig<kHeadDim, kBudgetKB>::kAtomNdKV, BwdTileConfig<kHeadDim, kBudgetKB>::kAtomMdQ, Element,
              BwdTileConfig<kHeadDim, kBudgetKB>::kQStages>;

// Whether budget_kb's row holds a tile of its own (else it inherits one: no extra instantiation).
template <int kHeadDim, int kBudgetKB>
constexpr bool bwd_tile_is_own() {
  return kBudgetKB == kDefaultBudgetKB ||
         !std::is_same_v<BwdTraitsFor<kHeadDim, cutlass::half_t, kBudgetKB>,
                         BwdTraitsFor<kHeadDim, cutlass::half_t, larger_budget_kb(kBudgetKB)>>;
}

#define FLASH_BWD_TILE_ROW(D, KB, BM, BN, WARPS, SDP, DKV, DQ, STAGES)                         \
  template <> struct BwdTileConfig<D, KB> {                                                    \
    static constexpr int kBlockM = BM, kBlockN = BN, kNWarps = WARPS;                          \
    static constexpr int kAtomMSdP = SDP, kAtomNdKV = DKV, kAtomMdQ = DQ, kQStages = STAGES;   \
  };
// Every row is checked where it is written: its tile divides its operands (BwdTraits' asserts),
// fits its budget, and a smaller budget's row exists only because the larger row's tile does not
// fit it (else the dispatch would never launch it).
#define FLASH_BWD_TILE_CHECK(D, KB)                                                                             \
  static_assert(BwdTraitsFor<D, cutlass::half_t, KB>::kSmemBytes <= (KB) * 1024, "bwd tile exceeds its budget"); \
  static_assert((KB) == kDefaultBudgetKB ||                                                                     \
                    BwdTraitsFor<D, cutlass::half_t, larger_budget_kb(KB)>::kSmemBytes > (KB) * 1024,           \
                "bwd row never launched: the larger budget's tile fits");

// FLASH_BWD_TUNE_* (benchmarks/cpp/tune_bwd.sh) replaces the default rows with one config (its
// checks are off: the config need not suit every head dim of the table).
#ifdef FLASH_BWD_TUNE_BM
#ifndef FLASH_BWD_TUNE_STAGES
#define FLASH_BWD_TUNE_STAGES 2
#endif
#define FLASH_BWD_TILE(D, KB, BM, BN, WARPS, SDP, DKV, DQ, STAGES)                                         \
  FLASH_BWD_TILE_ROW(D, KB, ((KB) == kDefaultBudgetKB ? FLASH_BWD_TUNE_BM : (BM)),                        \
                     ((KB) == kDefaultBudgetKB ? FLASH_BWD_TUNE_BN : (BN)),                               \
                     ((KB) == kDefaultBudgetKB ? FLASH_BWD_TUNE_WARPS : (WARPS)),                         \
                     ((KB) == kDefaultBudgetKB ? FLASH_BWD_TUNE_SDP : (SDP)),                             \
                     ((KB) == kDefaultBudgetKB ? FLASH_BWD_TUNE_DKV : (DKV)),                             \
                     ((KB) == kDefaultBudgetKB ? FLASH_BWD_TUNE_DQ : (DQ)),                               \
                     ((KB) == kDefaultBudgetKB ? FLASH_BWD_TUNE_STAGES : (STAGES)))
#else
#define FLASH_BWD_TILE(D, KB, BM, BN, WARPS, SDP, DKV, DQ, STAGES) \
  FLASH_BWD_TILE_ROW(D, KB, BM, BN, WARPS, SDP, DKV, DQ, STAGES)   \
  FLASH_BWD_TILE_CHECK(D, KB)
#endif

// Default tiles (227 KB): FA2's sm80 shapes adapted so every MMA tile divides its operand.
// Measured alternatives and their H200 numbers: benchmarks/NOTES.md ("Backward tiles").
// Every MMA's N tile (16 * warps along N) must divide its operand: the dK/dV and dQ products span
// d, so d = 32, 160, 224 keep 4 warps along M there (N tile 32) and d = 64, 192, 256 use 2 (N tile
// 64, which measured faster at 64 and 256). Shared memory (2 Q/dO stages): d = 32 64 KB, 64 160,
// 96 128, 128 160, 160 136, 192 160, 224 184, 256 208 KB.
//             d    KB   kBlockM kBlockN warps SdP dKV dQ stages
FLASH_BWD_TILE(32,  227, 64,     128,    8,    2,  4,  4, 2)
FLASH_BWD_TILE(64,  227, 128,    128,    8,    2,  4,  2, 2)
FLASH_BWD_TILE(96,  227, 64,     128,    8,    2,  4,  4, 2)
FLASH_BWD_TILE(128, 227, 64,     128,    8,    2,  4,  4, 2)
FLASH_BWD_TILE(160, 227, 64,     64,     8,    4,  4,  4, 2)
FLASH_BWD_TILE(192, 227, 64,     64,     8,    4,  2,  2, 2)
FLASH_BWD_TILE(224, 227, 64,     64,     8,    4,  4,  4, 2)
FLASH_BWD_TILE(256, 227, 64,     64,     8,    4,  2,  2, 2)
// 163 KB (A100): only d = 224, 256 exceed it. Same tiles, Q/dO single-buffered (FA2's A100 choice
// at 256): 128 / 144 KB. Keeping the 64x64 tile and its 8 warps keeps the MMA shapes and register
// budget of the default; the cost is the Q/dO load no longer hidden under the S/dP products.
FLASH_BWD_TILE(224, 163, 64,     64,     8,    4,  4,  4, 1)
FLASH_BWD_TILE(256, 163, 64,     64,     8,    4,  2,  2, 1)
// 99 KB (sm86/sm89). Largest tile that fits, keeping 8 warps and two stages where possible:
//   d=64   64x128, 2 stages: 96 KB (FA2's sm86 tile, without its V-in-registers)
//   d=96   64x64, 2 stages: 88 KB (64x128 single-buffered is 104 KB)
//   d=128  64x64, 1 stage: 80 KB (FA2's sm86 tile; 2 stages 112 KB)
//   d=160  64x64, 1 stage: 96 KB
//   d=192  64x32, 1 stage: 80 KB (64x64 single-buffered is 112 KB)
//   d=224  32x32, 4 warps, 2 stages: 88 KB; d=256 32x32, 4 warps, 1 stage: 68 KB. Anything with
//          kBlockM + kBlockN = 96 at d=256 needs 104 KB (FA2 fits 64x32 by keeping V in registers,
//          which this kernel does not); 8 warps copy 64 rows per pass at d=224, more than a 32-row
//          tile, hence 4 warps there.
FLASH_BWD_TILE(64,  99,  64,     128,    8,    2,  4,  4, 2)
FLASH_BWD_TILE(96,  99,  64,     64,     8,    4,  4,  4, 2)
FLASH_BWD_TILE(128, 99,  64,     64,     8,    4,  2,  2, 1)
FLASH_BWD_TILE(160, 99,  64,     64,     8,    4,  4,  4, 1)
FLASH_BWD_TILE(192, 99,  64,     32,     8,    4,  2,  2, 1)
FLASH_BWD_TILE(224, 99,  32,     32,     4,    2,  2,  2, 2)
FLASH_BWD_TILE(256, 99,  32,     32,     4,    2,  2,  2, 1)
#undef FLASH_BWD_TILE
#undef FLASH_BWD_TILE_CHECK
#undef FLASH_BWD_TILE_ROW

// The tile of head dim kHeadDim the dispatch launches under budget_bytes (budget_kb 0: none fits).
template <int kHeadDim>
KernelTile bwd_tile_under(int budget_bytes) {
  return tile_under(budget_bytes, [](auto kb) {
    using Cfg = BwdTileConfig<kHeadDim, decltype(kb)::value>;
    KernelTile row;
    row.block_m = Cfg::kBlockM, row.block_n = Cfg::kBlockN, row.warps = Cfg::kNWarps, row.q_stages = Cfg::kQStages;
    row.smem_bytes = BwdTraitsFor<kHeadDim, cutlass::half_t, decltype(kb)::value>::kSmemBytes;
    return row;
  });
}

// Defined in bwd_launch.h, instantiated once per (element type, compiled head dim, budget row with
// a tile of its own) in instantiations/bwd_hdim<d>_<dtype>[_smem<KB>].cu; the dispatch sees only
// this declaration.
template <typename Element, int kHeadDim, int kBudgetKB = kDefaultBudgetKB>
cudaError_t run_bwd_(const BwdParams& params, cudaStream_t stream);

}  // namespace flash
