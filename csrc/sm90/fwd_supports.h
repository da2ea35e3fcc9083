// Which forward calls the sm90 family serves (host only, no CuTe): fwd_dispatch.cu includes this
// once. Everything else goes to the sm80 kernels.
#pragma once

#include "../params.h"
#include "fwd_api.h"
#include "tma_rules.h"

namespace flash::sm90 {

// Not inline: declared in fwd_api.h, defined here once (fwd_dispatch.cu is the one includer).
bool fwd_supports(const FwdParams& p) {
  if (p.dtype != DType::kBFloat16 && p.dtype != DType::kFloat16) { return false; }
  // Head dims with a tile in fwd_tile_table.h (checked and timed with benchmarks/cpp/sm90_fwd_check.cu).
  if (p.headdim != p.headdim_rounded || (p.headdim != 64 && p.headdim != 128 && p.headdim != 256)) { return false; }
  if (needs_mods_besides_dropout(p)) { return false; }  // softcap, ALiBi, left window, varlen
  // Dropout: the kDropout variant (fwd_kernel.h); the dispatch also checks the build compiled it.
  const bool causal = is_causal(p);
  const bool full = p.window_left < 0 && p.window_right < 0;
  if (!causal && !full) { return false; }
  if (p.seqlen_q < 1 || p.seqlen_k < 1 || p.nheads_k < 1 || p.nheads % p.nheads_k != 0) { return false; }
  if (p.lse_ptr == nullptr) { return false; }
  for (const void* ptr : {p.q_ptr, p.k_ptr, p.v_ptr, static_cast<const void*>(p.o_ptr)}) {
    if (!detail::tma_aligned(ptr)) { return false; }
  }
  return detail::tma_strides(p.q_row_stride, p.q_head_stride, p.q_batch_stride) &&
         detail::tma_strides(p.k_row_stride, p.k_head_stride, p.k_batch_stride) &&
         detail::tma_strides(p.v_row_stride, p.v_head_stride, p.v_batch_stride) &&
         detail::tma_strides(p.o_row_stride, p.o_head_stride, p.o_batch_stride);
}

}  // namespace flash::sm90
