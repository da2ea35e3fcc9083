// Shared-memory budgets: the keys of the forward and backward tile tables (fwd_tile_config.h,
// bwd_tile_config.h), and what the dispatch reports about the tile it picked. Host-only, no CuTe.
//
// The sm80-family kernels are the same SASS on 8.0, 8.6, 8.9 and 9.0; what differs between those
// GPUs is the dynamic shared memory one thread block may opt in to
// (cudaDevAttrMaxSharedMemoryPerBlockOptin):
//   227 KB  sm90 (H100, H200): the default tiles, tuned on the H200
//   163 KB  sm80 (A100, A30)
//    99 KB  sm86 / sm89 (RTX 30xx / 40xx, A10, A40, L4, L40)
// Each table has one row per head dim at 227 KB and, where that tile does not fit a smaller
// budget, a row for it. The dispatch launches the first row, largest budget first, whose tile fits
// the budget it has (pick_budget_kb): the GPU's opt-in limit, capped by
// FLASH_ATTN_CUDA_SMEM_BUDGET (KB; a testing knob that lets the H200 run the small tiles).
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

namespace flash {

// Table keys in KB, largest first (the order the dispatch tries them in).
inline constexpr int kSmemBudgetsKB[] = {227, 163, 99};
inline constexpr int kDefaultBudgetKB = 227;

// The key a row inherits its tile from when the table has none for this budget.
constexpr int larger_budget_kb(int budget_kb) { return budget_kb <= 99 ? 163 : 227; }

// The tile a direction's dispatch picked (or would pick) for one call; smem_bytes < 0 and
// budget_kb == 0: no tile of the table fits the budget (or the head dim is not compiled).
struct KernelTile {
  int block_m = -1, block_n = -1, warps = -1;
  int q_stages = 1;       // backward: Q/dO buffers (2 = the next Q block loads under this one's MMAs)
  int smem_bytes = -1;    // dynamic shared memory per thread block
  int budget_kb = 0;      // the table row that holds this tile
  int budget_bytes = 0;   // the budget it was picked under
};

// Whether this build compiled the rows below the default (FLASH_ATTN_CUDA_SMEM_TILES; setup.py defines
// FLASH_ATTN_CUDA_NO_SMEM_TILES for every source when not, e.g. a 9.0-only build).
#ifdef FLASH_ATTN_CUDA_NO_SMEM_TILES
inline constexpr bool kSmemTilesCompiled = false;
#else
inline constexpr bool kSmemTilesCompiled = true;
#endif

// The first key, largest first, whose tile (smem_of(key) bytes) fits budget_bytes; 0 if none. A
// key below the default is picked only when its tile differs from the larger key's (else the larger
// one fits too), so without the compiled small rows only the default key is tried.
template <typename SmemOf>
constexpr int pick_budget_kb(int budget_bytes, SmemOf smem_of) {
  for (int kb : kSmemBudgetsKB) {
    if (kb != kDefaultBudgetKB && !kSmemTilesCompiled) { continue; }
    if (smem_of(kb) <= budget_bytes) { return kb; }
  }
  return 0;
}

// The tile a table launches under budget_bytes. row_at(std::integral_constant<int, KB>{}) returns
// the table's row at key KB as a KernelTile (block_m, block_n, warps, q_stages, smem_bytes); the
// result is the picked row with its key and the budget filled in (budget_kb 0: none fits).
template <typename RowAt>
KernelTile tile_under(int budget_bytes, RowAt row_at) {
  const KernelTile rows[] = {row_at(std::integral_constant<int, 227>{}), row_at(std::integral_constant<int, 163>{}),
                             row_at(std::integral_constant<int, 99>{})};
  static_assert(sizeof(rows) / sizeof(rows[0]) == sizeof(kSmemBudgetsKB) / sizeof(kSmemBudgetsKB[0]));
  auto row_of = [&](int kb) -> const KernelTile& { return rows[kb == 227 ? 0 : kb == 163 ? 1 : 2]; };
  const int budget_kb = pick_budget_kb(budget_bytes, [&](int kb) { return row_of(kb).smem_bytes; });
  KernelTile tile = budget_kb != 0 ? row_of(budget_kb) : KernelTile{};
  tile.budget_kb = budget_kb;
  tile.budget_bytes = budget_bytes;
  return tile;
}

// Runs launch(std::integral_constant<int, KB>{}) for the row budget_kb a picker chose
// (fwd_tile_under / bwd_tile_under): the default row always, a smaller one where it holds a tile of
// its own (kOwn163 / kOwn99: one instantiation each) and the build compiled the small rows. Anything
// else launches nothing: cudaErrorInvalidConfiguration (the binding refuses first, naming the limit).
template <bool kOwn163, bool kOwn99, typename Launch>
cudaError_t launch_budget_row(int budget_kb, Launch&& launch) {
  switch (budget_kb) {
    case 227:
      return launch(std::integral_constant<int, 227>{});
    case 163:
      if constexpr (kSmemTilesCompiled && kOwn163) { return launch(std::integral_constant<int, 163>{}); }
      break;
    case 99:
      if constexpr (kSmemTilesCompiled && kOwn99) { return launch(std::integral_constant<int, 99>{}); }
      break;
    default:
      break;
  }
  return cudaErrorInvalidConfiguration;
}

}  // namespace flash
