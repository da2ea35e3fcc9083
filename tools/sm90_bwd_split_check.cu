// Host-side check of the sm90 backward's role-split tile (csrc/sm90/bwd_traits_split.h): red_dq
// (bwd_mainloop_split.h) adds each dQ column pair at the thread's first element + (8 r, 8 (c / 2) + c % 2)
// of the accumulator's (row, col) view; this compares that rule with CuTe's partition_C of MmaDQ for
// all 128 threads, and prints the tile's shared-memory size. No GPU needed:
//   nvcc -std=c++20 --expt-relaxed-constexpr -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED -arch=sm_90a -Icsrc \
//        -I$(python third_party/find_cutlass.py) tools/sm90_bwd_split_check.cu -o build/sm90_bwd_split_check \
//        && build/sm90_bwd_split_check
#include <cstdio>
#include "sm90/bwd_traits_split.h"
#include "sm90/fwd_layouts.h"
using namespace cute;
using namespace flash::sm90;
int main() {
  using T = BwdTraitsSplit<256, 64, 2, cutlass::bfloat16_t>;
  int bad = 0, checked = 0;
  for (int tid = 0; tid < 128; ++tid) {
    typename T::MmaDQ mma;
    auto thr = mma.get_thread_slice(tid);
    Tensor coords = thr.partition_C(make_identity_tensor(select<0, 1>(typename T::TileDQ{})));
    Tensor rc = make_tensor(coords.data(), acc_rowcol(coords.layout()));
    int r0 = get<0>(coords(0)), c0 = get<1>(coords(0));
    for (int r = 0; r < size<0>(rc); ++r)
      for (int c = 0; c < size<1>(rc); ++c) {
        auto x = rc(r, c);
        int er = r0 + 8 * r, ec = c0 + 8 * (c / 2) + c % 2;
        if (get<0>(x) != er || get<1>(x) != ec) { if (bad++ < 5) printf("tid %d r %d c %d: (%d,%d) vs (%d,%d)\n", tid, r, c, int(get<0>(x)), int(get<1>(x)), er, ec); }
        ++checked;
      }
  }
  printf("red_dq offsets: %d of %d bad; smem %d B\n", bad, checked, T::kSmemBytes);
  return bad != 0;
}
