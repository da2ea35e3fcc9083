// The Hopper (sm_90a) forward family: declarations only, no kernel bodies, so host code and the
// dispatch (compiled for every arch) can include it. The definitions live in sm90/fwd_launch.h and
// are instantiated once each by csrc/instantiations/sm90_fwd_*.cu, compiled for sm_90a alone.
#pragma once

#include <cuda_runtime.h>

#include "../params.h"

namespace flash::sm90 {

// Runs the sm90 forward on `stream` (TMA + wgmma + warp specialisation). The caller has checked
// fwd_supports(params) and that the device is compute capability 9.0. Returns the launch's status.
// kDropout: the dropout variant (its own instantiation, sm90_fwd_hdim<D>_<dtype>_dropout.cu), for
// exactly the calls with dropout_p > 0 (cudaErrorInvalidValue otherwise).
template <typename Element, int kHeadDim, bool kDropout = false>
cudaError_t run_fwd_(const FwdParams& params, cudaStream_t stream);

// Whether the sm90 forward implements this call's options (head dim, masks, score modifiers,
// varlen, strides/alignment that TMA needs). Calls it refuses go to the sm80 family: the dispatch
// never raises because of a family. Defined in sm90/fwd_supports.h (host-only, no CuTe), which
// exactly one host translation unit includes (fwd_dispatch.cu).
bool fwd_supports(const FwdParams& params);

// Whether the persistent kernel serving a call draws its tiles from FwdParams::sm90_tiles.counter
// (fwd_persistent.h kDrawsTiles): causal calls, and d = 64's three-warpgroup tile (its dropout variant
// has two). A caller without a counter gets the sm80 kernels for these (fwd_dispatch.cu); fwd_launch.h
// checks at compile time that every tile that draws is covered. (A build with
// FLASH_ATTN_CUDA_SM90_DYNAMIC_NONCAUSAL=0, for comparisons, still routes counterless d = 64 calls to sm80.)
constexpr bool fwd_draws_tiles(int headdim, bool causal, bool dropout) { return causal || (headdim == 64 && !dropout); }

}  // namespace flash::sm90
