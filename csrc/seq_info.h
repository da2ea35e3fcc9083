// Where one (batch, head)'s sequence lives: its lengths and first rows. Fixed-length batches
// use params.seqlen_q/k and batch strides; varlen batches (params.cu_seqlens_q/k set, batch
// strides 0) read their lengths and first rows from the cumulative lengths.
//
// SeqInfo<false> reads params at each use (constant bank), exactly as the kernels did before
// varlen: copying the lengths into registers changed the plain forward's register allocation
// (d=128: 76 -> 60 B of spills, different SASS). SeqInfo<true> serves the kMods kernels and the
// backward's varlen pre-pass / dQ conversion.
//
// The prefix sums are trusted by the kernels only as far as memory safety goes: a sequence's
// first row is clamped into [0, total] and its length to what is left of the packed tensor (and
// to the max seqlen the grid was sized for). Bad prefix sums (reachable through the raw ops or a
// compiled graph, which do not read values) give wrong numbers, never out-of-bounds accesses.
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

// Sequence b of a packed tensor of `total` rows, as its prefix sums cu place it, clamped into the
// tensor: its first row in [0, total], its length in [0, min(max_len, total - first)] (max_len:
// the longest sequence the grid was sized for).
CUTE_DEVICE int varlen_first_row(const int* cu, int b, int total) { return min(max(cu[b], 0), total); }
CUTE_DEVICE int varlen_length(const int* cu, int b, int first, int total, int max_len) {
  return min(max(cu[b + 1] - first, 0), min(max_len, total - first));
}

template <>
struct SeqInfo<true> {
  int sq, sk;
  int64_t q0, k0, lse0;
  CUTE_DEVICE SeqInfo(FwdParams const& p, int batch, int head) {
    if (p.cu_seqlens_q != nullptr) {
      const int first_q = varlen_first_row(p.cu_seqlens_q, batch, p.total_q);
      const int first_k = varlen_first_row(p.cu_seqlens_k, batch, p.total_k);
      sq = varlen_length(p.cu_seqlens_q, batch, first_q, p.total_q, p.seqlen_q);
      sk = varlen_length(p.cu_seqlens_k, batch, first_k, p.total_k, p.seqlen_k);
      q0 = first_q;
      k0 = first_k;
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
// The varlen start takes the clamped first row (SeqInfo's), so it stays inside the buffer.
template <bool kVarlen>
CUTE_DEVICE int64_t bwd_scratch_row0(BwdParams const& p, int batch, int head) {
  if constexpr (kVarlen) {
    if (p.cu_seqlens_q != nullptr) {
      const int first_q = varlen_first_row(p.cu_seqlens_q, batch, p.total_q);
      return int64_t(head) * p.varlen_scratch_rows + bwd_varlen_scratch_start(first_q, batch);
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
