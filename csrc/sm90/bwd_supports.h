// Which backward calls the sm90 family serves (host only, no CuTe): bwd_dispatch.cu includes this
// once. Everything else goes to the sm80 kernels (never an error because of a family).
#pragma once

#include "../params.h"
#include "bwd_api.h"
#include "tma_rules.h"

namespace flash::sm90 {

// Not inline: declared in bwd_api.h, defined here once (bwd_dispatch.cu is the one includer).
bool bwd_supports(const BwdParams& p) {
  if (p.dtype != DType::kBFloat16 && p.dtype != DType::kFloat16) { return false; }
  // Head dims with a tile in bwd_tile_table.h.
  if (p.headdim != p.headdim_rounded || (p.headdim != 64 && p.headdim != 128 && p.headdim != 256)) { return false; }
  // Dropout: the kDropout variant (bwd_dropout.h) of every tile, d = 256's role-split tile included;
  // the dispatch also checks the build compiled it.
  // Softcap, ALiBi, a left window, varlen: the sm80 kernels. Deterministic: the tiles whose dQ goes
  // through the writer warp's reduce-add (d = 64/128, bwd_kernel.h bwd_store_dq takes turns on the
  // semaphores), with the semaphores given; d = 256's role-split tile adds by atomics: sm80.
  if (needs_mods_besides_dropout(p) || p.cu_seqlens_q != nullptr) { return false; }
  if (p.deterministic && (p.headdim == 256 || p.dq_semaphore_ptr == nullptr)) { return false; }
  const bool causal = is_causal(p);
  const bool full = p.window_left < 0 && p.window_right < 0;
  if (!causal && !full) { return false; }
  if (p.seqlen_q < 1 || p.seqlen_k < 1 || p.nheads_k < 1 || p.nheads % p.nheads_k != 0) { return false; }
  if (p.num_dq_splits != 1 || p.seqlen_q_rounded % 128 != 0) { return false; }
  // O and dQ: 16-byte vector rows in the pre-pass and the dQ conversion (bwd_passes.h), the TMA rules.
  for (const void* ptr : {p.q_ptr, p.k_ptr, p.v_ptr, p.do_ptr, static_cast<const void*>(p.o_ptr),
                          static_cast<const void*>(p.dq_ptr), static_cast<const void*>(p.dq_accum_ptr),
                          static_cast<const void*>(p.dk_ptr), static_cast<const void*>(p.dv_ptr)}) {
    if (!detail::tma_aligned(ptr)) { return false; }
  }
  // dk/dv: 32-bit stores of column pairs need even row strides.
  return detail::tma_strides(p.q_row_stride, p.q_head_stride, p.q_batch_stride) &&
         detail::tma_strides(p.k_row_stride, p.k_head_stride, p.k_batch_stride) &&
         detail::tma_strides(p.v_row_stride, p.v_head_stride, p.v_batch_stride) &&
         detail::tma_strides(p.do_row_stride, p.do_head_stride, p.do_batch_stride) &&
         detail::tma_strides(p.o_row_stride, p.o_head_stride, p.o_batch_stride) &&
         detail::tma_strides(p.dq_row_stride, p.dq_head_stride, p.dq_batch_stride) && p.dk_row_stride % 2 == 0 &&
         p.dv_row_stride % 2 == 0;
}

}  // namespace flash::sm90
