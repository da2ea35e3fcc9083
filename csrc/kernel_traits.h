// Static tiling of the forward kernel: tile sizes, shared-memory layouts, copy and MMA atoms.
// Everything here is a type; the kernel is generic over a FwdTraits instance.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>

namespace flash {

using namespace cute;

// Tensor-core MMA for the element type: 16x8x16, fp32 accumulate.
template <typename Element> struct MmaAtomFor;
template <> struct MmaAtomFor<cutlass::half_t> { using type = SM80_16x8x16_F32F16F16F32_TN; };
template <> struct MmaAtomFor<cutlass::bfloat16_t> { using type = SM80_16x8x16_F32BF16BF16F32_TN; };

template <int kHeadDim_, int kBlockM_, int kBlockN_, int kNWarps_, typename Element_, bool kSplitMaskedLoop_ = true>
struct FwdTraits {
  using Element = Element_;
  using ElementAccum = float;

  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kNWarps = kNWarps_;
  static constexpr int kNThreads = kNWarps * 32;
  // true: masked K/V blocks run in their own loop, the interior loop has no mask code.
  // false: one loop, mask and row checks decided per block at run time. Which one spills
  // less is up to ptxas; fwd_tile_config.h records the measured choice per head dim.
  static constexpr bool kSplitMaskedLoop = kSplitMaskedLoop_;

  static_assert(kHeadDim % 32 == 0, "compiled head dims are multiples of 32");
  static_assert(kBlockM % (16 * kNWarps) == 0, "each warp owns whole 16-row MMA slabs of the Q tile");
  static_assert(kBlockN % 16 == 0, "K/V tile is a whole number of 16-wide MMA k-steps");

  // ---- MMA: warps tile the M (query) dimension only: split-Q, each warp owns its rows, so the
  // softmax needs no cross-warp traffic. N tile 16 so one ldmatrix.x4 feeds two n8 atoms.
  using TiledMma = TiledMMA<MMA_Atom<typename MmaAtomFor<Element>::type>,
                            Layout<Shape<Int<kNWarps>, _1, _1>>,   // warps along M
                            Tile<Int<16 * kNWarps>, _16, _16>>;

  // ---- Shared memory. Rows of 64 halves (128 B) swizzled <3,3,3> so that ldmatrix over 8 rows
  // hits 8 distinct 16-B bank groups; head dims that are not multiples of 64 use 32-wide rows
  // (64 B) with a <2,3,3> swizzle.
  static constexpr int kBlockKSmem = kHeadDim % 64 == 0 ? 64 : 32;
  static constexpr int kSwizzle = kBlockKSmem == 32 ? 2 : 3;
  using SmemLayoutAtom = decltype(composition(
      Swizzle<kSwizzle, 3, 3>{},
      Layout<Shape<_8, Int<kBlockKSmem>>, Stride<Int<kBlockKSmem>, _1>>{}));

  using SmemLayoutQ = decltype(tile_to_shape(SmemLayoutAtom{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));   // (kBlockM, d)
  using SmemLayoutKV = decltype(tile_to_shape(SmemLayoutAtom{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));  // (kBlockN, d)
  // V seen as V^T for the P·V product: (d, kBlockN), same bytes.
  using SmemLayoutVt = decltype(composition(
      SmemLayoutKV{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{}, GenRowMajor{})));
  using SmemLayoutO = SmemLayoutQ;  // the epilogue stages O through Q's buffer

  static constexpr int kSmemQElems = int(decltype(size(SmemLayoutQ{}))::value);
  static constexpr int kSmemKVElems = int(decltype(size(SmemLayoutKV{}))::value);
  static constexpr int kSmemBytes = (kSmemQElems + 2 * kSmemKVElems) * int(sizeof(Element));

  // ---- shared -> registers: ldmatrix. K is read row-major (N), V transposed (T).
  using SmemCopyAtom = Copy_Atom<SM75_U32x4_LDSM_N, Element>;
  using SmemCopyAtomTransposed = Copy_Atom<SM75_U16x8_LDSM_T, Element>;
  // registers -> shared for the O tile: 32-bit stores (two halves per MMA C pair).
  using SmemCopyAtomO = Copy_Atom<AutoVectorizingCopyWithAssumedAlignment<32>, Element>;

  // ---- global <-> shared: 16-B vectors, threads laid out over (rows, 16-B column chunks).
  static constexpr int kGmemElemsPerLoad = int(sizeof(uint128_t) / sizeof(Element));  // 8
  static constexpr int kGmemThreadsPerRow = kBlockKSmem / kGmemElemsPerLoad;
  static_assert(kNThreads % kGmemThreadsPerRow == 0);
  using GmemThreadLayout = Layout<Shape<Int<kNThreads / kGmemThreadsPerRow>, Int<kGmemThreadsPerRow>>,
                                  Stride<Int<kGmemThreadsPerRow>, _1>>;
  // cp.async.cg (bypass L1); out-of-range chunks are zeroed by plain stores (copy_utils.h).
  using GmemCopyAtomAsync = Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<uint128_t>, Element>;
  using GmemTiledCopyQKV = decltype(make_tiled_copy(GmemCopyAtomAsync{}, GmemThreadLayout{},
                                                    Layout<Shape<_1, Int<kGmemElemsPerLoad>>>{}));
  using GmemTiledCopyO = decltype(make_tiled_copy(Copy_Atom<UniversalCopy<uint128_t>, Element>{},
                                                  GmemThreadLayout{},
                                                  Layout<Shape<_1, Int<kGmemElemsPerLoad>>>{}));
};

}  // namespace flash
