// Static tiling of the KV-cache (decode) kernel, decode_kernel.h. Kernel-free: the dispatch and the
// split heuristic read it without compiling the kernel.
//
// Decode is memory-bound: one query token (or a few) per sequence, times the GQA group, against
// thousands of cached keys. So the tile is short in M and deep in the pipeline:
//   - kBlockM = 16 packed query rows (tokens x heads of one K/V head's group): one m16 MMA slab.
//   - Each of the kNWarps warps takes its own kBlockN / kNWarps keys of every K/V tile (split-K
//     inside the thread block, each warp with its own online softmax); the warps' partial rows are
//     merged once at the end through shared memory. The MMA waste is 16 / (rows used), not 128.
//   - K and V tiles stream through kStages shared-memory stages (cp.async), kStages - 1 tiles in
//     flight per thread block, two thread blocks per SM at d <= 128.
#pragma once

#include <cuda_runtime.h>

#include "kernel_traits.h"
#include "params.h"

namespace flash {

using namespace cute;

template <int kHeadDim_, typename Element_>
struct DecodeTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = 16;
  static constexpr int kBlockN = 64;
  static constexpr int kNWarps = 4;
  static constexpr int kNThreads = kNWarps * 32;
  static constexpr int kWarpKeys = kBlockN / kNWarps;  // keys of each K/V tile one warp owns
  // Shared memory per stage: 2 * 64 * d * 2 B (32 KB at d = 128); 3 stages keep two tiles in
  // flight and two thread blocks fit an H200 SM (2 x 100 KB); d > 128 uses 2 stages (128 KB).
  static constexpr int kStages = kHeadDim <= 128 ? 3 : 2;
  static_assert(kWarpKeys % 16 == 0, "each warp's keys are whole k16 MMA steps of P V");

  // Atoms, swizzled smem row layout and the 16-B global copy layout of the forward kernel.
  using Fwd = FwdTraits<kHeadDim, 16 * kNWarps, kBlockN, kNWarps, Element>;
  // One warp per MMA: (16 rows) x (16 keys) for S, (16 rows) x (d) for O.
  using TiledMma = TiledMMA<MMA_Atom<typename MmaAtomFor<Element>::type>, Layout<Shape<_1, _1, _1>>,
                            Tile<_16, _16, _16>>;

  using SmemLayoutQ = decltype(tile_to_shape(typename Fwd::SmemLayoutAtom{},
                                              Shape<Int<kBlockM>, Int<kHeadDim>>{}));  // (kBlockM, d)
  using SmemLayoutKV = typename Fwd::SmemLayoutKV;                                      // (kBlockN, d)
  using SmemLayoutVt = typename Fwd::SmemLayoutVt;                                      // (d, kBlockN)

  static constexpr int kSmemQElems = kBlockM * kHeadDim;
  static constexpr int kSmemKVElems = kBlockN * kHeadDim;
  static constexpr int kStageBytes = 2 * kSmemKVElems * int(sizeof(Element));
  // The end-of-kernel merge of the warps' partial O rows reuses the stages: (warps, kBlockM, d) fp32.
  static constexpr int kMergeBytes = kNWarps * kBlockM * kHeadDim * int(sizeof(float));
  static_assert(kMergeBytes <= kStages * kStageBytes);
  // Per-warp row max / row sum, then the merged LSE: (2 * warps + 1, kBlockM) fp32.
  static constexpr int kStatsBytes = (2 * kNWarps + 1) * kBlockM * int(sizeof(float));
  // Paged cache: the page of each key row of kPageSlots K/V blocks, (kPageSlots, kBlockN) int32,
  // copied from block_table kStages - 1 blocks ahead of that block's K/V copy (decode_kernel.h).
  // The prologue holds the pages of 2 * (kStages - 1) blocks at once, the main loop reuses a slot
  // kStages - 1 barriers after its last read. 1 KB at kStages = 3: two thread blocks still fit an SM.
  static constexpr int kPageSlots = 2 * (kStages - 1);
  static constexpr int kPageRingBytes = kPageSlots * kBlockN * int(sizeof(int));
  static constexpr int kSmemBytes =
      kSmemQElems * int(sizeof(Element)) + kStages * kStageBytes + kStatsBytes + kPageRingBytes;
};

// What the host needs of a head dim's decode tile (the same for both dtypes).
struct DecodeTileInfo {
  int block_m = -1, block_n = -1, smem_bytes = -1, threads = -1;
};

template <int kHeadDim>
constexpr DecodeTileInfo decode_tile_info() {
  using T = DecodeTraits<kHeadDim, cutlass::half_t>;
  return {T::kBlockM, T::kBlockN, T::kSmemBytes, T::kNThreads};
}

// Defined in decode_launch.h; instantiated once each in instantiations/decode_*.cu (per element type
// and head dim) and instantiations/kvcache_*.cu (per element type). The dispatch sees these
// declarations only.
template <typename Element, int kHeadDim>
cudaError_t run_decode_(const KvCacheParams& params, cudaStream_t stream);
template <typename Element>
cudaError_t run_kvcache_append_(const KvCacheParams& params, cudaStream_t stream);
template <typename Element>
cudaError_t run_splitkv_combine_(const KvCacheParams& params, cudaStream_t stream);

}  // namespace flash
