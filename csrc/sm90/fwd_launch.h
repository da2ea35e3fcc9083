// Launch of the sm90 forward (definitions of run_fwd_ for the instantiation TUs, which are
// compiled for sm_90a alone): TMA descriptors from FwdParams, grid, shared-memory opt-in, launch.
// FwdParams::sm90_persistent_ctas != 0: the persistent kernel (fwd_persistent.h, compiled with
// FLASH_ATTN_CUDA_SM90_PERSISTENT: the default build); 0: one CTA per tile (fwd_kernel.h, compiled
// unless FLASH_ATTN_CUDA_SM90_NO_ONE_TILE), or, where that kernel is left out (the default build),
// the persistent one with one CTA per SM. != 0 without the persistent kernel returns
// cudaErrorNotSupported (the binding refuses such a knob value first). Persistent launches that draw
// their tiles from FwdParams::sm90_tiles.counter need it (else cudaErrorInvalidValue): causal, d = 64.
// Causal is chosen at run time here; both kernels live in the one translation unit. Dropout is a
// template argument: its variant (kDropout, with the tile table's kBlockNDropout) has units of its own.
#pragma once

#include <cuda_runtime.h>

#include "../params.h"
#include "fwd_api.h"
#include "fwd_kernel.h"
#include "fwd_tile_table.h"
#include "fwd_tma.h"
#ifdef FLASH_ATTN_CUDA_SM90_PERSISTENT
#include "../device_attribute.h"
#include "fwd_persistent.h"
#include "fwd_scheduler.h"
#endif

namespace flash::sm90 {

#ifdef FLASH_ATTN_CUDA_SM90_PERSISTENT
// The persistent kernel: persistent_grid() CTAs (FwdParams::sm90_persistent_ctas) loop over the tiles.
// A kernel that draws its tiles from the counter (fwd_persistent.h kDrawsTiles: causal, and d = 64's
// tile) needs FwdParams::sm90_tiles.counter, which is zeroed on the stream first, the rest of sm90_tiles
// filled in.
// kClusterM > 1: clusters of kClusterM CTAs (fwd_persistent.h), the grid a multiple of kClusterM (an SM
// pair, a TPC, takes a cluster of 2: every SM of an H100 / H200 gets one).
template <class Traits, bool kCausal, bool kDropout, int kClusterM = 1>
cudaError_t launch_fwd_persistent(const typename FwdTma<Traits, kClusterM>::Params& kp, cudaStream_t stream) {
  auto kernel = &fwd_kernel_persistent<Traits, kCausal, kDropout, kClusterM>;
  constexpr int kSmem = PersistentSmem<Traits>::kBytes;
  constexpr bool kDynamic = kDrawsTiles<Traits, kCausal>;
  if (kDynamic && kp.p.sm90_tiles.counter == nullptr) { return cudaErrorInvalidValue; }
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (err != cudaSuccess) { return err; }
  const int sms = current_device_attribute<cudaDevAttrMultiProcessorCount>();
  if (sms <= 0) { return cudaErrorInvalidDevice; }
  const int num_tiles = FwdScheduler<Traits::kBlockM, kCausal, kCausal, kClusterM>(kp.p).num_tiles;
  int grid = persistent_grid(num_tiles, kp.p.sm90_persistent_ctas, sms);
  if constexpr (kClusterM > 1) {  // num_tiles is a multiple of kClusterM, so the grid can be one too
    grid = grid < kClusterM ? kClusterM : grid - grid % kClusterM;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(grid);
    config.blockDim = dim3(Traits::kNThreads);
    config.dynamicSmemBytes = kSmem;
    config.stream = stream;
    cudaLaunchAttribute attribute[1];
    attribute[0].id = cudaLaunchAttributeClusterDimension;
    attribute[0].val.clusterDim.x = kClusterM;
    attribute[0].val.clusterDim.y = 1;
    attribute[0].val.clusterDim.z = 1;
    config.attrs = attribute;
    config.numAttrs = 1;
    return cudaLaunchKernelEx(&config, kernel, kp);
  }
  if constexpr (kDynamic) {
    err = cudaMemsetAsync(kp.p.sm90_tiles.counter, 0, sizeof(int), stream);
    if (err != cudaSuccess) { return err; }
    typename FwdTma<Traits>::Params kq = kp;
    FwdScheduler<Traits::kBlockM, kCausal, true>::fill_tile_order(kq.p.sm90_tiles, kp.p, Traits::kKVRowBytes);
    kernel<<<grid, Traits::kNThreads, kSmem, stream>>>(kq);
  } else {
    kernel<<<grid, Traits::kNThreads, kSmem, stream>>>(kp);
  }
  return cudaGetLastError();
}
#endif

// kClusterM > 1: the persistent kernel in clusters (fwd_persistent.h); the one-tile kernel has none.
template <class Traits, bool kCausal, bool kDropout, int kClusterM = 1>
cudaError_t launch_fwd_kernel(const FwdParams& params, cudaStream_t stream) {
#if defined(FLASH_ATTN_CUDA_SM90_PERSISTENT) && defined(FLASH_ATTN_CUDA_SM90_NO_ONE_TILE)
  return launch_fwd_persistent<Traits, kCausal, kDropout, kClusterM>(  // 0 CTAs: one per SM
      FwdTma<Traits, kClusterM>::make_params(params), stream);
#elif defined(FLASH_ATTN_CUDA_SM90_NO_ONE_TILE)
  static_assert(sizeof(Traits) == 0, "an sm90 forward build needs the persistent or the one-tile kernel");
#else
#ifdef FLASH_ATTN_CUDA_SM90_PERSISTENT
  if (params.sm90_persistent_ctas != 0) {
    return launch_fwd_persistent<Traits, kCausal, kDropout, kClusterM>(FwdTma<Traits, kClusterM>::make_params(params),
                                                                        stream);
  }
#else
  if (params.sm90_persistent_ctas != 0) { return cudaErrorNotSupported; }  // not built: never the wrong kernel
#endif
  const auto kp = FwdTma<Traits>::make_params(params);
  auto kernel = &fwd_kernel<Traits, kCausal, kDropout>;
  constexpr int kSmem = Traits::kSmemBytes;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (err != cudaSuccess) { return err; }
  const dim3 grid((params.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM, params.nheads, params.batch);
  kernel<<<grid, Traits::kNThreads, kSmem, stream>>>(kp);
  return cudaGetLastError();
#endif
}

// Any tile (the C++ harness times several; TraitsCausal: the causal calls', by default the same);
// run_fwd_ uses the tile table's. The variant must match the call: a dropout call on the plain kernel
// (or the reverse) is an error, never a silent no-op.
// kClusterMNonCausal > 1: the non-causal calls that run the persistent kernel run it in clusters.
template <class Traits, bool kDropout = false, class TraitsCausal = Traits, int kClusterMNonCausal = 1>
cudaError_t launch_fwd(const FwdParams& params, cudaStream_t stream) {
  if (needs_dropout(params) != kDropout) { return cudaErrorInvalidValue; }
  if (params.seqlen_q <= 0 || params.batch <= 0 || params.nheads <= 0) { return cudaSuccess; }
  static_assert(kClusterMNonCausal == 1 || !kDropout, "clusters: the kernel without dropout");
  if (is_causal(params)) { return launch_fwd_kernel<TraitsCausal, true, kDropout>(params, stream); }
  return launch_fwd_kernel<Traits, false, kDropout, kClusterMNonCausal>(params, stream);
}

template <typename Element, int kHeadDim, bool kDropout, bool kShortCausal>
cudaError_t run_fwd_(const FwdParams& params, cudaStream_t stream) {
  if constexpr (kShortCausal) {  // its own units: only the causal kernel of FwdTraitsShortCausal in them
    static_assert(!kDropout, "the short causal kernel has no dropout variant");
    using Traits = FwdTraitsShortCausal<Element, kHeadDim>;
    static_assert(kHeadDim != 64 || (Traits::kBlockM == kShortCausalTileRows64 &&
                                     FwdTraitsFor<Element, 64, false, true>::kBlockM == kCausalTileRows64),
                  "fwd_api.h fwd_short_causal's tile rows");
    if (needs_dropout(params) || !is_causal(params)) { return cudaErrorInvalidValue; }
    if (params.seqlen_q <= 0 || params.batch <= 0 || params.nheads <= 0) { return cudaSuccess; }
    return launch_fwd_kernel<Traits, true, false>(params, stream);
  } else {
#ifdef FLASH_ATTN_CUDA_SM90_PERSISTENT
    static_assert(!kDynamicNonCausal<FwdTraitsFor<Element, kHeadDim, kDropout>> ||
                      fwd_draws_tiles(kHeadDim, false, kDropout),
                  "fwd_draws_tiles (the dispatch's counter check) must cover every tile that draws its tiles");
#endif
    return launch_fwd<FwdTraitsFor<Element, kHeadDim, kDropout>, kDropout, FwdTraitsFor<Element, kHeadDim, kDropout, true>,
                      kDropout ? 1 : kFwdClusterM<kHeadDim>>(params, stream);
  }
}

}  // namespace flash::sm90
