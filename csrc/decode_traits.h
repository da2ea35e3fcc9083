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

// Tile experiments (a whole build, or one decode unit recompiled with the dispatch, must see the same
// values: decode_dispatch.cu sizes the split count from this tile; scripts/variants_gpu.sh):
// FLASH_ATTN_CUDA_DECODE_BLOCK_N keys per K/V tile, FLASH_ATTN_CUDA_DECODE_WARPS warps,
// FLASH_ATTN_CUDA_DECODE_STAGES stages at d <= 128. Measured (H200, GQA 32/8 d = 128 bf16, same run
// as cuDNN, ours / cuDNN; results/history/h200_dtile{1,2}_*), this tile (64 keys, 4 warps, 3 stages, two
// blocks per SM) against 128 keys x 4 warps (32 keys per warp, 253 registers, one block per SM) with
// 2 / 3 stages:
//   batch 8 x 1k / 4k / 32k:  0.96 / 0.97 / 0.98  vs 1.04 / 1.02 / 1.00 (2) and 1.02 / 1.03 / 1.00 (3)
//   batch 1 x 1k / 4k / 32k:  1.07 / 1.17 / 1.00  vs 1.04 / 1.12 / 1.03 and 1.02 / 1.05 / 1.03
//   batch 32 x 1k / 2k / 4k:  1.02 / 0.99 / 0.99  vs 0.93 / 0.96 / 0.99 and 0.94 / 0.97 / 0.98
//   paged 16 / contiguous:    0.86-1.02           vs 0.79-0.96 and 0.80-0.99
// 128 keys x 8 warps (16 keys per warp, one block per SM): 2 stages 0.97-1.01, 3 stages 0.97-1.02 at
// batch 1 / 8 / 32 x 4k / 32k, 1 x 4k 1.02 (this tile 1.20). No tile wins every shape: the wide one
// (128 keys x 4 warps, 2 stages) is now a second kernel at d = 128, picked per call (kWide below,
// heuristics.h decode_pick_wide). H100 SXM, twenty-second session, same run as cuDNN, us this
// tile / 64 keys x 2 warps (3 stages) / 32 keys x 2 warps (6 stages) / wide, contiguous (paged 16 the
// wide one: 1.2-1.8 % slower than this tile at batch >= 8; results/history/h100_dtile3_*):
//   1 x 4k 10.3 / 11.3 / 12.7 / 11.1      1 x 32k 50.9 / 50.6 / 50.8 / 48.3     8 x 4k 50.0 / 50.0 / 49.9 / 48.1
//   8 x 32k 353.0 / 353.1 / 354.3 / 345.1  32 x 4k 176.5 / 176.3 / 176.6 / 175.5
//   32 x 32k 1382.9 / 1383.7 / 1384.1 / 1365.2  64 x 4k 350.2 / 349.5 / 350.5 / 347.1
//   64 x 32k 2756.1 / 2757.1 / 2769.0 / 2712.9
// So 32 keys per warp is not what makes the wide tile fast (64 x 2 warps equals this tile), nor more
// stages (32 x 2 warps x 6 is slower at batch 1): it is one barrier and one softmax round per 32 KB of
// K and V a warp reads, at one block of 4 warps per SM.
#ifndef FLASH_ATTN_CUDA_DECODE_BLOCK_N
#define FLASH_ATTN_CUDA_DECODE_BLOCK_N 64
#endif
#ifndef FLASH_ATTN_CUDA_DECODE_WARPS
#define FLASH_ATTN_CUDA_DECODE_WARPS 4
#endif
#ifndef FLASH_ATTN_CUDA_DECODE_STAGES
#define FLASH_ATTN_CUDA_DECODE_STAGES 3
#endif

// The wide tile, a second kernel where decode_has_wide(d): 128 keys x 4 warps (32 keys per warp), 2
// stages of 64 KB (d = 128), 134 KB of shared memory: one thread block per SM. Faster on long K/V
// ranges per thread block, slower where each block streams few K/V blocks or the grid runs in several
// waves of short ones (heuristics.h decode_pick_wide has the rule and its measurements).
constexpr bool decode_has_wide(int headdim) { return headdim == 128; }

template <int kHeadDim_, typename Element_, bool kWide_ = false>
struct DecodeTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr bool kWide = kWide_;
  static_assert(!kWide || decode_has_wide(kHeadDim), "the wide decode tile exists for decode_has_wide head dims");
  static constexpr int kBlockM = 16;
  static constexpr int kBlockN = kWide ? 128 : FLASH_ATTN_CUDA_DECODE_BLOCK_N;
  static constexpr int kNWarps = kWide ? 4 : FLASH_ATTN_CUDA_DECODE_WARPS;
  static constexpr int kNThreads = kNWarps * 32;
  static constexpr int kWarpKeys = kBlockN / kNWarps;  // keys of each K/V tile one warp owns
  // Shared memory per stage: 2 * 64 * d * 2 B (32 KB at d = 128); 3 stages keep two tiles in
  // flight and two thread blocks fit an H200 SM (2 x 100 KB); d > 128 uses 2 stages (128 KB).
  // The wide tile: 2 stages of 2 * 128 * d * 2 B.
  static constexpr int kStages = kWide ? 2 : kHeadDim <= 128 ? FLASH_ATTN_CUDA_DECODE_STAGES : 2;
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
  static_assert(kSmemBytes <= 227 * 1024, "the decode tile must fit one thread block's shared memory");
};

// What the host needs of a head dim's decode tile (the same for both dtypes).
struct DecodeTileInfo {
  int block_m = -1, block_n = -1, smem_bytes = -1, threads = -1;
};

template <int kHeadDim, bool kWide = false>
constexpr DecodeTileInfo decode_tile_info() {
  using T = DecodeTraits<kHeadDim, cutlass::half_t, kWide>;
  return {T::kBlockM, T::kBlockN, T::kSmemBytes, T::kNThreads};
}

// Defined in decode_launch.h; instantiated once each in instantiations/decode_*.cu (per element type,
// head dim and tile) and instantiations/kvcache_*.cu (per element type). The dispatch sees these
// declarations only.
// kWide: the wide tile (instantiations/decode_hdim<d>_<dtype>_wide.cu, decode_has_wide head dims).
template <typename Element, int kHeadDim, bool kWide = false>
cudaError_t run_decode_(const KvCacheParams& params, cudaStream_t stream);
template <typename Element>
cudaError_t run_kvcache_append_(const KvCacheParams& params, cudaStream_t stream);
template <typename Element>
cudaError_t run_splitkv_combine_(const KvCacheParams& params, cudaStream_t stream);

}  // namespace flash
