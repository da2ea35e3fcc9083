// The Hopper (sm_90a) backward family: declarations only (no kernel bodies), so the dispatch
// (compiled for every arch) can include it. Definitions: sm90/bwd_launch.h, instantiated once each
// by csrc/instantiations/sm90_bwd_*.cu (sm_90a alone); bwd_supports in sm90/bwd_supports.h.
#pragma once

#include <cuda_runtime.h>

#include "../params.h"
#include "bwd_walk.h"  // bwd_rotates

// Store-first (sixteenth session, measured on the H200): the tiles with the dQ writer (d = 64 / 128)
// need no zeroed dq_accum. The first K/V block to reach a dQ tile (a ticket on the tile's semaphore,
// dq_turns.h; deterministic calls: turn 0) stores its part with a TMA store instead of a reduce-add and
// then marks the tile; the other blocks wait for the mark before their reduce-adds. The pre-pass skips
// 128 MB of zero writes at 16k tokens x 2048 hidden (69 -> 37 us on the H200), and the dQ conversion
// writes zeros for the tiles no K/V block adds into (causal rows that see no key, dq_adders.h). Needs
// dq_semaphore_ptr (bwd_dq_semaphores sizes it for the calls bwd_store_first picks); without it the
// kernels zero and add as before.
// Where it pays (benchmarks/NOTES.md "Sixteenth session", backward ours / cuDNN at 512 / 1k / 2k / 4k,
// always-on against never in one call): d = 128 non-causal 0.88-0.93 / 0.96-0.98 / 0.99-1.00 / 0.98-1.00
// -> 1.00 / 1.00 / 1.01 / 1.02, causal 0.97 / 0.97-0.98 / 0.99-1.00 / 0.98-1.02 -> 1.07 / 1.02 / 1.03 /
// 1.00; d = 64 causal 0.99 / 0.99 / 1.00 / 0.94-0.95 -> 1.01 / 1.02 / 1.03 / 0.96. d = 64 non-causal
// mixed, so off: 0.96 / 0.97 / 0.90-0.91 / 0.98 -> 0.93 / 0.94 / 0.93 / 0.99, its main kernel 881 -> 958 us
// at 1k in the kernel timeline. Likely why: every K/V block there walks the query tiles in step, so at
// each tile all but one wait for the first one's store, and a d = 64 step is short against that wait.
// This choice against never (call 2, A / B / A, backward TFLOP/s): d = 128 non-causal +4-5 % at 512,
// +2-3 % at 1k-4k; causal +7-11 / +6 / +3 / +2-3 %; d = 64 causal +5 / +3-4 / +3 / +1 %.
// Seventeenth session: d = 64 non-causal stores first where its walk is rotated (bwd_walk.h, the plain
// kernel: +4 % at 512 / 1k against the in-step walk without store-first), not in the dropout kernel.
// FLASH_ATTN_CUDA_SM90_BWD_STORE_FIRST (build-wide: the dispatch sizes the semaphores by it): 2 (default)
// that choice; 0 never; 1 every call of the tiles with the dQ writer (comparisons, scripts/variants_gpu.sh).
#ifndef FLASH_ATTN_CUDA_SM90_BWD_STORE_FIRST
#define FLASH_ATTN_CUDA_SM90_BWD_STORE_FIRST 2
#endif

namespace flash::sm90 {

// Whether the sm90 backward kernel of head dim `headdim` (64, 128, 256), causal or not, with dropout or
// not, stores each dQ tile's first part.
constexpr bool bwd_store_first(int headdim, bool causal, bool dropout) {
  constexpr int kMode = FLASH_ATTN_CUDA_SM90_BWD_STORE_FIRST;
  static_assert(kMode >= 0 && kMode <= 2, "FLASH_ATTN_CUDA_SM90_BWD_STORE_FIRST is 0, 1 or 2");
  if (headdim > 128 || kMode == 0) { return false; }  // d = 256: the role-split tile has no dQ writer
  return kMode == 1 || causal || headdim > 64 || bwd_rotates(headdim, causal, dropout);
}

// The backward on `stream`: pre-pass (delta, lse_log2, dq_accum zeroed unless bwd_store_first), main
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
