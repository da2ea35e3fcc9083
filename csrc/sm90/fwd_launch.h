// stub, replaced by the kernel (sm90k's csrc/sm90/fwd_launch.h): lets the plumbing branch build and
// run. run_fwd_ launches nothing and says so; fwd_supports.h's stub refuses every call, so the
// dispatch never gets here.
#pragma once

#include <cutlass/numeric_types.h>

#include "fwd_api.h"

namespace flash::sm90 {

template <typename Element, int kHeadDim>
cudaError_t run_fwd_(const FwdParams& /*params*/, cudaStream_t /*stream*/) {
  return cudaErrorNotSupported;
}

}  // namespace flash::sm90
