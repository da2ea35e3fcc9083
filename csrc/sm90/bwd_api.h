// The Hopper (sm_90a) backward family: declarations only (no kernel bodies), so the dispatch
// (compiled for every arch) can include it. Definitions: sm90/bwd_launch.h, instantiated once each
// by csrc/instantiations/sm90_bwd_*.cu (sm_90a alone); bwd_supports in sm90/bwd_supports.h.
#pragma once

#include <cuda_runtime.h>

#include "../params.h"

// Experiment (fifteenth session, not yet run on a GPU), FLASH_ATTN_CUDA_SM90_BWD_STORE_FIRST=1 (build-wide:
// the dispatch sizes the semaphores by it): the tiles with the dQ writer (d = 64 / 128) no longer need
// dq_accum zeroed. The first K/V block to reach a dQ tile (a ticket on the tile's semaphore,
// dq_turns.h; deterministic calls: turn 0) stores its part with a TMA store instead of a reduce-add and
// then marks the tile; the other blocks wait for the mark before their reduce-adds. The pre-pass then
// skips 128 MB of zero writes at 16k tokens x 2048 hidden (about half its 69 us on the H200), and the
// dQ conversion writes zeros for the tiles no K/V block adds into (causal rows that see no key,
// dq_adders.h). Needs dq_semaphore_ptr (bwd_dq_semaphores sizes it for every call of those tiles when
// this is on); without it the kernels zero and add as before.
#ifndef FLASH_ATTN_CUDA_SM90_BWD_STORE_FIRST
#define FLASH_ATTN_CUDA_SM90_BWD_STORE_FIRST 0
#endif

namespace flash::sm90 {

constexpr bool kBwdStoreFirst = FLASH_ATTN_CUDA_SM90_BWD_STORE_FIRST != 0;

// The backward on `stream`: pre-pass (delta, lse_log2, dq_accum zeroed unless kBwdStoreFirst), main
// kernel (dK, dV, dQ added into dq_accum), dQ conversion. The caller allocated the scratch (params.h: dq_accum need
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
