// Shared-memory wavefronts of the sm90 backward's dQ stores (bwd_mainloop.h store_pairs_shared) into sdQ, host-only:
// every consumer thread's st.shared.v2.f32 addresses from the real CuTe C-fragment partition (the dQ wgmma, 64 x
// kDQCols per warpgroup) and the sdQ layout (bwd_traits.h SmemLayoutDQ), directly or through the DQ_ROW_PERM
// view (wgmma row p to sdQ row sigma(p)); an 8-byte store is served per half-warp: wavefronts = the most 4-byte words
// any bank gets within each half, summed over both. Also checks the permutation end to end (row_perm_mismatches).
//   nvcc -std=c++17 --expt-relaxed-constexpr -I$(python3 third_party/find_cutlass.py) -Icsrc tools/sdq_banks.cu \
//     -o /tmp/sdq_banks && /tmp/sdq_banks
// Expected (twenty-eighth session): the plain 128-byte swizzle 4.00 per store at d = 64 and 128 (what Nsight
// Compute measured at d = 128), the permuted rows 2.00, the ideal; 0 mismatches, and some with one side only.
#include <cstdio>

#include <cute/tensor.hpp>

#include "sm90/bwd_traits.h"

using namespace cute;

// Mean and worst wavefronts per STS.64 over both consumer warpgroups, 4 warps each, every store of the fragment.
// kPerm: the stores through the DQ_ROW_PERM view (wgmma row p to sdQ row sigma(p), bwd_traits.h).
template <int kD, bool kPerm>
void report(const char* name) {
  // The default 64-row tile of d = 64 / 128 (bwd_tile_table.h): its dQ wgmma and sdQ layout; the view chosen here
  // (the kernel's follows the build's macro, Traits::kDQRowPerm).
  using Traits = flash::sm90::BwdTraits<kD, 64, 128, 2, cutlass::bfloat16_t, 2>;
  constexpr int kBlockM = Traits::kBlockM, kCols = Traits::kDQCols;
  static_assert(!Traits::kDQSwapAB && !Traits::kDQSplitRows, "dQ split by columns, stored from the C fragment");
  using Mma = typename Traits::MmaDQ;
  using L = typename Traits::SmemLayoutDQ;
  // Offsets only: the swizzle composed into the layout, as the kernel's position-independent view.
  auto sdq_plain = make_tensor(make_smem_ptr(static_cast<float*>(nullptr)), L{});
  auto sdq = [&] {
    if constexpr (kPerm) {
      return make_tensor(sdq_plain.data(), composition(L{}, typename Traits::DQStoreTiler{}));
    } else {
      return sdq_plain;
    }
  }();
  // Every fp32 pair of a thread's C fragment (kBlockM x kCols over the warpgroup's 128 threads): one STS.64 each.
  constexpr int kPerThread = kBlockM * kCols / 128;
  int worst = 0, total = 0, stores = 0;
  for (int wg = 0; wg < kD / kCols; ++wg) {
    for (int warp = 0; warp < 4; ++warp) {
      for (int j = 0; j < kPerThread; j += 2) {
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
  std::printf("d = %d, %-24s wavefronts per STS.64: mean %.2f, worst %d (ideal 2), %d stores per thread\n", kD, name,
              double(total) / stores, worst, kPerThread / 2);
}

// DQ_ROW_PERM end to end, on the real layouts of a tile: the consumers write dS^T's query q through the
// DStWriteTiler view; the sdS row r it lands in (SmemLayoutDS (q, keys) inverted by search) is the dQ wgmma's row
// r (A = sdS row r); that row is stored through the DQStoreTiler view, which must address sdQ row q. Returns the
// number of (q, key, column) points where it does not.
// kOneSide (the check must then fail): 1 dQ stored to sdQ directly, 2 dS^T written to sdS directly.
template <int kD, int kBlockM, int kOneSide = 0>
int row_perm_mismatches() {
  using Traits = flash::sm90::BwdTraits<kD, kBlockM, 128, 2, cutlass::bfloat16_t, 2>;
  using DS = typename Traits::SmemLayoutDS;    // (q, keys, stage)
  using DSt = typename Traits::SmemLayoutDSt;  // (keys, q, stage)
  using DQ = typename Traits::SmemLayoutDQ;    // (q, d, stage)
  auto dst_w = composition(DSt{}, typename Traits::DStWriteTiler{});
  auto dq_w = composition(DQ{}, typename Traits::DQStoreTiler{});
  int bad = 0;
  for (int q = 0; q < kBlockM; ++q) {
    for (int key = 0; key < Traits::kBlockN; key += 37) {
      const int off = kOneSide == 2 ? DSt{}(key, q, 0) : dst_w(key, q, 0);
      int row = -1;
      for (int r = 0; r < kBlockM; ++r) { row = DS{}(r, key, 0) == off ? r : row; }
      for (int c = 0; c < kD; c += 5) {
        const int stored = kOneSide == 1 ? DQ{}(row, c, 0) : dq_w(row, c, 0);
        bad += row < 0 || stored != DQ{}(q, c, 0);
      }
    }
  }
  return bad;
}

int main() {
  report<64, false>("128-byte swizzle");
  report<64, true>("rows permuted");
  report<128, false>("128-byte swizzle");
  report<128, true>("rows permuted");
  std::printf("row permutation mismatches: d = 64 tile 64 %d, d = 128 tile 64 %d, d = 64 tile 128 %d\n",
              row_perm_mismatches<64, 64>(), row_perm_mismatches<128, 64>(), row_perm_mismatches<64, 128>());
  std::printf("one side only: d = 128 tile 64 %d (dQ plain), %d (dS plain)\n", row_perm_mismatches<128, 64, 1>(),
              row_perm_mismatches<128, 64, 2>());
  return 0;
}
