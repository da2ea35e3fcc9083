// Launch template of the forward kernel: grid, dynamic shared memory, error reporting.
#pragma once

#include <cuda_runtime.h>

#include "fwd_kernel.h"
#include "fwd_tile_config.h"
#include "kernel_traits.h"
#include "params.h"

namespace flash {

template <typename Traits>
cudaError_t launch_fwd(const FwdParams& params, cudaStream_t stream) {
  // The plain instantiation unless softcap, ALiBi, a left window edge, varlen or dropout needs another
  // (fwd_kernel.h); builds with FLASH_ATTN_CUDA_FEATURES=0 have only the plain one.
  const bool mods = needs_mods(params);
#ifdef FLASH_ATTN_CUDA_NO_FEATURES
  if (mods) { return cudaErrorNotSupported; }
  auto kernel = &fwd_kernel<Traits, false>;
#else
  // Dropout: the feature instantiation with kDropout (fwd_kernel.h).
  auto kernel = mods ? &fwd_kernel<Traits, true, false> : &fwd_kernel<Traits, false, false>;
  if (needs_dropout(params)) {
    if constexpr (dropout_tile(Traits::kBlockN)) {
      kernel = &fwd_kernel<Traits, true, true>;
    } else {
      return cudaErrorNotSupported;  // the binding refuses these calls first (check_bwd_smem)
    }
  }
#endif
  constexpr int kSmem = Traits::kSmemBytes;
  if constexpr (kSmem >= 48 * 1024) {
    // Above 48 KB a block must opt in to the larger dynamic shared-memory carve-out.
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    if (err != cudaSuccess) { return err; }
  }
  const dim3 grid((params.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM, params.nheads, params.batch);
  kernel<<<grid, Traits::kNThreads, kSmem, stream>>>(params);
  return cudaGetLastError();
}

// Declared in fwd_tile_config.h; instantiated once per (element type, compiled head dim, budget
// row with a tile of its own) in csrc/instantiations/*.cu.
template <typename Element, int kHeadDim, int kBudgetKB>
cudaError_t run_fwd_(const FwdParams& params, cudaStream_t stream) {
  return launch_fwd<FwdTraitsFor<kHeadDim, kBudgetKB, Element>>(params, stream);
}

}  // namespace flash
