// Before the KV-cache attention (decode_kernel.h), in the same stream: the new keys (rotated) and
// values are written into the cache slots cache_seqlens[b] + i, and q is rotated into the
// params.q_ptr buffer when a rotary embedding is given. Rotary positions are absolute slots, as
// flash-attn's: new key i at cache_seqlens[b] + i; query token t at cache_seqlens[b] + t when
// causal or windowed, else every query token at cache_seqlens[b].
// Slots at or past the cache's capacity are not written (the binding refuses such shapes where
// they are known on the host); positions are clamped into the cos/sin tables.
#pragma once

#include <cute/config.hpp>

#include "decode_kernel.h"  // KvCacheSeq
#include "params.h"

namespace flash {

constexpr int kAppendThreads = 256;

// Element col of a row after the rotary embedding at table row pos (cos, sin: (seqlen_ro, rotary_dim / 2)).
template <typename Element>
CUTE_DEVICE float rotary_element(const Element* x, int col, int pos, KvCacheParams const& p) {
  const float v = float(x[col]);
  if (col >= p.rotary_dim) { return v; }
  const int half = p.rotary_dim / 2;
  const int i = p.rotary_interleaved ? col / 2 : col % half;              // frequency index
  const bool first = p.rotary_interleaved ? col % 2 == 0 : col < half;   // x0 of the pair
  const float partner = float(x[p.rotary_interleaved ? col ^ 1 : (first ? col + half : col - half)]);
  const float c = float(static_cast<const Element*>(p.rotary_cos_ptr)[int64_t(pos) * half + i]);
  const float s = float(static_cast<const Element*>(p.rotary_sin_ptr)[int64_t(pos) * half + i]);
  return first ? v * c - partner * s : partner * s + v * c;  // (x0, x1) -> (x0 c - x1 s, x0 s + x1 c)
}

// 8 elements (16 B) from col of src to dst, rotated at pos when rotate.
template <typename Element>
CUTE_DEVICE void copy_chunk(const Element* src, Element* dst, int col, bool rotate, int pos, KvCacheParams const& p) {
  cutlass::Array<Element, 8> out;
  CUTE_UNROLL
  for (int j = 0; j < 8; ++j) { out[j] = rotate ? Element(rotary_element(src, col + j, pos, p)) : src[col + j]; }
  *reinterpret_cast<cutlass::Array<Element, 8>*>(dst + col) = out;
}

// One thread per 16-B chunk of a row; rows: new keys (batch, seqlen_new, nheads_k), new values
// (same), then rotated queries (batch, seqlen_q, nheads) when rotary_dim > 0.
template <typename Element>
__global__ void __launch_bounds__(kAppendThreads) kvcache_append_kernel(__grid_constant__ const KvCacheParams params) {
  griddep_launch_dependents();  // the decode grid (programmatic dependent launch) may start; it waits for this one
  const int chunks = params.headdim / 8;
  const int64_t item = int64_t(blockIdx.x) * kAppendThreads + threadIdx.x;
  const int col = int(item % chunks) * 8;
  int64_t row = item / chunks;
  const int64_t new_rows = int64_t(params.batch) * params.seqlen_new * params.nheads_k;
  const bool rotary = params.rotary_dim > 0;
  auto clamp_pos = [&](int64_t pos) { return int(min(max(pos, int64_t(0)), int64_t(params.seqlen_ro - 1))); };

  if (row < 2 * new_rows) {  // a new key or value row
    const bool is_v = row >= new_rows;
    row -= is_v ? new_rows : 0;
    const int head_k = int(row % params.nheads_k);
    const int i = int(row / params.nheads_k % params.seqlen_new);
    const int batch = int(row / params.nheads_k / params.seqlen_new);
    const int64_t slot = int64_t(params.cache_seqlens[batch]) + i;
    if (slot < 0 || slot >= params.seqlen_k) { return; }  // outside the cache: never written
    const KvCacheSeq seq(params, batch);
    const Element* src = static_cast<const Element*>(is_v ? params.vnew_ptr : params.knew_ptr) +
                         batch * (is_v ? params.vnew_batch_stride : params.knew_batch_stride) +
                         i * (is_v ? params.vnew_row_stride : params.knew_row_stride) +
                         head_k * (is_v ? params.vnew_head_stride : params.knew_head_stride);
    Element* dst = static_cast<Element*>(const_cast<void*>(is_v ? params.v_ptr : params.k_ptr)) +
                   seq.slot_offset(params, int(slot), is_v ? params.v_batch_stride : params.k_batch_stride,
                                   is_v ? params.v_row_stride : params.k_row_stride) +
                   head_k * (is_v ? params.v_head_stride : params.k_head_stride);
    copy_chunk(src, dst, col, rotary && !is_v, clamp_pos(slot), params);
    return;
  }
  row -= 2 * new_rows;
  if (!rotary || row >= int64_t(params.batch) * params.seqlen_q * params.nheads) { return; }
  const int head = int(row % params.nheads);
  const int token = int(row / params.nheads % params.seqlen_q);
  const int batch = int(row / params.nheads / params.seqlen_q);
  const int64_t pos = int64_t(params.cache_seqlens[batch]) + (params.rotary_per_token ? token : 0);
  const Element* src = static_cast<const Element*>(params.q_in_ptr) + batch * params.q_in_batch_stride +
                       token * params.q_in_row_stride + head * params.q_in_head_stride;
  Element* dst = static_cast<Element*>(const_cast<void*>(params.q_ptr)) + batch * params.q_batch_stride +
                 token * params.q_row_stride + head * params.q_head_stride;
  copy_chunk(src, dst, col, true, clamp_pos(pos), params);
}

// Rows of work of kvcache_append_kernel (0: nothing to launch).
inline int64_t kvcache_append_rows(const KvCacheParams& p) {
  return 2 * int64_t(p.batch) * p.seqlen_new * p.nheads_k +
         (p.rotary_dim > 0 ? int64_t(p.batch) * p.seqlen_q * p.nheads : 0);
}

}  // namespace flash
