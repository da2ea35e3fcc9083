// Bounds-checked tile copies between global and shared/register memory. Rows past the
// sequence and columns past the real head dim never touch global memory; loads write zeros
// in their place so the MMAs see exact zeros (a garbage V row times P = 0 could be NaN).
#pragma once

#include <type_traits>

#include <cute/tensor.hpp>

namespace flash {

using namespace cute;

// Global view of one (batch, head): its rows as a (seqlen, kHeadDim) tensor, const when base
// is. The column extent is the compiled head dim; columns past the real head dim are never
// dereferenced (load_tile / store_tile check them).
template <typename Element, int kHeadDim, typename Void>
CUTE_DEVICE auto gmem_rows(Void* base, int64_t offset, int seqlen, int64_t row_stride) {
  using T = std::conditional_t<std::is_const_v<Void>, const Element, Element>;
  return make_tensor(make_gmem_ptr(static_cast<T*>(base) + offset), make_shape(seqlen, Int<kHeadDim>{}),
                     make_stride(row_stride, _1{}));
}

// Global -> shared with cp.async where (row < max_rows && col < max_cols), zeros elsewhere.
// kCheckRows = false drops the row test (interior K/V blocks are whole): fewer live registers
// in the hot loop. Columns are always tested: head dims between compiled sizes are padded.
//   src: (CPY, CPY_M, CPY_K) global   dst: same, shared   coords: same, tile-local (row, col)
template <bool kCheckRows = true, class TiledCopy, class Src, class Dst, class Coords>
CUTE_DEVICE void load_tile(TiledCopy const& tiled_copy, Src const& src, Dst&& dst,
                           Coords const& coords, int max_rows, int max_cols) {
  // Compare compile-time offsets against limits relative to this thread's first chunk: one
  // subtraction per call instead of a live register per chunk (hoisted coordinates spilled).
  const int row_limit = max_rows - get<0>(coords(0, 0, 0));
  const int col_limit = max_cols - get<1>(coords(0, 0, 0));
  CUTE_UNROLL
  for (int m = 0; m < size<1>(dst); ++m) {
    const bool row_ok = !kCheckRows || get<0>(coords(0, m, 0)) - get<0>(coords(0, 0, 0)) < row_limit;
    CUTE_UNROLL
    for (int k = 0; k < size<2>(dst); ++k) {
      if (row_ok && get<1>(coords(0, m, k)) - get<1>(coords(0, 0, 0)) < col_limit) {
        copy(tiled_copy, src(_, m, k), dst(_, m, k));
      } else {
        clear(dst(_, m, k));
      }
    }
  }
}

// Registers/shared -> global where (row < max_rows && col < max_cols); nothing elsewhere.
template <class TiledCopy, class Src, class Dst, class Coords>
CUTE_DEVICE void store_tile(TiledCopy const& tiled_copy, Src const& src, Dst&& dst,
                            Coords const& coords, int max_rows, int max_cols) {
  CUTE_UNROLL
  for (int m = 0; m < size<1>(dst); ++m) {
    if (get<0>(coords(0, m, 0)) < max_rows) {
      CUTE_UNROLL
      for (int k = 0; k < size<2>(dst); ++k) {
        if (get<1>(coords(0, m, k)) < max_cols) { copy(tiled_copy, src(_, m, k), dst(_, m, k)); }
      }
    }
  }
}

}  // namespace flash
