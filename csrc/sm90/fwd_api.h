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
// exactly the calls with dropout_p > 0 (cudaErrorInvalidValue otherwise). kShortCausal: the short causal
// kernel (sm90_fwd_hdim<D>_<dtype>_short_causal.cu, FLASH_ATTN_CUDA_SM90_SHORT_CAUSAL builds), for causal
// calls without dropout only (cudaErrorInvalidValue otherwise).
template <typename Element, int kHeadDim, bool kDropout = false, bool kShortCausal = false>
cudaError_t run_fwd_(const FwdParams& params, cudaStream_t stream);

// Longest query length the short causal kernel takes (fwd_short_causal). The macro (compiled into
// fwd_dispatch.cu) is for same-run comparisons: 0 turns the kernel off, a larger value moves the switch.
#ifndef FLASH_ATTN_CUDA_SM90_SHORT_CAUSAL_MAX_SEQLEN
#define FLASH_ATTN_CUDA_SM90_SHORT_CAUSAL_MAX_SEQLEN 1024
#endif
constexpr int kShortCausalMaxSeqlenQ = FLASH_ATTN_CUDA_SM90_SHORT_CAUSAL_MAX_SEQLEN;

// Whether a causal call without dropout at head dim 64 runs on the short causal kernel (128 x 128, two
// consumer warpgroups) instead of the causal tile (192 x 128, three): seqlen_q <= 1k where the 192-row
// tiles leave more rows idle than 128-row tiles would (1024 rows: 128 against 0; 768: none either way).
// H100 SXM, the FA2 grid, causal forward: 128 x 128 against 192 x 128 (seventeenth session,
// results/h100_fwd64_wg2.md) +2.8 % at 512, +9.4 % at 1k, -6 % at 2k and beyond; through the dispatch
// (eighteenth session, results/h100_short_causal.md) +1.5 % at 512, -5 % at 768, +8 % at 1k, -4 % at
// 1536. The dispatch asks only where the build has it.
// The two tiles' query rows (fwd_tile_table.h FwdTile<64>; fwd_launch.h checks them against it).
constexpr int kCausalTileRows64 = 192, kShortCausalTileRows64 = 128;
constexpr bool fwd_short_causal(int headdim_rounded, bool causal, bool dropout, int seqlen_q) {
  const auto idle = [seqlen_q](int rows) { return (seqlen_q + rows - 1) / rows * rows - seqlen_q; };
  return headdim_rounded == 64 && causal && !dropout && seqlen_q <= kShortCausalMaxSeqlenQ &&
         idle(kCausalTileRows64) > idle(kShortCausalTileRows64);
}

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
