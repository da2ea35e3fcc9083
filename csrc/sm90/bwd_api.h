// The Hopper (sm_90a) backward family: declarations only (no kernel bodies), so the dispatch
// (compiled for every arch) can include it. Definitions: sm90/bwd_launch.h, instantiated once each
// by csrc/instantiations/sm90_bwd_*.cu (sm_90a alone); bwd_supports in sm90/bwd_supports.h.
#pragma once

#include <cuda_runtime.h>

#include "../params.h"

namespace flash::sm90 {

// The main kernel of the backward (dK, dV, dQ added into dq_accum) on `stream`. The caller ran the
// pre-pass (delta, lse_log2) and zeroed dq_accum, and converts dQ after (the sm80 family's
// launch_bwd does all three around it); it checked bwd_supports(params) and compute capability 9.0.
template <typename Element, int kHeadDim>
cudaError_t run_bwd_main_(const BwdParams& params, cudaStream_t stream);

// Whether the sm90 backward implements this call (head dim, causal or none, no score
// modifiers/dropout/varlen/deterministic, TMA strides); else the sm80 kernels run it.
bool bwd_supports(const BwdParams& params);

}  // namespace flash::sm90
