// Dispatch of the backward (EXPERIMENTAL): compiled only with FLASH_ATTN_CUDA_BACKWARD=1.
#include <cutlass/numeric_types.h>

#include "bwd_launch.h"
#include "flash_api.h"
#include "instantiations/build_config.h"

namespace flash {

template <typename Element>
static cudaError_t run_bwd_dtype(const BwdParams& params, cudaStream_t stream) {
  switch (params.headdim_rounded) {
#define FLASH_CASE(D) \
  case D:             \
    return run_bwd_<Element, D>(params, stream);
    FLASH_FOR_EACH_HDIM(FLASH_CASE)
#undef FLASH_CASE
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t run_bwd(const BwdParams& params, cudaStream_t stream) {
  if (!params_supported(params)) { return cudaErrorInvalidValue; }
  switch (params.dtype) {
#define FLASH_CASE(ENUM, TYPE) \
  case DType::ENUM:            \
    return run_bwd_dtype<TYPE>(params, stream);
    FLASH_FOR_EACH_DTYPE(FLASH_CASE)
#undef FLASH_CASE
    default:
      return cudaErrorInvalidValue;
  }
}

int bwd_shared_memory_bytes(int headdim_rounded) {
  switch (headdim_rounded) {
#define FLASH_CASE(D) \
  case D:             \
    return bwd_shared_memory_bytes<D>();
    FLASH_FOR_EACH_HDIM(FLASH_CASE)
#undef FLASH_CASE
    default:
      return -1;
  }
}

}  // namespace flash
