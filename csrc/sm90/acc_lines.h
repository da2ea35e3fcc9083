// A wgmma accumulator (64 rows x N fp32 of one warpgroup) regrouped by lane shuffles into float4s
// that cover whole 128-byte rows per quarter warp ("lines"), for stores whose cost is counted in
// rows touched: the L2 reduce requests of the d = 256 backward's dQ (bwd_mainloop_split.h red_dq).
// (The d = 64 / 128 tile's dQ stage written to shared memory this way, free of bank conflicts, was
// 2-5 % slower than its conflicting 8-byte stores: benchmarks/NOTES.md, "Twelfth session".)
//
// Accumulator layout (fwd_layouts.h acc_rowcol): lane l of warp w holds rows 16 w + l / 4 + {0, 8}
// and, in every 8-column block j, columns 8 j + 2 (l % 4) + {0, 1}. Two exchanges:
//   quads: of blocks (2 p, 2 p + 1), lanes l, l ^ 1 swap one column pair, so that an even lane holds
//     block 2 p's columns 2 (l % 4) + {0..3} and an odd lane block 2 p + 1's columns 2 (l % 4 - 1) +
//     {0..3}: lane l's quad p starts at column 16 p + 8 (l & 1) + 4 ((l >> 1) & 1);
//   lines: of quads (2 s, 2 s + 1) (columns 32 s .. 32 s + 31), lanes l, l ^ 4 (rows r, r + 1) swap
//     one quad: a lane of an even row keeps its quad 2 s and takes quad 2 s of the row below, a lane
//     of an odd row keeps quad 2 s + 1 and takes quad 2 s + 1 of the row above.
// Then lane l's float4 A of (r, s) is at row (row0 - odd_row) + 8 r, B at the row after it, both at
// column 32 s + 16 odd_row + quad_col (row0 = 16 w + l / 4, odd_row = (l >> 2) & 1): the 8 lanes
// of a quarter warp write one row's 128 bytes, the warp 4 rows.
// Cost per thread and 32 accumulator values: 32 SHFL.BFLY (16 for the quads, 16 for the lines) and the
// selects around them.
#pragma once

#include <cute/tensor.hpp>

#include "fwd_layouts.h"

namespace flash::sm90 {

CUTE_DEVICE float4 shfl_xor4(float4 v, int mask) {
  return make_float4(__shfl_xor_sync(0xffffffffu, v.x, mask), __shfl_xor_sync(0xffffffffu, v.y, mask),
                     __shfl_xor_sync(0xffffffffu, v.z, mask), __shfl_xor_sync(0xffffffffu, v.w, mask));
}

CUTE_DEVICE float2 shfl_xor2(float2 v, int mask) {
  return make_float2(__shfl_xor_sync(0xffffffffu, v.x, mask), __shfl_xor_sync(0xffffffffu, v.y, mask));
}

// Lane l's first column in the quads form (above).
CUTE_DEVICE int quad_col(int lane) { return 8 * (lane & 1) + 4 * ((lane >> 1) & 1); }

// Lane l's lines start at accumulator row row0 - line_row_back(l) (row0: its first accumulator row,
// 16 w + l / 4) and column line_col0(l).
CUTE_DEVICE int line_row_back(int lane) { return (lane >> 2) & 1; }
CUTE_DEVICE int line_col0(int lane) { return 16 * line_row_back(lane) + quad_col(lane); }

// Quad p of accumulator row half r (rc: the acc_rowcol view (rows (2, 1), cols (2, N/8, 1))).
template <class TensorRC>
CUTE_DEVICE float4 acc_quad(TensorRC const& rc, int r, int p, int lane) {
  const bool odd = lane & 1;
  const float2 a = make_float2(rc(r, 4 * p), rc(r, 4 * p + 1));      // block 2 p
  const float2 b = make_float2(rc(r, 4 * p + 2), rc(r, 4 * p + 3));  // block 2 p + 1
  const float2 got = shfl_xor2(odd ? a : b, 1);
  return odd ? make_float4(got.x, got.y, b.x, b.y) : make_float4(a.x, a.y, got.x, got.y);
}

// Calls put(dr, dc, v) for each float4 v of the lines form of acc: at row (row0 - odd_row) + dr and
// column 16 odd_row + quad_col + dc of the accumulator tile (dr in {0, 1, 8, 9}, dc = 32 s: compile-time
// after unrolling, so a caller's base address plus dr * row_stride + dc folds into immediates).
template <class TensorAcc, class Put>
CUTE_DEVICE void for_each_line_quad(TensorAcc const& acc, int lane, Put&& put) {
  auto rc = make_tensor(acc.data(), acc_rowcol(acc.layout()));  // (rows (2, 1), cols (2, N/8, 1))
  constexpr int kCols = decltype(cute::size<1>(rc))::value;     // 2 per 8-column block
  static_assert(decltype(cute::size<0>(rc))::value == 2, "one 64-row wgmma accumulator: rows {r, r + 8}");
  static_assert(kCols % 8 == 0, "lines pair 8-column blocks, then 16-column pieces: N a multiple of 32");
  const bool odd_row = line_row_back(lane);
  CUTE_UNROLL
  for (int r = 0; r < 2; ++r) {
    CUTE_UNROLL
    for (int s = 0; s < kCols / 8; ++s) {
      const float4 q0 = acc_quad(rc, r, 2 * s, lane), q1 = acc_quad(rc, r, 2 * s + 1, lane);
      const float4 got = shfl_xor4(odd_row ? q0 : q1, 4);
      put(8 * r, 32 * s, odd_row ? got : q0);
      put(8 * r + 1, 32 * s, odd_row ? q1 : got);
    }
  }
}

}  // namespace flash::sm90
