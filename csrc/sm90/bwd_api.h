// The Hopper (sm_90a) backward family: declarations only (no kernel bodies), so the dispatch
// (compiled for every arch) can include it. Definitions: sm90/bwd_launch.h, instantiated once each
// by csrc/instantiations/sm90_bwd_*.cu (sm_90a alone); bwd_supports in sm90/bwd_supports.h.
#pragma once

#include <cuda_runtime.h>

#include "../params.h"

namespace flash::sm90 {

// The backward on `stream`: pre-pass (delta, lse_log2, dq_accum zeroed), main kernel (dK, dV, dQ
// added into dq_accum), dQ conversion. The caller allocated the scratch (params.h: dq_accum need
// not be zeroed) and checked bwd_supports(params) and compute capability 9.0.
// kDropout: the dropout variant (its own instantiation, sm90_bwd_hdim<D>_<dtype>_dropout.cu), for
// exactly the calls with dropout_p > 0 (cudaErrorInvalidValue otherwise).
template <typename Element, int kHeadDim, bool kDropout = false>
cudaError_t run_bwd_(const BwdParams& params, cudaStream_t stream);

// Whether the sm90 backward implements this call (head dim, causal or none, dropout, no score
// modifiers/varlen/deterministic, TMA strides); else the sm80 kernels run it. The dispatch also
// checks the build compiled the variant the call needs.
bool bwd_supports(const BwdParams& params);

}  // namespace flash::sm90
