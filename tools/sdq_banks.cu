// Shared-memory wavefronts of the sm90 backward's dQ stores (bwd_mainloop.h store_pairs_shared) under a given sdQ
// layout, host-only: every consumer thread's st.shared.v2.f32 addresses from the real CuTe C-fragment partition
// (the dQ wgmma, 64 x kDQCols per warpgroup) and the sdQ layout (bwd_traits.h BwdSmemLayoutDQ), an 8-byte store
// served per half-warp: wavefronts = the most 4-byte words any bank gets within each half, summed over both.
//   nvcc -std=c++17 --expt-relaxed-constexpr -I$(python3 third_party/find_cutlass.py) -Icsrc tools/sdq_banks.cu \
//     -o /tmp/sdq_banks && /tmp/sdq_banks
// Expected (twenty-seventh session): the 128-byte-swizzle default 4.00 per store at d = 64 and 128 (what Nsight
// Compute measured at d = 128), the 8-column blocks (FLASH_ATTN_CUDA_SM90_BWD_SDQ_COL8=1) 2.00, the ideal.
#include <cstdio>

#include <cute/tensor.hpp>

#include "sm90/bwd_traits.h"

using namespace cute;

// Mean and worst wavefronts per STS.64 over both consumer warpgroups, 4 warps each, every store of the fragment.
template <int kD, bool kCol8>
void report(const char* name) {
  // The default 64-row tile of d = 64 / 128 (bwd_tile_table.h): its dQ wgmma; the layout given explicitly (the
  // tile's own SmemLayoutDQ follows the build's macro).
  using Traits = flash::sm90::BwdTraits<kD, 64, 128, 2, cutlass::bfloat16_t, 2>;
  constexpr int kBlockM = Traits::kBlockM, kCols = Traits::kDQCols;
  static_assert(!Traits::kDQSwapAB && !Traits::kDQSplitRows, "dQ split by columns, stored from the C fragment");
  using Mma = typename Traits::MmaDQ;
  using L = flash::sm90::BwdSmemLayoutDQ<kBlockM, kD, 2, kCol8>;
  // Offsets only: the swizzle (if any) composed into the layout, as the kernel's position-independent view.
  auto sdq = make_tensor(make_smem_ptr(static_cast<float*>(nullptr)), L{});
  int worst = 0, total = 0, stores = 0;
  for (int wg = 0; wg < kD / kCols; ++wg) {
    for (int warp = 0; warp < 4; ++warp) {
      for (int j = 0; j < 2 * kCols / 8; j += 2) {
        int waves = 0;
        for (int half = 0; half < 2; ++half) {
          int words[32] = {0};
          for (int lane = 16 * half; lane < 16 * half + 16; ++lane) {
            auto part = Mma{}.get_slice(warp * 32 + lane).partition_C(
                local_tile(sdq(_, _, 0), Shape<Int<kBlockM>, Int<kCols>>{}, make_coord(0, wg)));
            const long off = static_cast<long>(&part(j) - static_cast<float*>(nullptr));
            ++words[off % 32];
            ++words[(off + 1) % 32];
          }
          int most = 0;
          for (int b = 0; b < 32; ++b) { most = words[b] > most ? words[b] : most; }
          waves += most;
        }
        worst = waves > worst ? waves : worst;
        total += waves;
        ++stores;
      }
    }
  }
  std::printf("%-28s wavefronts per STS.64: mean %.2f, worst %d (ideal 2)\n", name, double(total) / stores, worst);
}

int main() {
  report<64, false>("d = 64, 128-byte swizzle");
  report<64, true>("d = 64, 8-column blocks");
  report<128, false>("d = 128, 128-byte swizzle");
  report<128, true>("d = 128, 8-column blocks");
  return 0;
}
