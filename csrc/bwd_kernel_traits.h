// Static tiling of the backward kernels.
//
// Three MMA shapes share one thread block: S/dP = (kBlockM x kBlockN) over the Q block and
// this K/V block; dK/dV = (kBlockN x d); dQ = (kBlockM x d). Each gets its own warp layout.
#pragma once

#include "kernel_traits.h"
#include "params.h"

namespace flash {

using namespace cute;

// kQStages_: buffers of Q and of dO. 2: the next Q block's Q/dO load (cp.async) under this block's
// MMAs; 1: they load once this block's dK/dV products have read Q/dO, under its dQ product and
// atomics (2 * kBlockM * d * 2 B less shared memory: the 163 / 99 KB tiles, bwd_tile_config.h).
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kNWarps_, int kAtomMSdP, int kAtomNdKV, int kAtomMdQ,
          typename Element_, int kQStages_ = 2>
struct BwdTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;   // Q rows per inner step
  static constexpr int kBlockN = kBlockN_;   // K/V rows owned by the thread block
  static constexpr int kNWarps = kNWarps_;
  static constexpr int kNThreads = kNWarps * 32;
  static constexpr int kQStages = kQStages_;
  static_assert(kQStages == 1 || kQStages == 2, "Q/dO are single- or double-buffered");
  static_assert(kNWarps % kAtomMSdP == 0 && kNWarps % kAtomNdKV == 0 && kNWarps % kAtomMdQ == 0);
  // Each MMA's (M, N) tile must divide its operand, or CuTe's partitions would not cover it.
  static_assert(kBlockM % (16 * kAtomMSdP) == 0 && kBlockN % (16 * (kNWarps / kAtomMSdP)) == 0, "S/dP tile");
  static_assert(kBlockN % (16 * kAtomNdKV) == 0 && kHeadDim % (16 * (kNWarps / kAtomNdKV)) == 0, "dK/dV tile");
  static_assert(kBlockM % (16 * kAtomMdQ) == 0 && kHeadDim % (16 * (kNWarps / kAtomMdQ)) == 0, "dQ tile");
  // The scratch rows are padded to kBwdRowAlign: Q tiles must not straddle the padding.
  static_assert(kBwdRowAlign % kBlockM == 0, "kBlockM must divide kBwdRowAlign (params.h)");

  // A forward config with the same head dim and thread count: only its atoms are used.
  using Fwd = FwdTraits<kHeadDim, 16 * kNWarps, 16, kNWarps, Element>;
  using MmaAtom = MMA_Atom<typename MmaAtomFor<Element>::type>;

  template <int kWarpsM>
  using TiledMmaFor = TiledMMA<MmaAtom, Layout<Shape<Int<kWarpsM>, Int<kNWarps / kWarpsM>, _1>>,
                               Tile<Int<16 * kWarpsM>, Int<16 * (kNWarps / kWarpsM)>, _16>>;
  using TiledMmaSdP = TiledMmaFor<kAtomMSdP>;  // (kBlockM, kBlockN)
  static constexpr int kWarpsNSdP = kNWarps / kAtomMSdP;  // warps across the S/dP columns (dropout.h)
  using TiledMmadKV = TiledMmaFor<kAtomNdKV>;  // (kBlockN, d)
  using TiledMmadQ = TiledMmaFor<kAtomMdQ>;    // (kBlockM, d)

  // (rows, d) tiles: the forward's swizzled layouts; transposed views for operands that are
  // read with d as the M/N mode.
  using SmemLayoutQ = decltype(tile_to_shape(typename Fwd::SmemLayoutAtom{},
                                              Shape<Int<kBlockM>, Int<kHeadDim>>{}));  // (kBlockM, d): Q, dO
  using SmemLayoutKV = decltype(tile_to_shape(typename Fwd::SmemLayoutAtom{},
                                               Shape<Int<kBlockN>, Int<kHeadDim>>{}));  // (kBlockN, d): K, V
  using SmemLayoutQt = decltype(composition(SmemLayoutQ{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockM>>{},
                                                                        GenRowMajor{})));  // (d, kBlockM)
  using SmemLayoutKt = decltype(composition(SmemLayoutKV{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{},
                                                                         GenRowMajor{})));  // (d, kBlockN)
  // (kBlockM, kBlockN) tiles for P and dS, and their transposes for dV = P^T dO, dK = dS^T Q.
  static constexpr int kPSwizzleCols = kBlockN % 64 == 0 ? 64 : 32;
  using SmemLayoutAtomP = decltype(composition(
      Swizzle<kPSwizzleCols == 64 ? 3 : 2, 3, 3>{},
      Layout<Shape<_8, Int<kPSwizzleCols>>, Stride<Int<kPSwizzleCols>, _1>>{}));
  using SmemLayoutP = decltype(tile_to_shape(SmemLayoutAtomP{}, Shape<Int<kBlockM>, Int<kBlockN>>{}));
  using SmemLayoutPt = decltype(composition(SmemLayoutP{}, make_layout(Shape<Int<kBlockN>, Int<kBlockM>>{},
                                                                        GenRowMajor{})));  // (kBlockN, kBlockM)

  static constexpr int kSmemQElems = int(decltype(size(SmemLayoutQ{}))::value);
  static constexpr int kSmemKVElems = int(decltype(size(SmemLayoutKV{}))::value);
  static constexpr int kSmemPElems = int(decltype(size(SmemLayoutP{}))::value);
  // Q and dO (kQStages each), K, V, P, dS
  static constexpr int kSmemBytes =
      (2 * kQStages * kSmemQElems + 2 * kSmemKVElems + 2 * kSmemPElems) * int(sizeof(Element));

  using SmemCopyAtom = typename Fwd::SmemCopyAtom;                      // ldmatrix
  using SmemCopyAtomTransposed = typename Fwd::SmemCopyAtomTransposed;  // ldmatrix.trans
  using SmemCopyAtomStore = typename Fwd::SmemCopyAtomO;                // registers -> smem
  using GmemTiledCopyQKV = typename Fwd::GmemTiledCopyQKV;              // cp.async, 16 B
  // One pass of the 16-B copies covers kNThreads / (threads per row) rows: Q and K/V tiles must be
  // whole passes (CuTe's partition would index past a smaller tile).
  static constexpr int kGmemRowsPerPass = kNThreads / Fwd::kGmemThreadsPerRow;
  static_assert(kBlockM % kGmemRowsPerPass == 0 && kBlockN % kGmemRowsPerPass == 0, "tile rows per copy pass");
  using GmemTiledCopyO = typename Fwd::GmemTiledCopyO;                  // 16-B stores
};

}  // namespace flash
