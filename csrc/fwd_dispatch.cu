// Dispatch from runtime (dtype, head dim) to the instantiations this build compiled. The set
// is fixed at build time: tools/gen_instantiations.py writes instantiations/build_config.h
// (FLASH_FOR_EACH_HDIM, FLASH_FOR_EACH_DTYPE) from FLASH_ATTN_CUDA_HDIMS / _DTYPES.
#include <cutlass/numeric_types.h>

#include <cmath>

#include "flash_api.h"
#include "fwd_tile_config.h"
#include "instantiations/build_config.h"
#include "kernel_traits.h"

namespace flash {

template <typename Element, int kHeadDim>
cudaError_t run_fwd_(const FwdParams& params, cudaStream_t stream);  // instantiations/*.cu

template <typename Element>
static cudaError_t run_fwd_dtype(const FwdParams& params, cudaStream_t stream) {
  switch (params.headdim_rounded) {
#define FLASH_CASE(D) \
  case D:             \
    return run_fwd_<Element, D>(params, stream);
    FLASH_FOR_EACH_HDIM(FLASH_CASE)
#undef FLASH_CASE
    default:
      return cudaErrorInvalidValue;
  }
}

bool params_supported(const FwdParams& params) {
  return params.headdim > 0 && params.headdim <= params.headdim_rounded && params.headdim % 8 == 0 &&
         params.nheads_k > 0 && params.nheads % params.nheads_k == 0 && params.seqlen_q > 0 &&
         params.seqlen_k > 0 && params.seqlen_q <= kMaxSeqlen && params.seqlen_k <= kMaxSeqlen && params.batch > 0 &&
         // the online softmax takes the row max of raw scores: only right for a positive scale
         params.softmax_scale > 0.f && std::isnormal(params.scale_log2) &&
         params.softcap >= 0.f && params.softcap <= 3.0e38f &&
         // varlen: both prefix sums or neither, packed tensors (no batch strides)
         (params.cu_seqlens_q == nullptr) == (params.cu_seqlens_k == nullptr) &&
         (params.cu_seqlens_q == nullptr ||
          (params.q_batch_stride == 0 && params.k_batch_stride == 0 && params.v_batch_stride == 0 &&
           params.o_batch_stride == 0 && params.total_q >= 0 && params.total_k >= 0));
}

cudaError_t run_fwd(const FwdParams& params, cudaStream_t stream) {
  if (!params_supported(params)) { return cudaErrorInvalidValue; }
  switch (params.dtype) {
#define FLASH_CASE(ENUM, TYPE) \
  case DType::ENUM:            \
    return run_fwd_dtype<TYPE>(params, stream);
    FLASH_FOR_EACH_DTYPE(FLASH_CASE)
#undef FLASH_CASE
    default:
      return cudaErrorInvalidValue;
  }
}

std::vector<int> compiled_head_dims() {
  std::vector<int> dims;
#define FLASH_PUSH(D) dims.push_back(D);
  FLASH_FOR_EACH_HDIM(FLASH_PUSH)
#undef FLASH_PUSH
  return dims;
}

std::vector<DType> compiled_dtypes() {
  std::vector<DType> dtypes;
#define FLASH_PUSH(ENUM, TYPE) dtypes.push_back(DType::ENUM);
  FLASH_FOR_EACH_DTYPE(FLASH_PUSH)
#undef FLASH_PUSH
  return dtypes;
}

int fwd_shared_memory_bytes(int headdim_rounded) {
  switch (headdim_rounded) {
#define FLASH_CASE(D)                                                                           \
  case D:                                                                                       \
    return FwdTraits<D, FwdTileConfig<D>::kBlockM, FwdTileConfig<D>::kBlockN, FwdTileConfig<D>::kNWarps, \
                     cutlass::half_t>::kSmemBytes;
    FLASH_FOR_EACH_HDIM(FLASH_CASE)
#undef FLASH_CASE
    default:
      return -1;
  }
}

int round_head_dim(int headdim) {
  for (int d : compiled_head_dims()) {
    if (d >= headdim) { return d; }
  }
  return -1;
}

}  // namespace flash
