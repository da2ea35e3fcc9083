// Launch templates of the KV-cache path: the decode kernel per (element type, head dim), and the
// append/rotary and split-KV combine kernels per element type. The dispatch (decode_dispatch.cu)
// runs them in stream order: append -> decode -> combine.
#pragma once

#include <cuda_runtime.h>

#include "decode_kernel.h"
#include "decode_traits.h"
#include "kvcache_append.h"
#include "params.h"
#include "splitkv_combine.h"

namespace flash {

template <typename Traits, bool kPaged>
cudaError_t launch_decode(const KvCacheParams& params, cudaStream_t stream) {
  auto kernel = &decode_kernel<Traits, kPaged>;
  constexpr int kSmem = Traits::kSmemBytes;
  if constexpr (kSmem >= 48 * 1024) {
    const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    if (err != cudaSuccess) { return err; }
  }
  const int rows = params.seqlen_q * (params.nheads / params.nheads_k);  // packed query rows per K/V head
  const dim3 grid((rows + Traits::kBlockM - 1) / Traits::kBlockM, params.num_splits, params.batch * params.nheads_k);
  cudaLaunchAttribute overlap[1] = {};
  overlap[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(Traits::kNThreads);
  config.dynamicSmemBytes = kSmem;
  config.stream = stream;
  config.attrs = overlap;
  config.numAttrs = params.overlap_decode ? 1 : 0;  // decode_kernel waits in griddep_wait() first
  return cudaLaunchKernelEx(&config, kernel, params);
}

// Instantiated in instantiations/decode_hdim*_*.cu (kWide: decode_hdim*_*_wide.cu).
template <typename Element, int kHeadDim, bool kWide>
cudaError_t run_decode_(const KvCacheParams& params, cudaStream_t stream) {
  using Traits = DecodeTraits<kHeadDim, Element, kWide>;
  return params.block_table != nullptr ? launch_decode<Traits, true>(params, stream)
                                       : launch_decode<Traits, false>(params, stream);
}

// Instantiated in instantiations/kvcache_*.cu (one per element type).
template <typename Element>
cudaError_t run_kvcache_append_(const KvCacheParams& params, cudaStream_t stream) {
  const int64_t threads = kvcache_append_rows(params) * (params.headdim / 8);
  if (threads == 0) { return cudaSuccess; }
  kvcache_append_kernel<Element><<<dim3((threads + kAppendThreads - 1) / kAppendThreads), kAppendThreads, 0, stream>>>(params);
  return cudaGetLastError();
}

// One thread block per output row; overlap_combine: programmatic dependent launch (the thread
// blocks start as the decode grid drains, griddep_wait() in the kernel orders the reads).
template <typename Element>
cudaError_t run_splitkv_combine_(const KvCacheParams& params, cudaStream_t stream) {
  const int64_t rows = int64_t(params.batch) * params.nheads * params.seqlen_q;
  if (rows == 0) { return cudaSuccess; }
  if (rows > int64_t(0x7fffffff)) { return cudaErrorInvalidValue; }
  cudaLaunchAttribute overlap[1] = {};
  overlap[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(unsigned(rows));
  config.blockDim = dim3(kCombineThreads);
  config.stream = stream;
  config.attrs = overlap;
  config.numAttrs = params.overlap_combine ? 1 : 0;
  return cudaLaunchKernelEx(&config, splitkv_combine_kernel<Element>, params);
}

}  // namespace flash
