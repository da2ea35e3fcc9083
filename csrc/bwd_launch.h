// Launch template of the backward (EXPERIMENTAL, see bwd_kernel.h): pre-pass, main kernel,
// dQ conversion, in stream order.
#pragma once

#include <cuda_runtime.h>

#include "bwd_kernel.h"
#include "bwd_kernel_traits.h"
#include "params.h"

namespace flash {

// Per-head-dim tiles (kBlockM, kBlockN, warps, warp rows of the S/dP, dK/dV, dQ MMAs).
// FA2's sm80 shapes adapted so every MMA tile divides its operand; NOT yet measured.
template <int kHeadDim, typename Element>
using BwdTraitsFor = std::conditional_t<
    (kHeadDim <= 64), BwdTraits<kHeadDim, 128, 128, 8, 2, 4, 4, Element>,
    std::conditional_t<(kHeadDim <= 128), BwdTraits<kHeadDim, 64, 128, 8, 2, 4, 4, Element>,
                       BwdTraits<kHeadDim, 64, 64, 8, 4, 4, 4, Element>>>;

template <typename Traits>
cudaError_t launch_bwd(const BwdParams& params, cudaStream_t stream) {
  using Element = typename Traits::Element;
  const dim3 row_grid((params.seqlen_q + 7) / 8, params.nheads, params.batch);  // 8 rows (warps) per block
  bwd_prepass_kernel<Element><<<row_grid, 256, 0, stream>>>(params);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) { return err; }

  auto kernel = &bwd_kernel<Traits>;
  constexpr int kSmem = Traits::kSmemBytes;
  if constexpr (kSmem >= 48 * 1024) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    if (err != cudaSuccess) { return err; }
  }
  const dim3 grid((params.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN, params.nheads, params.batch);
  kernel<<<grid, Traits::kNThreads, kSmem, stream>>>(params);
  err = cudaGetLastError();
  if (err != cudaSuccess) { return err; }

  bwd_convert_dq_kernel<Element><<<row_grid, 256, 0, stream>>>(params);
  return cudaGetLastError();
}

template <typename Element, int kHeadDim>
cudaError_t run_bwd_(const BwdParams& params, cudaStream_t stream) {
  return launch_bwd<BwdTraitsFor<kHeadDim, Element>>(params, stream);
}

template <int kHeadDim>
constexpr int bwd_shared_memory_bytes() {
  return BwdTraitsFor<kHeadDim, cutlass::half_t>::kSmemBytes;
}

}  // namespace flash
