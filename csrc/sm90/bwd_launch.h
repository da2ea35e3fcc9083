// Launch of the sm90 backward (definitions of run_bwd_ for the instantiation TUs, compiled for sm_90a
// alone): its pre-pass (bwd_passes.h), the main kernel (TMA descriptors from BwdParams, grid,
// shared-memory opt-in) and the dQ conversion, in stream order.
#pragma once

#include <cuda_runtime.h>

#include "../params.h"
#include "bwd_api.h"
#include "bwd_kernel.h"
#include "bwd_passes.h"
#include "bwd_tile_table.h"
#include "bwd_tma.h"

namespace flash::sm90 {

template <class Traits, bool kCausal, bool kDropout, bool kTurns>
cudaError_t launch_bwd_kernel(const typename BwdTmaFor<Traits, kCausal, kDropout>::Params& kp, cudaStream_t stream) {
  auto kernel = &bwd_kernel<Traits, kCausal, kDropout, kTurns>;
  constexpr int kSmem = Traits::kSmemBytes + (kDropout ? kDropoutSmemBytes<Traits> : 0);
  static_assert(kSmem <= 232448, "the dropout mask words exceed the 227 KB per-block shared memory of sm90");
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (err != cudaSuccess) { return err; }
  const BwdParams& p = kp.p;
  const dim3 grid((p.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN, p.nheads, p.batch);
  kernel<<<grid, Traits::kNThreads, kSmem, stream>>>(kp);
  return cudaGetLastError();
}

// The plain main kernel, or the deterministic one (the dQ writer's turns) on the same tile.
template <class Traits, bool kCausal, bool kDropout>
cudaError_t launch_bwd_main(const BwdParams& params, cudaStream_t stream) {
  if (params.seqlen_k <= 0 || params.batch <= 0 || params.nheads <= 0) { return cudaSuccess; }
  const auto kp = BwdTmaFor<Traits, kCausal, kDropout>::make_params(params);
  if (params.deterministic) {  // the dQ writer's turns (dq_turns.h); bwd_supports: tiles with the writer
    if constexpr (Traits::kDQByTma) {
      if (params.dq_semaphore_ptr == nullptr) { return cudaErrorInvalidValue; }
      return launch_bwd_kernel<Traits, kCausal, kDropout, true>(kp, stream);
    } else {
      return cudaErrorInvalidValue;  // never a silently non-deterministic dQ
    }
  }
  return launch_bwd_kernel<Traits, kCausal, kDropout, false>(kp, stream);
}

// Pre-pass, main kernel, dQ conversion of one kernel. A store-first kernel (bwd_api.h) given the
// semaphores needs no zeroed dq_accum, and its conversion writes dQ = 0 for the tiles nobody adds into.
template <class Traits, bool kCausal, bool kDropout>
cudaError_t run_bwd_passes(const BwdParams& params, cudaStream_t stream) {
  using Element = typename Traits::Element;
  constexpr int kD = Traits::kHeadDim;
  constexpr bool kStoreFirst = kStoreFirstOf<Traits, kCausal, kDropout>;
  [[maybe_unused]] const bool store_first = kStoreFirst && params.dq_semaphore_ptr != nullptr;
  cudaError_t err = cudaSuccess;
  if constexpr (kStoreFirst) {  // (the other kernels compile only the zeroing pre-pass)
    err = store_first ? launch_bwd_prepass<Element, kD, false>(params, stream)
                      : launch_bwd_prepass<Element, kD>(params, stream);
  } else {
    err = launch_bwd_prepass<Element, kD>(params, stream);
  }
  if (err != cudaSuccess) { return err; }
  err = launch_bwd_main<Traits, kCausal, kDropout>(params, stream);
  if (err != cudaSuccess) { return err; }
  if constexpr (kStoreFirst) {
    if (store_first) { return launch_bwd_convert_dq<Element, kD, Traits::kBlockM, Traits::kBlockN>(params, stream); }
  }
  return launch_bwd_convert_dq<Element, kD>(params, stream);
}

// kDropout: the dropout variant, for exactly the calls with dropout_p > 0 (as sm90/fwd_launch.h: a
// dropout call on the plain kernel, or the reverse, is an error, never a silent no-op). The pre-pass
// and the dQ conversion are the same (delta = rowsum(dO o O) of the dropped output, FA2's algebra).
template <typename Element, int kHeadDim, bool kDropout>
cudaError_t run_bwd_(const BwdParams& params, cudaStream_t stream) {
  if (needs_dropout(params) != kDropout) { return cudaErrorInvalidValue; }
  // The causal and the dropout kernels may have tiles of their own (bwd_tile_table.h).
  return is_causal(params)
             ? run_bwd_passes<BwdTraitsFor<Element, kHeadDim, true, kDropout>, true, kDropout>(params, stream)
             : run_bwd_passes<BwdTraitsFor<Element, kHeadDim, false, kDropout>, false, kDropout>(params, stream);
}

}  // namespace flash::sm90
