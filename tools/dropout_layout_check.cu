// Host-side check of apply_dropout's layout assumption (csrc/dropout.h) for the forward and backward
// tiles of every head dim (fwd_tile_config.h, bwd_tile_config.h) and the sm90 forward's dropout
// tiles (sm90/fwd_tile_table.h: one warpgroup's 64 x kBlockNDropout wgmma accumulator, viewed by
// sm90::acc_rowcol as the mainloop does): in every thread's S fragment,
// element (2m + half, 2(n + P*octet) + column) of the rowcol view sits at
// (row(2m, 2n) + 8*half, col(2m, 2n) + 32*octet + column), in the Philox chunk, lane and slot that
// philox.h assigns it. No GPU needed:
//   nvcc -std=c++20 --expt-relaxed-constexpr -Icsrc -I$(python third_party/find_cutlass.py) \
//        tools/dropout_layout_check.cu -o build/dropout_layout_check && build/dropout_layout_check
#include <cstdio>
#include <cute/tensor.hpp>
#include "bwd_tile_config.h"
#include "fwd_tile_config.h"
#include "kernel_traits.h"
#include "bwd_kernel_traits.h"
#include "tensor_utils.h"
#include "philox.h"
#include "sm90/fwd_layouts.h"
#include "sm90/fwd_tile_table.h"
using namespace cute;

// kWgmma: the TiledMma is an sm90 warpgroup MMA, its accumulator viewed with sm90::acc_rowcol.
template <class TiledMma, int kBlockM, int kBlockN, int kWarpsN, bool kWgmma = false>
int check(const char* name, int nthreads) {
  int bad = 0, total = 0;
  for (int tid = 0; tid < nthreads; ++tid) {
    TiledMma mma;
    auto thr = mma.get_thread_slice(tid);
    Tensor c = thr.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));
    auto rc_layout = [&] {
      if constexpr (kWgmma) { return flash::sm90::acc_rowcol(c.layout()); } else { return flash::rowcol_view(c.layout()); }
    };
    Tensor rc = make_tensor(c.data(), rc_layout());
    constexpr int kRows = decltype(size<0>(rc))::value;
    constexpr int kAtomsN = decltype(size<1>(rc))::value / 2;
    constexpr int P = 4 / kWarpsN;
    for (int m = 0; m < kRows / 2; ++m)
      for (int n = 0; n < kAtomsN; ++n) {
        if ((n / P) % 2 != 0) continue;
        const int r0 = get<0>(rc(2 * m, 2 * n)), c0 = get<1>(rc(2 * m, 2 * n));
        for (int j = 0; j < 8; ++j) {
          const int half = j / 4, octet = (j / 2) % 2, column = j % 2;
          const int r = get<0>(rc(2 * m + half, 2 * (n + P * octet) + column));
          const int cc = get<1>(rc(2 * m + half, 2 * (n + P * octet) + column));
          ++total;
          const bool ok = r == r0 + 8 * half && cc == c0 + 32 * octet + column && flash::dropout_slot(r, cc) == j &&
                          (r / 16 == r0 / 16) && (cc / 64 == c0 / 64) &&
                          ((r % 8) * 4 + (cc % 8) / 2 == (r0 % 8) * 4 + (c0 % 8) / 2) && ((cc / 8) % 4 == (c0 / 8) % 4);
          if (!ok && bad++ < 5) std::printf("%s: tid %d m %d n %d j %d: (%d,%d) base (%d,%d)\n", name, tid, m, n, j, r, cc, r0, c0);
        }
      }
  }
  std::printf("%s: %d elements checked, %d bad\n", name, total, bad);
  return bad;
}

// Every budget row's tiles (smem_budget.h); backward tiles narrower than 64 keys have no dropout
// kernel (params.h dropout_tile) and are skipped.
template <int D, int KB>
int check_head_dim() {
  using E = cutlass::bfloat16_t;
  using Cfg = flash::FwdTileConfig<D, KB>;
  using F = flash::FwdTraitsFor<D, KB, E>;
  using B = flash::BwdTraitsFor<D, E, KB>;
  char fwd_name[64], bwd_name[64];
  std::snprintf(fwd_name, sizeof(fwd_name), "fwd d=%d %d KB %dx%d", D, KB, Cfg::kBlockM, Cfg::kBlockN);
  std::snprintf(bwd_name, sizeof(bwd_name), "bwd d=%d %d KB %dx%d W_N=%d", D, KB, B::kBlockM, B::kBlockN, B::kWarpsNSdP);
  int bad = check<typename F::TiledMma, Cfg::kBlockM, Cfg::kBlockN, 1>(fwd_name, F::kNThreads);
  if constexpr (flash::dropout_tile(B::kBlockN)) {
    bad += check<typename B::TiledMmaSdP, B::kBlockM, B::kBlockN, B::kWarpsNSdP>(bwd_name, B::kNThreads);
  } else {
    std::printf("%s: no dropout kernel (narrower than 64 keys)\n", bwd_name);
  }
  return bad;
}

template <int KB>
int check_budget() {
  return check_head_dim<32, KB>() + check_head_dim<64, KB>() + check_head_dim<96, KB>() + check_head_dim<128, KB>() +
         check_head_dim<160, KB>() + check_head_dim<192, KB>() + check_head_dim<224, KB>() + check_head_dim<256, KB>();
}

// The sm90 forward's dropout variant: each consumer warpgroup (128 threads) owns 64 rows.
template <int D>
int check_sm90() {
  using F = flash::sm90::FwdTraitsFor<cutlass::bfloat16_t, D, true>;
  char name[64];
  std::snprintf(name, sizeof(name), "sm90 fwd dropout d=%d 64x%d (per warpgroup)", D, F::kBlockN);
  return check<typename F::MmaQK, F::kWGRows, F::kBlockN, 1, true>(name, 128);
}

int main() {
  return (check_budget<227>() + check_budget<163>() + check_budget<99>() + check_sm90<64>() + check_sm90<128>() +
          check_sm90<256>()) != 0;
}
