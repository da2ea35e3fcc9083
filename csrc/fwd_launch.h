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
  auto kernel = needs_dropout(params) ? &fwd_kernel<Traits, true, true>
                : mods                ? &fwd_kernel<Traits, true, false>
                                      : &fwd_kernel<Traits, false, false>;
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

// One instantiation per (element type, compiled head dim): csrc/instantiations/*.cu.
template <typename Element, int kHeadDim>
cudaError_t run_fwd_(const FwdParams& params, cudaStream_t stream) {
  using Cfg = FwdTileConfig<kHeadDim>;
  return launch_fwd<FwdTraits<kHeadDim, Cfg::kBlockM, Cfg::kBlockN, Cfg::kNWarps, Element, Cfg::kSplitMaskedLoop>>(
      params, stream);
}

}  // namespace flash
