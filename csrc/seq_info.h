// Where one (batch, head)'s sequence lives: its lengths and first rows. Fixed-length batches
// use params.seqlen_q/k and batch strides; varlen batches (params.cu_seqlens_q/k set, batch
// strides 0) read their lengths and first rows from the cumulative lengths.
//
// SeqInfo<false> reads params at each use (constant bank), exactly as the kernels did before
// varlen: copying the lengths into registers changed the plain forward's register allocation
// (d=128: 76 -> 60 B of spills, different SASS). Only kMods instantiations use SeqInfo<true>.
#pragma once

#include <cute/config.hpp>

#include "params.h"

namespace flash {

template <bool kVarlen>
struct SeqInfo;

template <>
struct SeqInfo<false> {
  FwdParams const& p;
  int batch, head;
  CUTE_DEVICE SeqInfo(FwdParams const& params, int b, int h) : p(params), batch(b), head(h) {}
  CUTE_DEVICE int seqlen_q() const { return p.seqlen_q; }
  CUTE_DEVICE int seqlen_k() const { return p.seqlen_k; }
  CUTE_DEVICE int64_t q_row0() const { return 0; }  // first row in the (packed) q/out tensors
  CUTE_DEVICE int64_t k_row0() const { return 0; }  // first row in the (packed) k/v tensors
  // of row 0 in lse: (batch, nheads, seqlen_q)
  CUTE_DEVICE int64_t lse_offset() const { return (int64_t(batch) * p.nheads + head) * p.seqlen_q; }
};

template <>
struct SeqInfo<true> {
  int sq, sk;
  int64_t q0, k0, lse0;
  CUTE_DEVICE SeqInfo(FwdParams const& p, int batch, int head) {
    if (p.cu_seqlens_q != nullptr) {
      q0 = p.cu_seqlens_q[batch];
      k0 = p.cu_seqlens_k[batch];
      sq = p.cu_seqlens_q[batch + 1] - int(q0);
      sk = p.cu_seqlens_k[batch + 1] - int(k0);
      lse0 = int64_t(head) * p.total_q + q0;  // lse: (nheads, total_q)
    } else {
      q0 = k0 = 0;
      sq = p.seqlen_q;
      sk = p.seqlen_k;
      lse0 = (int64_t(batch) * p.nheads + head) * p.seqlen_q;
    }
  }
  CUTE_DEVICE int seqlen_q() const { return sq; }
  CUTE_DEVICE int seqlen_k() const { return sk; }
  CUTE_DEVICE int64_t q_row0() const { return q0; }
  CUTE_DEVICE int64_t k_row0() const { return k0; }
  CUTE_DEVICE int64_t lse_offset() const { return lse0; }
};

// The backward's row-padded float32 scratch (delta, lse_log2, dq_accum slices; params.h).
// scratch_row0: first row of (batch, head) in it; split_rows: rows per dq_accum slice.
// <false>: fixed-length batches only, as before varlen; <true> also reads cu_seqlens_q.
template <bool kVarlen>
CUTE_DEVICE int64_t bwd_scratch_row0(BwdParams const& p, int batch, int head) {
  if constexpr (kVarlen) {
    if (p.cu_seqlens_q != nullptr) {
      return int64_t(head) * p.varlen_scratch_rows + bwd_varlen_scratch_start(p.cu_seqlens_q[batch], batch);
    }
  }
  return (int64_t(batch) * p.nheads + head) * p.seqlen_q_rounded;
}

template <bool kVarlen>
CUTE_DEVICE int64_t bwd_scratch_split_rows(BwdParams const& p) {
  if constexpr (kVarlen) {
    if (p.cu_seqlens_q != nullptr) { return int64_t(p.nheads) * p.varlen_scratch_rows; }
  }
  return int64_t(p.batch) * p.nheads * p.seqlen_q_rounded;
}

}  // namespace flash
