// FlashAttention-2 backward kernels.
//
//   bwd_prepass_kernel   D = rowsum(dO * O), float32 (batch, nheads, seqlen_q)
//   bwd_kernel           one thread block per (K/V block, head, batch): K_j, V_j stay in shared
//                        memory, dK_j, dV_j in registers; loop over Q blocks recomputing
//                        P = exp(S * scale - LSE) from the forward's LSE (no N x N buffer),
//                        Q/dO of the next block loading (cp.async) under this block's MMAs;
//                        dQ accumulated in float32 with atomics (deterministic mode: one
//                        slice per thread block, see bwd_kernel)
//   bwd_convert_dq_kernel  dQ = scale * sum of the dq_accum slices, in the input dtype
// The algebra is flash_attn_cuda.reference.attention_blockwise_backward.
#pragma once

#include <cute/tensor.hpp>

#include "bwd_kernel_traits.h"
#include "copy_utils.h"
#include "dropout.h"
#include "mask.h"
#include "params.h"
#include "score_mods.h"
#include "seq_info.h"
#include "tensor_utils.h"

namespace flash {

using namespace cute;

// delta = rowsum(dO * O) and lse_log2 = LSE * log2(e) for every row up to seqlen_q_rounded:
// padding rows get delta 0 and lse_log2 +inf, as do rows that see no key (LSE = -inf), so the
// main kernel's P is exactly 0 there without a bounds check. One warp per row; each lane reads
// 8 contiguous elements (16 B) per step. kVarlen: rows of sequence blockIdx.z (seq_info.h); the
// grid spans the longest sequence, and each writes only its own padded rows.
template <typename Element, bool kVarlen>
__global__ void bwd_prepass_kernel(__grid_constant__ const BwdParams p) {
  constexpr int kRowsPerBlock = 8;  // 256 threads
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = blockIdx.x * kRowsPerBlock + warp, head = blockIdx.y, batch = blockIdx.z;
  const SeqInfo<kVarlen> seq(p, batch, head);
  if (kVarlen && row >= (seq.seqlen_q() + kBwdRowAlign - 1) / kBwdRowAlign * kBwdRowAlign) { return; }
  const int64_t out_row = bwd_scratch_row0<kVarlen>(p, batch, head) + row;
  if (row >= seq.seqlen_q()) {
    if (lane == 0) {
      p.delta_ptr[out_row] = 0.f;
      p.lse_log2_ptr[out_row] = INFINITY;
    }
    return;
  }
  const int64_t packed_row = seq.q_row0() + row;  // row in q/out/dout
  const Element* o = static_cast<const Element*>(p.o_ptr) + batch * p.o_batch_stride + packed_row * p.o_row_stride +
                     head * p.o_head_stride;
  const Element* dout = static_cast<const Element*>(p.do_ptr) + batch * p.do_batch_stride +
                        packed_row * p.do_row_stride + head * p.do_head_stride;
  float sum = 0.f;
  for (int c = lane * 8; c < p.headdim; c += 32 * 8) {
    const uint4 a = *reinterpret_cast<const uint4*>(o + c);
    const uint4 b = *reinterpret_cast<const uint4*>(dout + c);
    const Element* ea = reinterpret_cast<const Element*>(&a);
    const Element* eb = reinterpret_cast<const Element*>(&b);
    CUTE_UNROLL
    for (int j = 0; j < 8; ++j) { sum += float(ea[j]) * float(eb[j]); }
  }
  CUTE_UNROLL
  for (int offset = 16; offset > 0; offset /= 2) { sum += __shfl_xor_sync(0xffffffff, sum, offset); }
  if (lane == 0) {
    const float lse = p.lse_ptr[seq.lse_offset() + row];
    p.delta_ptr[out_row] = sum;
    p.lse_log2_ptr[out_row] = lse == -INFINITY ? INFINITY : lse * float(M_LOG2E);
  }
}

// dq_accum tile layout. Each (kBlockM x d) tile of a (batch, head) is stored thread-major:
// element i of thread t's dQ accumulator (TiledMmadQ's C fragment) lives at i * kNThreads + t,
// so one atomic instruction of a warp adds into 32 consecutive floats (one 128-B line) instead
// of 8 rows' scattered sectors. The convert kernel undoes the permutation with the same MMA
// partition. (FA2 does the same; an L2-atomic-throughput limit otherwise.) The sm90 family's backward
// (its TMA reduce-add needs the rows as they are) keeps row-major tiles and passes of its own.
// row0: the (batch, head)'s first scratch row (bwd_scratch_row0).
template <typename Traits>
CUTE_DEVICE float* dq_accum_tile(float* dq_accum, int64_t row0, int m_block) {
  return dq_accum + (row0 + int64_t(m_block) * Traits::kBlockM) * Traits::kHeadDim;
}

// dq[b, i, h, :] = softmax_scale * sum_s dq_accum[s, b, h, i, :] for one (kBlockM x d) tile per
// thread block, undoing dq_accum's thread-major tile layout; the num_dq_splits slices are summed
// in index order (deterministic mode has several). kVarlen: as the pre-pass's.
template <typename Traits, bool kVarlen>
__global__ void __launch_bounds__(Traits::kNThreads)
    bwd_convert_dq_kernel(__grid_constant__ const BwdParams p) {
  using Element = typename Traits::Element;
  constexpr int kThreads = Traits::kNThreads;
  const int tid = threadIdx.x, m_block = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  const SeqInfo<kVarlen> seq(p, batch, head);
  if (kVarlen && m_block * Traits::kBlockM >= seq.seqlen_q()) { return; }
  const int64_t split_stride = bwd_scratch_split_rows<kVarlen>(p) * Traits::kHeadDim;
  const int64_t row0 = bwd_scratch_row0<kVarlen>(p, batch, head);
  const float* tile = dq_accum_tile<Traits>(p.dq_accum_ptr, row0, m_block) + tid;
  typename Traits::TiledMmadQ mma_dq;
  Tensor coords = mma_dq.get_thread_slice(tid).partition_C(
      make_identity_tensor(Shape<Int<Traits::kBlockM>, Int<Traits::kHeadDim>>{}));  // (MMA, MMA_M, d/..) -> (row, col)
  Element* dq = static_cast<Element*>(p.dq_ptr) + batch * p.dq_batch_stride + seq.q_row0() * p.dq_row_stride +
                head * p.dq_head_stride;
  CUTE_UNROLL
  for (int i = 0; i < size(coords); ++i) {
    const int row = m_block * Traits::kBlockM + get<0>(coords(i)), col = get<1>(coords(i));
    const float* src = tile + i * kThreads;
    float sum = src[0];
    for (int s = 1; s < p.num_dq_splits; ++s) { sum += src[s * split_stride]; }
    if (row < seq.seqlen_q() && col < p.headdim) { dq[row * p.dq_row_stride + col] = Element(sum * p.softmax_scale); }
  }
}

// The work of one thread block for K/V block n_block of (head, batch): dK, dV of its keys, and
// its share of dQ added into dq_accum (this thread block's slice of the fp32 scratch, rows as
// bwd_scratch_row0 places them: params.h). kDropout: the forward's dropout mask regenerated
// (dropout.h): dV = (P o Z)^T dO, dS = P o (Z o dP - D), Z = mask / (1 - p); D = rowsum(dO o O) as
// without dropout (FA2's algebra).
template <typename Traits, bool kMods, bool kDropout>
CUTE_DEVICE void bwd_kv_block(BwdParams const& params, char* smem, float* dq_accum, int n_block, int head,
                              int batch) {
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kHeadDim = Traits::kHeadDim;
  using TileQ = Shape<Int<kBlockM>, Int<kHeadDim>>;
  using TileKV = Shape<Int<kBlockN>, Int<kHeadDim>>;
  using TileS = Shape<Int<kBlockM>, Int<kBlockN>>;
  const int tid = threadIdx.x;
  const int head_k = head / (params.nheads / params.nheads_k);
  const SeqInfo<kMods> seq(params, batch, head);  // varlen: this sequence's lengths and rows
  if constexpr (kMods) {
    if (n_block * kBlockN >= seq.seqlen_k()) { return; }  // varlen: past this sequence's keys
  }
  const int valid_kv_rows = min(kBlockN, seq.seqlen_k() - n_block * kBlockN);
  const VisibleKeys vk(seq.seqlen_q(), seq.seqlen_k(), params.window_left, params.window_right);

  // Q blocks with a row that sees a key of this K/V block: row i sees key j iff
  // i + shift - window_left <= j <= i + shift + window_right, so rows before
  // n_block*kBlockN - shift - window_right and after last_key - shift + window_left see none.
  int m_max = (seq.seqlen_q() + kBlockM - 1) / kBlockM;
  int m_min = 0;
  if (params.window_right >= 0) {
    const int first_row = n_block * kBlockN - vk.shift - params.window_right;
    m_min = first_row <= 0 ? 0 : first_row / kBlockM;
  }
  if constexpr (kMods) {
    if (params.window_left >= 0) {
      const int last_row = n_block * kBlockN + kBlockN - 1 - vk.shift + params.window_left;
      m_max = last_row < 0 ? 0 : min(m_max, last_row / kBlockM + 1);
    }
  }

  // ---------------------------------------------------------------- GLOBAL TILES
  auto rows = [&](auto* base, int64_t offset, int seqlen, int64_t row_stride) {
    return gmem_rows<Element, kHeadDim>(base, offset, seqlen, row_stride);
  };
  // Varlen: batch strides are 0 and the sequence starts at row seq.q_row0() / seq.k_row0().
  const int64_t q_row0 = seq.q_row0(), k_row0 = seq.k_row0();
  Tensor mQ = rows(params.q_ptr, batch * params.q_batch_stride + q_row0 * params.q_row_stride +
                   head * params.q_head_stride, seq.seqlen_q(), params.q_row_stride);          // (seqlen_q, d)
  Tensor mdO = rows(params.do_ptr, batch * params.do_batch_stride + q_row0 * params.do_row_stride +
                    head * params.do_head_stride, seq.seqlen_q(), params.do_row_stride);       // (seqlen_q, d)
  Tensor mK = rows(params.k_ptr, batch * params.k_batch_stride + k_row0 * params.k_row_stride +
                   head_k * params.k_head_stride, seq.seqlen_k(), params.k_row_stride);        // (seqlen_k, d)
  Tensor mV = rows(params.v_ptr, batch * params.v_batch_stride + k_row0 * params.v_row_stride +
                   head_k * params.v_head_stride, seq.seqlen_k(), params.v_row_stride);        // (seqlen_k, d)
  Tensor mdK = rows(params.dk_ptr, batch * params.dk_batch_stride + k_row0 * params.dk_row_stride +
                    head * params.dk_head_stride, seq.seqlen_k(), params.dk_row_stride);       // (seqlen_k, d)
  Tensor mdV = rows(params.dv_ptr, batch * params.dv_batch_stride + k_row0 * params.dv_row_stride +
                    head * params.dv_head_stride, seq.seqlen_k(), params.dv_row_stride);       // (seqlen_k, d)
  // Padded to a multiple of kBwdRowAlign (>= kBlockM) rows: read and added without checks.
  const int64_t scratch_row0 = bwd_scratch_row0<kMods>(params, batch, head);
  const int rows_padded = params.seqlen_q_rounded;
  Tensor mLseLog2 = make_tensor(make_gmem_ptr(params.lse_log2_ptr + scratch_row0), make_shape(rows_padded));
  Tensor mDelta = make_tensor(make_gmem_ptr(params.delta_ptr + scratch_row0), make_shape(rows_padded));

  Tensor gQ = local_tile(mQ, TileQ{}, make_coord(_, 0));                                     // (kBlockM, d, m)
  Tensor gdO = local_tile(mdO, TileQ{}, make_coord(_, 0));                                   // (kBlockM, d, m)
  Tensor gK = local_tile(mK, TileKV{}, make_coord(n_block, 0));                              // (kBlockN, d)
  Tensor gV = local_tile(mV, TileKV{}, make_coord(n_block, 0));                              // (kBlockN, d)
  Tensor gdK = local_tile(mdK, TileKV{}, make_coord(n_block, 0));                            // (kBlockN, d)
  Tensor gdV = local_tile(mdV, TileKV{}, make_coord(n_block, 0));                            // (kBlockN, d)

  typename Traits::GmemTiledCopyO gmem_copy_out;
  auto gmem_thr_out = gmem_copy_out.get_thread_slice(tid);
  Tensor tKVcKV_out = gmem_thr_out.partition_D(make_identity_tensor(TileKV{}));              // (CPY, CPY_N, CPY_K)

  if (m_max <= m_min) {  // no query sees this K/V block: its gradients are zero
    Tensor zeros = make_fragment_like<Element>(gmem_thr_out.partition_D(gdK));
    clear(zeros);
    store_tile(gmem_copy_out, zeros, gmem_thr_out.partition_D(gdK), tKVcKV_out, valid_kv_rows, params.headdim);
    store_tile(gmem_copy_out, zeros, gmem_thr_out.partition_D(gdV), tKVcKV_out, valid_kv_rows, params.headdim);
    return;
  }

  // ---------------------------------------------------------------- SHARED TILES
  // Q and dO have kStages stages each (bwd_kernel_traits.h): with two, Q/dO of the next Q block
  // stream in while this one computes.
  constexpr int kStages = Traits::kQStages;
  Element* const smem_q = reinterpret_cast<Element*>(smem);                    // kStages x (kBlockM, d)
  Element* const smem_do = smem_q + kStages * Traits::kSmemQElems;             // kStages x (kBlockM, d)
  Tensor sK = make_tensor(make_smem_ptr(smem_do + kStages * Traits::kSmemQElems), typename Traits::SmemLayoutKV{});  // (kBlockN, d)
  Tensor sV = make_tensor(sK.data() + size(sK), typename Traits::SmemLayoutKV{});                             // (kBlockN, d)
  Tensor sP = make_tensor(sV.data() + size(sV), typename Traits::SmemLayoutP{});                              // (kBlockM, kBlockN)
  Tensor sdS = make_tensor(sP.data() + size(sP), typename Traits::SmemLayoutP{});                             // (kBlockM, kBlockN)
  Tensor sKt = make_tensor(sK.data(), typename Traits::SmemLayoutKt{});                                       // (d, kBlockN)
  Tensor sPt = make_tensor(sP.data(), typename Traits::SmemLayoutPt{});                                       // (kBlockN, kBlockM)
  Tensor sdSt = make_tensor(sdS.data(), typename Traits::SmemLayoutPt{});                                     // (kBlockN, kBlockM)
  auto stage_q = [&](int stage) {  // (kBlockM, d)
    return make_tensor(make_smem_ptr(smem_q + stage * Traits::kSmemQElems), typename Traits::SmemLayoutQ{});
  };
  auto stage_do = [&](int stage) {  // (kBlockM, d)
    return make_tensor(make_smem_ptr(smem_do + stage * Traits::kSmemQElems), typename Traits::SmemLayoutQ{});
  };
  auto stage_qt = [&](int stage) {  // (d, kBlockM)
    return make_tensor(make_smem_ptr(smem_q + stage * Traits::kSmemQElems), typename Traits::SmemLayoutQt{});
  };
  auto stage_dot = [&](int stage) {  // (d, kBlockM)
    return make_tensor(make_smem_ptr(smem_do + stage * Traits::kSmemQElems), typename Traits::SmemLayoutQt{});
  };

  // ---------------------------------------------------------------- GLOBAL -> SHARED
  typename Traits::GmemTiledCopyQKV gmem_copy;
  auto gmem_thr = gmem_copy.get_thread_slice(tid);
  Tensor tQgQ = gmem_thr.partition_S(gQ);                                       // (CPY, CPY_M, CPY_K, m)
  Tensor tdOgdO = gmem_thr.partition_S(gdO);                                    // (CPY, CPY_M, CPY_K, m)
  Tensor tQcQ = gmem_thr.partition_S(make_identity_tensor(TileQ{}));            // (CPY, CPY_M, CPY_K) -> (row, col)
  Tensor tKVcKV = gmem_thr.partition_S(make_identity_tensor(TileKV{}));         // (CPY, CPY_N, CPY_K) -> (row, col)
  auto load_q_do = [&](int m_block) {  // Q and dO of m_block into stage m_block % kStages
    const int valid_q_rows = seq.seqlen_q() - m_block * kBlockM;
    load_tile(gmem_copy, tQgQ(_, _, _, m_block), gmem_thr.partition_D(stage_q(m_block % kStages)), tQcQ,
              valid_q_rows, params.headdim);
    load_tile(gmem_copy, tdOgdO(_, _, _, m_block), gmem_thr.partition_D(stage_do(m_block % kStages)), tQcQ,
              valid_q_rows, params.headdim);
  };
  load_tile(gmem_copy, gmem_thr.partition_S(gK), gmem_thr.partition_D(sK), tKVcKV, valid_kv_rows, params.headdim);
  load_tile(gmem_copy, gmem_thr.partition_S(gV), gmem_thr.partition_D(sV), tKVcKV, valid_kv_rows, params.headdim);
  load_q_do(m_min);
  cp_async_fence();

  // ---------------------------------------------------------------- MMA PARTITIONS
  // S = Q K^T and dP = dO V^T: (kBlockM, kBlockN)
  typename Traits::TiledMmaSdP mma_sdp;
  auto thr_sdp = mma_sdp.get_thread_slice(tid);
  Tensor tSrQ = thr_sdp.partition_fragment_A(stage_q(0));                       // (MMA, MMA_M, MMA_K)
  Tensor tSrK = thr_sdp.partition_fragment_B(sK);                               // (MMA, MMA_N, MMA_K)
  Tensor tdPrdO = thr_sdp.partition_fragment_A(stage_do(0));                    // (MMA, MMA_M, MMA_K)
  Tensor tdPrV = thr_sdp.partition_fragment_B(sV);                              // (MMA, MMA_N, MMA_K)
  auto copy_a_sdp = make_tiled_copy_A(typename Traits::SmemCopyAtom{}, mma_sdp);
  auto copy_b_sdp = make_tiled_copy_B(typename Traits::SmemCopyAtom{}, mma_sdp);
  Tensor tSsK = copy_b_sdp.get_thread_slice(tid).partition_S(sK);               // (CPY, MMA_N, MMA_K)
  Tensor tdPsV = copy_b_sdp.get_thread_slice(tid).partition_S(sV);              // (CPY, MMA_N, MMA_K)
  Tensor tScS = thr_sdp.partition_C(make_identity_tensor(TileS{}));             // (MMA, MMA_M, MMA_N) -> (row, col)
  Tensor tScS_rc = make_tensor(tScS.data(), rowcol_view(tScS.layout()));        // (rows, cols)
  auto store_sdp = make_tiled_copy_C(typename Traits::SmemCopyAtomStore{}, mma_sdp);
  auto store_sdp_thr = store_sdp.get_thread_slice(tid);
  Tensor tPsP = store_sdp_thr.partition_D(sP);                                  // (CPY, CPY_M, CPY_N)
  Tensor tdSsdS = store_sdp_thr.partition_D(sdS);                               // (CPY, CPY_M, CPY_N)

  // dV += P^T dO and dK += dS^T Q: (kBlockN, d), accumulated over all Q blocks in registers
  typename Traits::TiledMmadKV mma_dkv;
  auto thr_dkv = mma_dkv.get_thread_slice(tid);
  Tensor tdVrPt = thr_dkv.partition_fragment_A(sPt);                            // (MMA, MMA_N, MMA_M)
  Tensor tdVrdOt = thr_dkv.partition_fragment_B(stage_dot(0));                  // (MMA, d/.., MMA_M)
  Tensor tdKrdSt = thr_dkv.partition_fragment_A(sdSt);                          // (MMA, MMA_N, MMA_M)
  Tensor tdKrQt = thr_dkv.partition_fragment_B(stage_qt(0));                    // (MMA, d/.., MMA_M)
  auto copy_a_dkv = make_tiled_copy_A(typename Traits::SmemCopyAtomTransposed{}, mma_dkv);
  auto copy_b_dkv = make_tiled_copy_B(typename Traits::SmemCopyAtomTransposed{}, mma_dkv);
  Tensor tdVsPt = copy_a_dkv.get_thread_slice(tid).partition_S(sPt);
  Tensor tdKsdSt = copy_a_dkv.get_thread_slice(tid).partition_S(sdSt);
  Tensor acc_dk = partition_fragment_C(mma_dkv, TileKV{});                      // (MMA, MMA_N, d/..) fp32
  Tensor acc_dv = partition_fragment_C(mma_dkv, TileKV{});                      // (MMA, MMA_N, d/..) fp32
  clear(acc_dk);
  clear(acc_dv);

  // dQ += dS K: (kBlockM, d), added to dq_accum in global memory after every Q block
  typename Traits::TiledMmadQ mma_dq;
  auto thr_dq = mma_dq.get_thread_slice(tid);
  Tensor tdQrdS = thr_dq.partition_fragment_A(sdS);                             // (MMA, MMA_M, MMA_N)
  Tensor tdQrKt = thr_dq.partition_fragment_B(sKt);                             // (MMA, d/.., MMA_N)
  auto copy_a_dq = make_tiled_copy_A(typename Traits::SmemCopyAtom{}, mma_dq);
  auto copy_b_dq = make_tiled_copy_B(typename Traits::SmemCopyAtomTransposed{}, mma_dq);
  Tensor tdQsdS = copy_a_dq.get_thread_slice(tid).partition_S(sdS);
  Tensor tdQsKt = copy_b_dq.get_thread_slice(tid).partition_S(sKt);

  constexpr int kRows = decltype(size<0>(tScS_rc))::value;
  float alibi_slope = 0.f;  // score units; only the kMods instantiation reads it
  if constexpr (kMods) { alibi_slope = alibi_slope_units(params, batch, head); }
  DropoutRng rng{};  // only the kDropout instantiation reads it
  if constexpr (kDropout) { rng = dropout_rng(params, batch, head); }

  // ---------------------------------------------------------------- MAIN LOOP over Q blocks
  CUTE_NO_UNROLL
  for (int m_block = m_min; m_block < m_max; ++m_block) {
    const int stage = m_block % kStages;
    if constexpr (kStages == 2) {
      // The other stage was last read by the previous block (the __syncthreads at the loop's end).
      if (m_block + 1 < m_max) { load_q_do(m_block + 1); }
      cp_async_fence();
    }

    // LSE (log2 domain) and D of this thread's rows (padded: +inf and 0 past seqlen_q).
    float lse_log2[kRows], delta[kRows];
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const int row = m_block * kBlockM + get<0>(tScS_rc(r, 0));
      lse_log2[r] = mLseLog2(row);
      delta[r] = mDelta(row);
    }

    cp_async_wait<kStages - 1>();  // this block's Q/dO (and K/V) landed ...
    __syncthreads();               // ... for every thread

    // S = Q K^T, masked, P = exp2(S * scale_log2 - LSE * log2 e)
    Tensor acc_s = partition_fragment_C(mma_sdp, TileS{});                      // (MMA, MMA_M, MMA_N) fp32
    Tensor acc_s_rc = make_tensor(acc_s.data(), rowcol_view(acc_s.layout()));   // (rows, cols)
    clear(acc_s);
    gemm_ss(acc_s, tSrQ, tSrK, copy_a_sdp.get_thread_slice(tid).partition_S(stage_q(stage)), tSsK, mma_sdp,
            copy_a_sdp, copy_b_sdp);
    if constexpr (kMods) {
      apply_softcap(acc_s, params);
      apply_alibi(acc_s_rc, tScS_rc, alibi_slope, m_block * kBlockM, n_block * kBlockN, vk.shift);
    }
    if (KvBlockRange<kBlockM, kBlockN>::needs_mask(vk, m_block, n_block)) {
      apply_mask(acc_s_rc, tScS_rc, vk, m_block * kBlockM, n_block * kBlockN);
    }
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      CUTE_UNROLL
      for (int c = 0; c < size<1>(acc_s_rc); ++c) {
        acc_s_rc(r, c) = exp2f(acc_s_rc(r, c) * params.scale_log2 - lse_log2[r]);
      }
    }
    if constexpr (kDropout) {  // dropped elements of P negated: P and the mask in one tile
      apply_dropout<Traits::kWarpsNSdP, true>(acc_s_rc, tScS_rc, rng, m_block * kBlockM, n_block * kBlockN);
    }

    // dP = dO V^T, dS = P (dP - D)
    Tensor acc_dp = partition_fragment_C(mma_sdp, TileS{});                     // (MMA, MMA_M, MMA_N) fp32
    Tensor acc_dp_rc = make_tensor(acc_dp.data(), rowcol_view(acc_dp.layout()));
    clear(acc_dp);
    gemm_ss(acc_dp, tdPrdO, tdPrV, copy_a_sdp.get_thread_slice(tid).partition_S(stage_do(stage)), tdPsV, mma_sdp,
            copy_a_sdp, copy_b_sdp);
    if constexpr (kDropout) {
      CUTE_UNROLL
      for (int r = 0; r < kRows; ++r) {
        CUTE_UNROLL
        for (int c = 0; c < size<1>(acc_dp_rc); ++c) {
          const float p = acc_s_rc(r, c);
          const float dp = p >= 0.f ? acc_dp_rc(r, c) * params.rp_dropout : 0.f;
          acc_dp_rc(r, c) = fabsf(p) * (dp - delta[r]);
        }
      }
    } else {
      CUTE_UNROLL
      for (int r = 0; r < kRows; ++r) {
        CUTE_UNROLL
        for (int c = 0; c < size<1>(acc_dp_rc); ++c) {
          acc_dp_rc(r, c) = acc_s_rc(r, c) * (acc_dp_rc(r, c) - delta[r]);
        }
      }
    }
    if constexpr (kMods) {
      apply_softcap_grad<kDropout>(acc_dp_rc, acc_s_rc, lse_log2, params, tScS_rc, alibi_slope, m_block * kBlockM,
                         n_block * kBlockN, vk.shift);
    }

    if constexpr (kDropout) {  // P o mask for dV (its 1 / (1 - p) is applied to dV at the end)
      CUTE_UNROLL
      for (int i = 0; i < size(acc_s); ++i) { acc_s(i) = fmaxf(acc_s(i), 0.f); }
    }
    // P and dS to shared memory: the dK/dV and dQ products read them transposed / by other warps.
    Tensor rP = convert_type<Element>(acc_s);
    Tensor rdS = convert_type<Element>(acc_dp);
    copy(store_sdp, store_sdp_thr.retile_S(rP), tPsP);
    copy(store_sdp, store_sdp_thr.retile_S(rdS), tdSsdS);
    __syncthreads();

    gemm_ss(acc_dv, tdVrPt, tdVrdOt, tdVsPt, copy_b_dkv.get_thread_slice(tid).partition_S(stage_dot(stage)), mma_dkv,
            copy_a_dkv, copy_b_dkv);                                                        // dV += P^T dO
    gemm_ss(acc_dk, tdKrdSt, tdKrQt, tdKsdSt, copy_b_dkv.get_thread_slice(tid).partition_S(stage_qt(stage)), mma_dkv,
            copy_a_dkv, copy_b_dkv);                                                        // dK += dS^T Q
    if constexpr (kStages == 1) {
      // One stage: dV and dK were the last readers of Q/dO; once every warp is past them, the next
      // block's Q/dO load into the same buffers, under the dQ product and its atomics.
      __syncthreads();
      if (m_block + 1 < m_max) { load_q_do(m_block + 1); }
      cp_async_fence();
    }

    Tensor acc_dq = partition_fragment_C(mma_dq, TileQ{});                      // (MMA, MMA_M, d/..) fp32
    clear(acc_dq);
    gemm_ss(acc_dq, tdQrdS, tdQrKt, tdQsdS, tdQsKt, mma_dq, copy_a_dq, copy_b_dq);       // dQ_j = dS K
    // Thread-major tile (dq_accum_tile); padding rows/columns take their zero or unused sums.
    float* tdQgdQ = dq_accum_tile<Traits>(dq_accum, scratch_row0, m_block) + tid;
    CUTE_UNROLL
    for (int i = 0; i < size(acc_dq); ++i) { atomicAdd(tdQgdQ + i * Traits::kNThreads, acc_dq(i)); }
    __syncthreads();  // the next Q block overwrites sP, sdS (and, two stages, the block after it this stage)
  }
  cp_async_wait<0>();  // the last fence's group is empty, but keep the count balanced

  // ---------------------------------------------------------------- EPILOGUE
  CUTE_UNROLL
  for (int i = 0; i < size(acc_dk); ++i) { acc_dk(i) *= params.softmax_scale; }
  if constexpr (kDropout) {
    CUTE_UNROLL
    for (int i = 0; i < size(acc_dv); ++i) { acc_dv(i) *= params.rp_dropout; }
  }
  Tensor rdK = convert_type<Element>(acc_dk);
  Tensor rdV = convert_type<Element>(acc_dv);
  auto store_dkv = make_tiled_copy_C(typename Traits::SmemCopyAtomStore{}, mma_dkv);
  auto store_dkv_thr = store_dkv.get_thread_slice(tid);
  copy(store_dkv, store_dkv_thr.retile_S(rdK), store_dkv_thr.partition_D(sK));  // K and V are no longer needed
  copy(store_dkv, store_dkv_thr.retile_S(rdV), store_dkv_thr.partition_D(sV));
  __syncthreads();
  Tensor tdKrdK = make_fragment_like(gmem_thr_out.partition_D(gdK));
  Tensor tdVrdV = make_fragment_like(gmem_thr_out.partition_D(gdV));
  copy(gmem_copy_out, gmem_thr_out.partition_S(sK), tdKrdK);
  copy(gmem_copy_out, gmem_thr_out.partition_S(sV), tdVrdV);
  store_tile(gmem_copy_out, tdKrdK, gmem_thr_out.partition_D(gdK), tKVcKV_out, valid_kv_rows, params.headdim);
  store_tile(gmem_copy_out, tdVrdV, gmem_thr_out.partition_D(gdV), tKVcKV_out, valid_kv_rows, params.headdim);
}

// Grid (gridDim.x, nheads, batch). Default: gridDim.x = number of K/V blocks, one each, all
// adding into one dq_accum slice. Deterministic: gridDim.x = num_dq_splits; thread block s
// handles K/V blocks s, s + num_dq_splits, ... in that order and owns dq_accum slice s, so each
// dq_accum address receives its adds from one thread in a fixed order.
// kMods: as fwd_kernel's (softcap, ALiBi, a left window edge or varlen get their own instantiation);
// kDropout (with kMods): dropout, a third one.
template <typename Traits, bool kMods, bool kDropout = false>
__global__ void __launch_bounds__(Traits::kNThreads, 1) bwd_kernel(__grid_constant__ const BwdParams params) {
  static_assert(kMods || !kDropout, "dropout rides on the feature instantiation");
  extern __shared__ __align__(128) char smem[];
  const int n_blocks = (params.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN;
  const int64_t split_stride = bwd_scratch_split_rows<kMods>(params) * params.headdim_rounded;
  float* dq_accum = params.dq_accum_ptr + (params.deterministic ? blockIdx.x * split_stride : 0);
  for (int n_block = blockIdx.x; n_block < n_blocks; n_block += gridDim.x) {
    bwd_kv_block<Traits, kMods, kDropout>(params, smem, dq_accum, n_block, blockIdx.y, blockIdx.z);
    __syncthreads();  // shared memory is reused by the next K/V block
  }
}

}  // namespace flash
