// Host-only: prints the tile tables (fwd_tile_config.h, bwd_tile_config.h) as the traits compute
// them, for tests/test_smem_tiles_cpu.py. Built with nvcc, no GPU needed, no kernel instantiated.
//   row  <dir> <d> <budget_kb> <own 0|1> <block_m> <block_n> <warps> <q_stages> <smem_bytes> <sdp> <dkv> <dq>
//   pick <dir> <d> <budget_bytes> <budget_kb picked> <smem_bytes>
#include <cstdio>

#include "bwd_tile_config.h"
#include "fwd_tile_config.h"

namespace {

constexpr int kHeadDims[] = {32, 64, 96, 128, 160, 192, 224, 256};
// Opt-in limits of real GPUs (cudaDevAttrMaxSharedMemoryPerBlockOptin) and a few in between.
constexpr int kBudgets[] = {232448, 166912, 101376, 150000, 120000, 64 * 1024};

template <int D, int KB>
void fwd_row() {
  using C = flash::FwdTileConfig<D, KB>;
  std::printf("row fwd %d %d %d %d %d %d 1 %d 0 0 0\n", D, KB, int(flash::fwd_tile_is_own<D, KB>()), C::kBlockM,
              C::kBlockN, C::kNWarps, flash::FwdTraitsFor<D, KB>::kSmemBytes);
}

template <int D, int KB>
void bwd_row() {
  using C = flash::BwdTileConfig<D, KB>;
  std::printf("row bwd %d %d %d %d %d %d %d %d %d %d %d\n", D, KB, int(flash::bwd_tile_is_own<D, KB>()), C::kBlockM,
              C::kBlockN, C::kNWarps, C::kQStages, flash::BwdTraitsFor<D, cutlass::half_t, KB>::kSmemBytes,
              C::kAtomMSdP, C::kAtomNdKV, C::kAtomMdQ);
}

template <int D>
void head_dim() {
  fwd_row<D, 227>(), fwd_row<D, 163>(), fwd_row<D, 99>();
  bwd_row<D, 227>(), bwd_row<D, 163>(), bwd_row<D, 99>();
  for (int budget : kBudgets) {
    const flash::KernelTile f = flash::fwd_tile_under<D>(budget), b = flash::bwd_tile_under<D>(budget);
    std::printf("pick fwd %d %d %d %d\n", D, budget, f.budget_kb, f.smem_bytes);
    std::printf("pick bwd %d %d %d %d\n", D, budget, b.budget_kb, b.smem_bytes);
  }
}

template <int... Ds>
void all(std::integer_sequence<int, Ds...>) {
  (head_dim<Ds>(), ...);
}

}  // namespace

int main() {
  all(std::integer_sequence<int, 32, 64, 96, 128, 160, 192, 224, 256>{});
  static_assert(sizeof(kHeadDims) / sizeof(int) == 8);
  return 0;
}
