// Per-head-dim tiles of the backward, and what the dispatch needs of them without launching.
// Kernel-free (traits only): bwd_dispatch.cu includes this, never bwd_kernel.h, so each backward
// kernel is compiled once, in its instantiations/bwd_*.cu file.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "bwd_kernel_traits.h"

namespace flash {

// Per-head-dim tiles (kBlockM, kBlockN, warps, warp rows of the S/dP, dK/dV, dQ MMAs).
// FA2's sm80 shapes adapted so every MMA tile divides its operand. Measured alternatives and
// their H200 numbers: benchmarks/NOTES.md ("Backward tiles").
// FLASH_BWD_TUNE_* (benchmarks/cpp/tune_bwd.sh) replaces the table with one config.
#ifdef FLASH_BWD_TUNE_BM
template <int kHeadDim, typename Element>
using BwdTraitsFor = BwdTraits<kHeadDim, FLASH_BWD_TUNE_BM, FLASH_BWD_TUNE_BN, FLASH_BWD_TUNE_WARPS,
                               FLASH_BWD_TUNE_SDP, FLASH_BWD_TUNE_DKV, FLASH_BWD_TUNE_DQ, Element>;
#else
// Every MMA's N tile (16 * warps along N) must divide its operand: the dK/dV and dQ products
// span d, so d = 32, 160, 224 keep 4 warps along M there (N tile 32) and d = 64, 192, 256 use
// 2 (N tile 64, which measured faster at 64 and 256). Shared memory (Q/dO double-buffered):
// d=32 64 KB, d=64 160 KB, d=96 128 KB, d=128 160 KB, d=160 136 KB, d=192 160 KB, d=224 184 KB,
// d=256 208 KB: sm90 (227 KB) runs all; sm80 (163 KB) refuses the backward for d = 224/256 and
// sm86/89 (99 KB) for d >= 64, with a clear error from the binding (a one-stage variant for
// those GPUs is future work).
template <int kHeadDim, typename Element>
using BwdTraitsFor = std::conditional_t<
    (kHeadDim <= 32), BwdTraits<kHeadDim, 64, 128, 8, 2, 4, 4, Element>,
    std::conditional_t<
        (kHeadDim <= 64), BwdTraits<kHeadDim, 128, 128, 8, 2, 4, 2, Element>,
        std::conditional_t<
            (kHeadDim <= 128), BwdTraits<kHeadDim, 64, 128, 8, 2, 4, 4, Element>,
            std::conditional_t<(kHeadDim % 64 == 0), BwdTraits<kHeadDim, 64, 64, 8, 4, 2, 2, Element>,
                               BwdTraits<kHeadDim, 64, 64, 8, 4, 4, 4, Element>>>>>;
#endif

// What callers need of a head dim's tiles without launching (the same for both dtypes).
struct BwdTileInfo {
  int block_n = -1;     // K/V rows per thread block: deterministic dq_accum splits
  int smem_bytes = -1;  // dynamic shared memory per thread block
};

template <int kHeadDim>
constexpr BwdTileInfo bwd_tile_info() {
  using Traits = BwdTraitsFor<kHeadDim, cutlass::half_t>;
  return {Traits::kBlockN, Traits::kSmemBytes};
}

// Defined in bwd_launch.h, instantiated once per (element type, compiled head dim) in
// instantiations/bwd_*.cu; the dispatch sees only this declaration.
template <typename Element, int kHeadDim>
cudaError_t run_bwd_(const BwdParams& params, cudaStream_t stream);

}  // namespace flash
