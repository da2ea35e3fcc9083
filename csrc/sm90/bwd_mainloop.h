// Consumer mainloop of the sm90 backward (bwd_traits.h has the GEMMs): one consumer warpgroup's 64
// keys against the query blocks [m_min, m_max), accumulating dK and dV in registers and handing
// each block's dQ to the dQ writer (bwd_kernel.h bwd_store_dq) through shared memory. The blocks come
// in the walk's order (bwd_walk.h: step m works on query tile walk.tile(m); below, block = step).
//
// Per query block i = m - m_min (software-pipelined by one GEMM: S^T of block i is issued at the
// end of block i - 1, behind its dK; p_and_ds then issues dP^T, computes P^T = exp2(S^T * scale_log2 -
// LSE_log2) while dP^T runs and dS^T = P^T (dP^T - D), both to Element): dV += P^T dO issued (RS),
// dS^T to sdS stage i % 2; both warpgroups meet (named barrier kDSReady); dQ = dS K (SS) and
// dK += dS^T Q (RS) issued; dV and dQ waited, the dO stage released; dQ to sdQ stage i % kDQStages once the
// writer freed it (dq_empty), then dq_full (every consumer thread arrives), all while dK runs; S^T
// of block i + 1 issued behind dK; dK waited, the Q stage released; p_and_ds of block i + 1.
// Hazards: sdS stage s is rewritten at block i + 2, after the kDSReady of block i + 1, which neither
// warpgroup reaches before its dQ GEMM of block i completed (warpgroup_wait<1>); sdQ stage s is
// rewritten at block i + kDQStages only after dq_empty says the reduce of block i read it.
// Causal: a warpgroup that sees none of block m_min's keys (first_masked) only writes zeros as its
// part of that block's dS and runs its dQ GEMM; the pipelined loop starts at m_min + 1 for it.
//
// kDropout (bwd_dropout.h): each thread's 2 Philox calls of block m + 1 go to the warpgroup's shared
// mask words before S^T of m + 1 is issued, under the dK GEMM of block m (where only dK, dV and dS^T
// are live: inside p_and_ds, with S^T and dP^T in flight, the Philox temporaries spilled); p_and_ds
// meets the warpgroup (barrier kMaskWG0 + cwg) once dP^T is done, nothing in flight, and reads its 8
// words there (read while S^T and dP^T ran, the 8 words held across the exponentials spilled 8 / 20 B,
// non-causal / causal, d = 128); then dV gets P^T o M and dS^T = P^T o (dP^T o M * rp_dropout - D)
// (rp_dropout on dV at the end, bwd_kernel.h). Hazard: the words of block m + 1 are written after
// the kDSReady of block m, which every thread reaches only after reading block m's.
#pragma once

#include <cute/tensor.hpp>
#include <cute/atom/copy_atom.hpp>
#include <cutlass/arch/barrier.h>

#include "../dropout.h"
#include "bwd_dropout.h"
#include "fwd_layouts.h"
#include "tuning_mode.h"
#include "wg_gemm.h"

namespace flash::sm90 {

using namespace cute;

// Named-barrier ids of the backward's two consumer warpgroups (cutlass adds its reserved ones);
// kPReady, kDSOwn: the role-split tile's P^T hand-over and consumer 1's own sdS (bwd_mainloop_split.h);
// kMaskWG0 + cwg: one warpgroup's dropout mask words written (kDropout only).
enum class BwdBarrier : uint32_t { kDSReady = 0, kPReady = 1, kMaskWG0 = 2, kDSOwn = 4 };

// What the kDropout mainloop reads: the call's parameters (the generator state, rp_dropout: read
// where used, from the kernel's parameter space or, under graph capture, from global memory, not
// held in registers across the loop: at 240 registers 7 more live values spilled), this CTA's
// (batch, head) and the warpgroup's BwdDropoutT::kWords mask words.
struct BwdDropoutArgs {
  const BwdParams* p = nullptr;
  int batch = 0, head = 0;
  uint32_t* smask = nullptr;
};

// Key rows k, query columns i of S^T (rowcol view) get -inf where key n0 + k is not visible to
// query m0 + i: past seqlen_k, or (causal) right of the bottom-right-aligned diagonal.
template <bool kCausal, class TensorS, class TensorC>
CUTE_DEVICE void mask_st(TensorS& s, TensorC const& tScS, int n0, int m0, int seqlen_q, int seqlen_k) {
  CUTE_UNROLL
  for (int r = 0; r < size<0>(s); ++r) {
    const int key = n0 + get<0>(tScS(r, 0));
    CUTE_UNROLL
    for (int c = 0; c < size<1>(s); ++c) {
      const int query = m0 + get<1>(tScS(r, c));
      const bool visible = key < seqlen_k && (!kCausal || key <= query + seqlen_k - seqlen_q);
      if (!visible) { s(r, c) = -INFINITY; }
    }
  }
}

// S^T -> P^T in place (rowcol view: key rows, query columns): P^T = exp2(S^T * scale_log2 - LSE_log2)
// with lse_log2 the query block's rows; masked first where keys key0 .. key0 + kKeys reach past
// seqlen_k or (causal) the block's last key n0 + kBlockN - 1 passes the bottom-right diagonal of
// query row m0. Shared by both mainloops (bwd_mainloop_split.h: key0 = n0, kKeys = kBlockN).
// lse_col(c): LSE_log2 of this thread's query column c (st_to_pt: read from the block's rows in shared
// memory, lse_log2; p_and_ds with kBwdStatsEarly: from registers loaded before the S^T wait).
// Columns [kC0, kC1) only (kC1 < 0: to the last; the mask, over all columns, with the range that starts at 0).
template <bool kCausal, int kKeys, int kBlockN, int kC0 = 0, int kC1 = -1, class TensorS, class TensorC, class LseCol>
CUTE_DEVICE void st_to_pt_cols(TensorS& s, TensorC const& tScS, LseCol const& lse_col, float scale_log2, int key0,
                               int n0, int m0, int seqlen_q, int seqlen_k) {
  if constexpr (kC0 == 0) {
    const bool need_mask = key0 + kKeys > seqlen_k || (kCausal && n0 + kBlockN - 1 > m0 + seqlen_k - seqlen_q);
    if (need_mask) { mask_st<kCausal>(s, tScS, key0, m0, seqlen_q, seqlen_k); }
  }
  constexpr int kEnd = kC1 < 0 ? int(decltype(size<1>(s))::value) : kC1;
  CUTE_UNROLL
  for (int c = kC0; c < kEnd; ++c) {
    const float l = lse_col(c);
    CUTE_UNROLL
    for (int r = 0; r < size<0>(s); ++r) { s(r, c) = exp2f(fmaf(s(r, c), scale_log2, -l)); }
  }
}
// The basic block ends after P^T's columns [0, kC1) (wg_gemm.h end_block_before_wait), on a branch on the OR
// of those P^T words: with an opaque int alone ptxas sank 13 of the 32 exp2 below the boundary. P^T >= 0, so
// the sign bit is set only by a NaN (then the membar merely runs).
template <int kC1, class TensorS>
CUTE_DEVICE void end_block_after_cols(TensorS const& s) {
  uint32_t any = 0;
  CUTE_UNROLL
  for (int c = 0; c < kC1; ++c) {
    CUTE_UNROLL
    for (int r = 0; r < size<0>(s); ++r) { any |= __float_as_uint(s(r, c)); }
  }
  end_block_before_wait(int(any));
}
template <bool kCausal, int kKeys, int kBlockN, class TensorS, class TensorC>
CUTE_DEVICE void st_to_pt(TensorS& s, TensorC const& tScS, const float* lse_log2, float scale_log2, int key0,
                          int n0, int m0, int seqlen_q, int seqlen_k) {
  st_to_pt_cols<kCausal, kKeys, kBlockN>(s, tScS, [&](int c) { return lse_log2[get<1>(tScS(0, c))]; }, scale_log2,
                                         key0, n0, m0, seqlen_q, seqlen_k);
}

// t seen through Tiler (composed mode by mode: an index map on its coordinates, same data) when kOn, else t.
template <bool kOn, class Tiler, class TensorT>
CUTE_DEVICE auto composed_if(TensorT const& t) {
  if constexpr (kOn) {
    return make_tensor(t.data(), composition(t.layout(), Tiler{}));
  } else {
    return t;
  }
}

// dQ partial sums to shared memory: st.shared.v2.f32 of the accumulator's column pairs (i, i + 1)
// (wgmma C fragments hold columns 2 (t%4) + {0, 1}: adjacent and 8-byte aligned under any K-major
// swizzle of fp32, which permutes 16-byte chunks). sdq is position-independent (the swizzle acts on
// the offset, the pointer stays a shared-memory base): the generic ST.E of the swizzled pointer
// became one STS.64 per pair.
template <class TensorR, class TensorS>
CUTE_DEVICE void store_pairs_shared(TensorR const& r, TensorS const& sdq) {
  static_assert(decltype(size(r))::value % 2 == 0, "column pairs");
  CUTE_UNROLL
  for (int j = 0; j < size(r); j += 2) {
    const uint32_t addr = cast_smem_ptr_to_uint(&sdq(j));
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(r(j)), "f"(r(j + 1)) : "memory");
  }
}

// The swapped dQ^T (kDQSwapAB) to shared memory through sdQ's transposed view: one st.shared.f32 per
// element (a C fragment's column pairs are adjacent query rows there, not adjacent words). A warp's 32
// stores of one register are 8 consecutive d columns x 4 query rows two apart: 8 distinct 16-byte
// chunks under the 128-byte fp32 swizzle, no bank conflict.
template <class TensorR, class TensorS>
CUTE_DEVICE void store_shared(TensorR const& r, TensorS const& sdq) {
  CUTE_UNROLL
  for (int j = 0; j < size(r); ++j) {
    const uint32_t addr = cast_smem_ptr_to_uint(&sdq(j));
    asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(addr), "f"(r(j)) : "memory");
  }
}

// Causal: a warpgroup none of whose keys the first query block sees skips that block's S^T, dP^T, dV
// and dK GEMMs (BwdMainloop::run, first_masked). FLASH_ATTN_CUDA_SM90_BWD_SKIP_MASKED=0 computes them
// (comparisons). Measured (H200, d = 128 causal backward, A / B / A against 0): +2.3 / +1.8 / +1.8 /
// +1.4 % at 512 / 1k / 2k / 4k; d = 64 unchanged (benchmarks/NOTES.md, "Fourteenth session").
#ifndef FLASH_ATTN_CUDA_SM90_BWD_SKIP_MASKED
#define FLASH_ATTN_CUDA_SM90_BWD_SKIP_MASKED 1
#endif
constexpr bool kBwdSkipMasked = FLASH_ATTN_CUDA_SM90_BWD_SKIP_MASKED != 0;
// The dropout variant skips it too where that measured faster (the skipping warpgroup then makes no mask
// words for that block; its words and their barrier are its own, bwd_dropout.h). Measured (H200, causal
// dropout 0.1 backward, bf16, A / B against computing the block, sixteenth session): d = 128 +3.6 / +4.0 /
// +2.0 / +3.4 % at 512 / 1k / 2k / 4k, d = 64 +1.0 / +0.5 / -1.4 / -2.1 %, so d = 128 only; d = 256 not
// measured. FLASH_ATTN_CUDA_SM90_BWD_SKIP_MASKED_DROPOUT: 2 (default) that choice, 0 never, 1 every head dim.
#ifndef FLASH_ATTN_CUDA_SM90_BWD_SKIP_MASKED_DROPOUT
#define FLASH_ATTN_CUDA_SM90_BWD_SKIP_MASKED_DROPOUT 2
#endif
constexpr bool bwd_skip_masked_dropout(int headdim) {
  return tuning_mode_on<FLASH_ATTN_CUDA_SM90_BWD_SKIP_MASKED_DROPOUT>(headdim, 128);
}

// p_and_ds' exponentials issued before its wait for dP^T (wg_gemm.h end_block_before_wait; SASS: 32 of 32 MUFU
// before it, 5 of 32 without). Measured slower (twenty-first session, H100 SXM, bf16, base / on / base in one
// call): d = 64 and 128 backward -2 .. -5 % at 1k / 4k (d = 128 4k 509 / 487 / 510 TFLOP/s), causal 1k +2 %.
// Off by default (the default build's SASS unchanged); FLASH_ATTN_CUDA_SM90_BWD_SCHEDULE_BLOCK=1 on.
#ifndef FLASH_ATTN_CUDA_SM90_BWD_SCHEDULE_BLOCK
#define FLASH_ATTN_CUDA_SM90_BWD_SCHEDULE_BLOCK 0
#endif
constexpr bool kBwdScheduleBlock = FLASH_ATTN_CUDA_SM90_BWD_SCHEDULE_BLOCK != 0;
// A partial form: FLASH_ATTN_CUDA_SM90_BWD_EXP_SPLIT=k (k > 0, without SCHEDULE_BLOCK) computes P^T's first k
// query columns of this thread (2 k exp2), ends the basic block, then the rest, which ptxas may again place
// after the dP^T wait. FA3's d = 128 causal loop has 14 of its 32 exp2 before that wait (ours: 1; all 32 with
// the block measured slower). d = 128 without dropout (BwdMainloop::kExpSplit). 8: 16 / 16 exp2 before / after
// the wait in every d = 128 kernel, 0 spills, no C751x (nvcc 13.0).
// Measured with the other backward options (twenty-fifth session, H100 SXM, d = 128 bf16, backward TFLOP/s at
// 2k / 8k / causal 2k / causal 8k, base / options / base in one call with FA3 and cuDNN, results/history/
// h100_bwdfa3opt.md): base 470.5 / 541.3 / 376.4 / 490.7 (mean of two runs); 8: 467.2 / 539.1 / 365.6 / 490.3, with
// STATS_EARLY=1 468.4 / 533.4 / 376.8 / 491.5. No gain (FA3's order is not what its 5-11 % lead comes from):
// 0 (default), the SASS unchanged.
#ifndef FLASH_ATTN_CUDA_SM90_BWD_EXP_SPLIT
#define FLASH_ATTN_CUDA_SM90_BWD_EXP_SPLIT 0
#endif
constexpr int kBwdExpSplit = FLASH_ATTN_CUDA_SM90_BWD_EXP_SPLIT;
static_assert(kBwdExpSplit == 0 || !kBwdScheduleBlock, "BWD_EXP_SPLIT is the partial form of BWD_SCHEDULE_BLOCK");

// p_and_ds' LSE and D rows read from shared memory into registers right after dP^T is issued, before the
// wait for S^T (FA3's order: its LSE loads sit among the S^T issue, its dPsum loads before the dP^T wait).
// Without it the LDS of each come after their GEMM's wait, on the path to the first exp2 / dS (the SASS
// of the d = 128 causal loop: LSE loads right after the S^T wait, D loads after the dP^T wait; twenty-fourth
// session, benchmarks/NOTES.md). size<1>(S^T) registers each held across the waits (d = 128: 16).
// FLASH_ATTN_CUDA_SM90_BWD_STATS_EARLY: 0 off (default; its SASS unchanged), 1 LSE only, 2 LSE and D; causal
// kernels only (BwdMainloop::kStatsEarly). ptxas, nvcc 13.0, d = 128: 1 causal 0 spills;
// 1 non-causal: wgmma serialised (C7512, registers); 2: 20 B (causal) / 32 B (non-causal) spilled.
// Measured (see BWD_EXP_SPLIT above, same call): 1: 470.2 / 542.2 / 374.6 / 486.5 against the base's
// 470.5 / 541.3 / 376.4 / 490.7: no gain, off.
#ifndef FLASH_ATTN_CUDA_SM90_BWD_STATS_EARLY
#define FLASH_ATTN_CUDA_SM90_BWD_STATS_EARLY 0
#endif
constexpr bool kBwdStatsEarly = FLASH_ATTN_CUDA_SM90_BWD_STATS_EARLY >= 1;       // LSE_log2
constexpr bool kBwdDeltaEarly = FLASH_ATTN_CUDA_SM90_BWD_STATS_EARLY >= 2;       // and D

template <class Traits, bool kCausal, bool kDropout = false>
struct BwdMainloop {
  using Element = typename Traits::Element;
  using Pipeline = typename Traits::Pipeline;
  using PipelineState = typename Traits::PipelineState;
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kD = Traits::kHeadDim;
  static_assert(!kDropout || (kBlockM == BwdDropoutT::kQueries && Traits::kWGKeys == BwdDropoutT::kKeys),
                "bwd_dropout.h's tile: 64 keys x 64 queries per warpgroup");
  // The masked first block skipped (run, first_masked): causal; the dropout variant where
  // bwd_skip_masked_dropout picks it (d = 128 by default).
  static constexpr bool kSkipMasked = kCausal && kBwdSkipMasked && (!kDropout || bwd_skip_masked_dropout(kD));
  // kPRounded (tiles of more than 64 query rows): P^T goes to Element as soon as it is computed and
  // dS^T = P^T (dP^T - D) takes that rounded P^T (the one dV's GEMM uses), so the fp32 P^T (kBlockM / 2
  // registers) is not live while dP^T lands. The 80 x 128 tile at d = 128 otherwise needed more than 240
  // registers there (ptxas, nvcc 13.0: 68-152 B spilled, wgmma serialised, C7512).
  // These tiles also wait for dV's GEMM before issuing dQ's, so rP and the dQ accumulators (kBlockM / 2
  // registers each) are never live together. Not at d = 64: its 128-row tile (dV, dK 32 registers each) fits
  // without (ptxas, nvcc 13.0: 0 spills, no C751x, dQ's rows permuted), and with it, it serialised its wgmma
  // once dQ's rows were permuted (C7511); its eighteenth-session measurement (-0.8 to -1.6 %) had it on.
  static constexpr bool kPRounded = kBlockM > 64 && !kDropout && kD > 64;
  // kBwdStatsEarly / kBwdDeltaEarly where they compile without spills or serialised wgmma (causal, d = 128).
  static constexpr bool kStatsEarly = kBwdStatsEarly && kCausal;
  static constexpr bool kDeltaEarly = kBwdDeltaEarly && kCausal;
  // kBwdExpSplit where it was compiled and checked (d = 128 without dropout: 16 + 16 exp2 around the wait).
  static constexpr int kExpSplit = kD == 128 && !kDropout ? kBwdExpSplit : 0;
  // Traits::kDQRowPerm (bwd_traits.h: dS^T's queries written in the order sigma^-1, dQ's rows stored by sigma)
  // where it was measured and tested: not the dropout variant (built with the feature kernels), which keeps
  // the plain order.
  static constexpr bool kRowPerm = Traits::kDQRowPerm && !kDropout;

  // Shared tiles: sQ, sdO (q, d, stage), sQt, sdOt (d, q, stage), sK, sV (keys, d), sKt (d, keys),
  // sdS (q, keys, ds_stage), sdSt (keys, q, ds_stage), sdQ (q, d, dq_stage) fp32; sLse, sDelta (q,
  // stage) fp32; dq_full / dq_empty (dq_stage) mbarriers. kDropout: drop (unused otherwise).
  // walk: steps [m_min, m_max), step m on query tile walk.tile(m) (bwd_walk.h; the stages count steps).
  template <class Smem, class TensorDK, class TensorDV, class Walk>
  CUTE_DEVICE static void run(Smem const& sm, Pipeline& pipe_q, Pipeline& pipe_do, TensorDK& tdKrdK,
                              TensorDV& tdVrdV, int cwg, int tid, int n0, Walk const& walk, int seqlen_q,
                              int seqlen_k, float scale_log2, BwdDropoutArgs const& drop = BwdDropoutArgs{}) {
    const int m_min = walk.m_min, m_max = walk.m_max;
    constexpr int kWGKeys = Traits::kWGKeys;
    constexpr int kDSStages = Traits::kDSStages, kDQStages = Traits::kDQStages;

    typename Traits::MmaSdP mma_sdp;
    typename Traits::MmaKV mma_kv;
    typename Traits::MmaDQ mma_dq;
    auto thr_sdp = mma_sdp.get_thread_slice(tid);
    auto thr_kv = mma_kv.get_thread_slice(tid);
    auto thr_dq = mma_dq.get_thread_slice(tid);

    using WGKeysD = Shape<Int<kWGKeys>, Int<kD>>;
    Tensor tSrK = thr_sdp.partition_fragment_A(local_tile(sm.k, WGKeysD{}, make_coord(cwg, _0{})));   // (MMA, 1, d/16)
    Tensor tdPrV = thr_sdp.partition_fragment_A(local_tile(sm.v, WGKeysD{}, make_coord(cwg, _0{})));
    Tensor tSrQ = thr_sdp.partition_fragment_B(sm.q);      // (MMA, 1, d/16, stages)
    Tensor tdPrdO = thr_sdp.partition_fragment_B(sm.dout);
    Tensor tdKrQt = thr_kv.partition_fragment_B(sm.qt);    // (MMA, 1, kBlockM/16, stages)
    Tensor tdVrdOt = thr_kv.partition_fragment_B(sm.dot);

    // dQ part of this warpgroup: rows [r0, r0 + kDQRows), columns [c0, c0 + kDQCols) of the tile; K^T's
    // columns of it are B of dQ = dS K, or A of the swapped dQ^T = K^T dS^T.
    const int dq_row_blk = Traits::kDQSplitRows ? cwg : 0, dq_col_blk = Traits::kDQSplitRows ? 0 : cwg;
    auto sKt_dq = local_tile(sm.kt, Shape<Int<Traits::kDQCols>, Int<kBlockN>>{}, make_coord(dq_col_blk, _0{}));
    Tensor tdQrKt = [&] {
      if constexpr (Traits::kDQSwapAB) {
        return thr_dq.partition_fragment_A(sKt_dq);  // (MMA, 1, kBlockN/16)
      } else {
        return thr_dq.partition_fragment_B(sKt_dq);
      }
    }();

    using TileS = decltype(select<0, 1>(typename Traits::TileSdP{}));
    Tensor tSrS = partition_fragment_C(mma_sdp, TileS{});    // ((2,2,kBlockM/8),1,1) fp32: S^T, then P^T
    Tensor tdPrdP = partition_fragment_C(mma_sdp, TileS{});  // dP^T, then dS^T
    Tensor rP = make_tensor<Element>(tSrS.layout());
    Tensor rdS = make_tensor<Element>(tSrS.layout());
    Tensor tdVrP = make_tensor(rP.data(), acc_as_a_operand(rP.layout()));     // ((2,2,2),1,kBlockM/16)
    Tensor tdKrdS = make_tensor(rdS.data(), acc_as_a_operand(rdS.layout()));
    // kPRounded tiles: dQ^T's accumulators are S^T's registers (dead from P^T's conversion to the next
    // S^T, which is issued after dQ went to sdQ); same fragment shape (64 x kBlockM).
    Tensor tdQrdQ = [&] {
      if constexpr (kPRounded) {
        auto tdQ_layout = partition_fragment_C(mma_dq, select<0, 1>(typename Traits::TileDQ{})).layout();
        static_assert(decltype(size(tdQ_layout))::value <= decltype(size(tSrS))::value);
        return make_tensor(tSrS.data(), tdQ_layout);
      } else {
        return partition_fragment_C(mma_dq, select<0, 1>(typename Traits::TileDQ{}));
      }
    }();

    Tensor s = make_tensor(tSrS.data(), acc_rowcol(tSrS.layout()));  // (keys, q) views
    Tensor dp = make_tensor(tdPrdP.data(), acc_rowcol(tdPrdP.layout()));
    Tensor p_rounded = make_tensor(rP.data(), acc_rowcol(rP.layout()));  // kPRounded: P^T in Element
    Tensor tScS = thr_sdp.partition_C(make_identity_tensor(TileS{}));
    Tensor tScS_rc = make_tensor(tScS.data(), acc_rowcol(tScS.layout()));
    const int key0 = n0 + kWGKeys * cwg;

    // dS^T (keys, q) from registers with stmatrix.trans (keys contiguous in sdS: the transposed
    // 8 x 8 store, as FA3 does for its swapAB dS); position-independent views (the swizzle on the
    // offset) so every store is shared-space (STSM / STS, not generic ST.E).
    auto r2s_ds = make_tiled_copy_C(Copy_Atom<SM90_U16x8_STSM_T, Element>{}, mma_sdp);
    auto r2s_thr_ds = r2s_ds.get_thread_slice(tid);
    Tensor tdSrdS = r2s_thr_ds.retile_S(rdS);                               // ((8, 1), MMA_M, MMA_N)
    Tensor sdSt_pi = as_position_independent_swizzle_tensor(sm.dst);        // (keys, q, ds_stage)
    Tensor sdQ_pi = as_position_independent_swizzle_tensor(sm.dq);          // (q, d, dq_stage) fp32
    Tensor sdQt_pi = as_position_independent_swizzle_tensor(sm.dqt);        // (d, q, dq_stage) fp32
    // The views the consumers store through (kRowPerm): dS^T's query q at sdS row sigma^-1(q), and dQ's wgmma
    // row p at sdQ row sigma(p); without it, sdS and sdQ themselves.
    Tensor sdSt_w = composed_if<kRowPerm, typename Traits::DStWriteTiler>(sdSt_pi);  // (keys, q, ds_stage)
    Tensor sdQ_w = composed_if<kRowPerm, typename Traits::DQStoreTiler>(sdQ_pi);     // (q, d, dq_stage) fp32

    // Step m (query tile walk.tile(m)) up to its GEMM operands, once S^T of it has been issued: dP^T
    // issued, P^T = exp2(S^T * scale_log2 - LSE_log2) while dP^T runs, dS^T = P^T (dP^T - D), both to
    // Element (rP, rdS).
    // Nothing is left in flight: every wgmma batch is retired inside the iteration that issued it
    // (ptxas serialises wgmma whose accumulators stay in flight across a loop back-edge, C7514), and
    // only rP, rdS (16 registers each) cross it, not the fp32 P^T, dS^T.
    auto p_and_ds = [&](int m, PipelineState const& sq, PipelineState const& sdo) {
      pipe_do.consumer_wait(sdo);
      wg_gemm<true>(mma_sdp, tdPrV, tdPrdO(_, _, _, sdo.index()), tdPrdP);
      const int m0 = walk.tile(m) * kBlockM;
      constexpr int kCols = decltype(size<1>(s))::value;  // this thread's query columns of S^T
      const float* lse_s = sm.lse_log2 + sq.index() * kBlockM;  // (kBlockM,) of this step
      const float* delta = sm.delta + sdo.index() * kBlockM;    // (kBlockM,)
      [[maybe_unused]] float lse_r[kCols], delta_r[kCols];  // kStatsEarly: LSE_log2, D of those columns
      if constexpr (kStatsEarly) {  // Q's and dO's stages have landed (their waits came before the issues)
        CUTE_UNROLL
        for (int c = 0; c < kCols; ++c) {
          lse_r[c] = lse_s[get<1>(tScS_rc(0, c))];
          if constexpr (kDeltaEarly) { delta_r[c] = delta[get<1>(tScS_rc(0, c))]; }
        }
      }
      warpgroup_wait<1>();                        // S^T done (in flight: dP^T)
      warpgroup_fence_operand(tSrS);
      const auto lse_col = [&](int c) { return kStatsEarly ? lse_r[c] : lse_s[get<1>(tScS_rc(0, c))]; };
      if constexpr (kExpSplit > 0) {  // columns [0, k), the block's end, columns [k, kCols)
        static_assert(kExpSplit < kCols, "BWD_EXP_SPLIT: fewer columns than the thread has");
        st_to_pt_cols<kCausal, kWGKeys, kBlockN, 0, kExpSplit>(s, tScS_rc, lse_col, scale_log2, key0, n0, m0,
                                                                  seqlen_q, seqlen_k);
        end_block_after_cols<kExpSplit>(s);
        st_to_pt_cols<kCausal, kWGKeys, kBlockN, kExpSplit>(s, tScS_rc, lse_col, scale_log2, key0, n0, m0,
                                                               seqlen_q, seqlen_k);
      } else {
        st_to_pt_cols<kCausal, kWGKeys, kBlockN>(s, tScS_rc, lse_col, scale_log2, key0, n0, m0, seqlen_q, seqlen_k);
      }
      if constexpr (kPRounded) {                  // P^T's fp32 registers free before dP^T lands
        CUTE_UNROLL
        for (int j = 0; j < size(tSrS); ++j) { rP(j) = Element(tSrS(j)); }
      }
      if constexpr (kBwdScheduleBlock) { end_block_after_cols<kCols>(s); }  // every P^T before the dP^T wait
      warpgroup_wait<0>();
      warpgroup_fence_operand(tdPrdP);
      [[maybe_unused]] uint32_t flags[BwdDropoutT::kWordsPerThread];  // kDropout: this thread's keep bits (bwd_dropout.h)
      if constexpr (kDropout) {  // the warpgroup's words of block m written (mask_words); nothing in flight
        cutlass::arch::NamedBarrier::sync(BwdDropoutT::kThreads, uint32_t(BwdBarrier::kMaskWG0) + cwg);
        BwdDropoutT::read(flags, drop.smask, tid);
      }
      CUTE_UNROLL
      for (int c = 0; c < size<1>(dp); ++c) {
        float dd;
        if constexpr (kDeltaEarly) {
          dd = delta_r[c];
        } else {
          dd = delta[get<1>(tScS_rc(0, c))];
        }
        CUTE_UNROLL
        for (int r = 0; r < size<0>(dp); ++r) {
          if constexpr (kDropout) {  // dropped: dS = -P D and P^T o M = 0
            const uint32_t dropped = BwdDropoutT::drop_mask(flags, r, c);
            const float dp_kept = __uint_as_float(__float_as_uint(dp(r, c)) & ~dropped);
            dp(r, c) = s(r, c) * fmaf(dp_kept, drop.p->rp_dropout, -dd);
            s(r, c) = __uint_as_float(__float_as_uint(s(r, c)) & ~dropped);
          } else if constexpr (kPRounded) {
            dp(r, c) = float(p_rounded(r, c)) * (dp(r, c) - dd);
          } else {
            dp(r, c) = s(r, c) * (dp(r, c) - dd);
          }
        }
      }
      if constexpr (!kPRounded) {
        CUTE_UNROLL
        for (int j = 0; j < size(tSrS); ++j) { rP(j) = Element(tSrS(j)); }
      }
      CUTE_UNROLL
      for (int j = 0; j < size(tdPrdP); ++j) { rdS(j) = Element(tdPrdP(j)); }
    };

    // kDropout: this thread's word of step m's keep mask (bwd_dropout.h), read by p_and_ds(m).
    auto mask_words = [&](int m) {
      if constexpr (kDropout) {
        drop.smask[tid] = BwdDropoutT::make_word(dropout_rng(*drop.p, drop.batch, drop.head), tid, key0,
                                                 walk.tile(m) * kBlockM);
      }
    };

    // dS^T of block i (rdS) to this warpgroup's keys of sdS stage i % kDSStages; both warpgroups meet
    // (each one's dQ GEMM reads every key of the stage).
    auto share_ds = [&](int i) {
      Tensor tdSsdSt = r2s_thr_ds.partition_D(local_tile(sdSt_w(_, _, i % kDSStages),
                                                         Shape<Int<kWGKeys>, Int<kBlockM>>{},
                                                         make_coord(cwg, _0{})));  // this WG's dS^T
      copy(r2s_ds, tdSrdS, tdSsdSt);
      cutlass::arch::fence_view_async_shared();   // wgmma (async proxy) reads what st.shared wrote
      if constexpr (kSkipMasked) {
        // The two warpgroups can meet here from different code (first_masked: one from the masked
        // block, the other from the loop): barrier.sync, not bar.sync (.aligned: every warp the same
        // instruction; compute-sanitizer synccheck flags the aligned form as divergent).
        cutlass::arch::NamedBarrier(Traits::kNConsumerThreads, uint32_t(BwdBarrier::kDSReady))
            .arrive_and_wait_unaligned();
      } else {
        cutlass::arch::NamedBarrier::arrive_and_wait(Traits::kNConsumerThreads, uint32_t(BwdBarrier::kDSReady));
      }
    };
    auto issue_dq = [&](int i) {                  // dQ = dS K of block i (every key of sdS stage i % kDSStages)
      if constexpr (Traits::kDQSwapAB) {          // dQ^T = K^T dS^T
        Tensor tdQrdS = thr_dq.partition_fragment_B(sm.ds(_, _, i % kDSStages));  // (MMA, 1, kBlockN/16)
        wg_gemm<true>(mma_dq, tdQrKt, tdQrdS, tdQrdQ);
      } else {
        Tensor tdQrdS = thr_dq.partition_fragment_A(local_tile(
            sm.ds(_, _, i % kDSStages), Shape<Int<Traits::kDQRows>, Int<kBlockN>>{}, make_coord(dq_row_blk, _0{})));
        wg_gemm<true>(mma_dq, tdQrdS, tdQrKt, tdQrdQ);
      }
    };
    // dQ of block i (its GEMM waited) to sdQ stage i % kDQStages once the writer freed it, then dq_full.
    // Stage s was last filled at block i - kDQStages: its (i / kDQStages - 1)-th hand-back (parity 1 on
    // the fresh barrier passes at once for the first kDQStages blocks).
    auto hand_dq = [&](int i) {
      const int dq_stage = i % kDQStages;
      cutlass::arch::ClusterBarrier::wait(sm.dq_empty + dq_stage, ((i / kDQStages) & 1) ^ 1);
      if constexpr (Traits::kDQSwapAB) {
        Tensor tdQsdQt = thr_dq.partition_C(local_tile(sdQt_pi(_, _, dq_stage),
                                                       Shape<Int<Traits::kDQCols>, Int<kBlockM>>{},
                                                       make_coord(dq_col_blk, _0{})));
        store_shared(tdQrdQ, tdQsdQt);
      } else {
        Tensor tdQsdQ = thr_dq.partition_C(local_tile(sdQ_w(_, _, dq_stage),
                                                      Shape<Int<Traits::kDQRows>, Int<Traits::kDQCols>>{},
                                                      make_coord(dq_row_blk, dq_col_blk)));
        store_pairs_shared(tdQrdQ, tdQsdQ);
      }
      cutlass::arch::fence_view_async_shared();   // the TMA reads what st.shared wrote
      if constexpr (Traits::kDQWarpArrive) {           // the warp's fenced stores ordered before one arrival
        __syncwarp();
        if (cute::elect_one_sync()) { cutlass::arch::ClusterBarrier::arrive(sm.dq_full + dq_stage); }
      } else {
        cutlass::arch::ClusterBarrier::arrive(sm.dq_full + dq_stage);
      }
    };
    // Causal: the first query block can see none of this warpgroup's 64 keys. With first = n0 - (seqlen_k -
    // seqlen_q), the first query that sees key n0 (q_block_range): consumer 1 (keys n0 + 64 ..) when m_min
    // kBlockM + kBlockM - 1 < first + 64, i.e. whenever first >= 0 with 64-row tiles, and with 128-row tiles (d =
    // 64's option) when first lies in the upper half of block m_min; consumer 0 never (it would need first >
    // m_min kBlockM + kBlockM - 1). There P^T = dS^T = 0: no S^T, dP^T, dV or dK GEMM, only zeros in its keys of
    // sdS for the dQ GEMM, which still runs (the other warpgroup's keys), and the block's Q and dO stages waited
    // and released as usual. Only block m_min can be so: the first query that sees key0, first + 64, is at the
    // latest in block m_min + 1. At 512 / 1k causal (128 keys, 64-query blocks) this is 4 of 40 / 8 of 144
    // warpgroup steps. The pipelined loop below then starts at m_min + 1 (its stages count from m_min).
    const bool first_masked =
        kSkipMasked && key0 > walk.tile(m_min) * kBlockM + kBlockM - 1 + seqlen_k - seqlen_q;
    PipelineState st_q, st_do;
    if (first_masked) {
      pipe_q.consumer_wait(st_q);
      pipe_do.consumer_wait(st_do);
      CUTE_UNROLL
      for (int j = 0; j < size(rdS); ++j) { rdS(j) = Element(0.f); }
      share_ds(0);
      issue_dq(0);
      warpgroup_wait<0>();
      warpgroup_fence_operand(tdQrdQ);
      pipe_do.consumer_release(st_do);
      ++st_do;
      pipe_q.consumer_release(st_q);
      ++st_q;
      hand_dq(0);
    }
    const int m_first = m_min + (first_masked ? 1 : 0);

    // Software-pipelined by one GEMM: S^T of block m + 1 is issued at the end of block m, behind its
    // dK GEMM, and its P^T, dS^T computed there; the first block's before the loop (the caller runs
    // this only when m_min < m_max).
    // Other orders measured slower (twenty-sixth session, H100 SXM, d = 128 bf16 backward at 2k / 8k / causal
    // 2k / causal 8k against base runs in the same calls, results/history/h100_bwd26.md, removed):
    // dV issued right after P^T's conversion (under dS^T's math) and waited before the dS barrier:
    // -10 / -11 / -7 / -9 %; S^T(m + 1) issued ahead of dQ(m) and dK(m), P^T(m + 1) under them, dP^T and dV
    // issued together: -5 / -6 / -1.5 / -5 %; dQ handed over after the S^T(m + 1) issue: -3 / -2 / -1 / -3 %.
    // Correct all (62 tests, the sanitizers on the second). What they share: the default issues dV, dQ and
    // dK back to back right after the dS barrier, and each of them split that burst.
    if (m_first < m_max) {
      mask_words(m_first);
      pipe_q.consumer_wait(st_q);
      wg_gemm<true>(mma_sdp, tSrK, tSrQ(_, _, _, st_q.index()), tSrS);
      p_and_ds(m_first, st_q, st_do);
    }
    for (int m = m_first; m < m_max; ++m) {
      const int i = m - m_min;
      // dV before the dS^T stores. Measured against it (thirtieth session, H100, d = 128 bf16 backward,
      // results/history/h100_stsmcover30.md): dV between the stores and their fence (FA3's order) -6.4 to +3.9 %,
      // dK there with dQ last -11.1 to +2.0 %; both options removed.
      wg_gemm<false>(mma_kv, tdVrP, tdVrdOt(_, _, _, st_do.index()), tdVrdV);
      share_ds(i);
      if constexpr (kPRounded) {                  // dV done (rP free) before dQ's accumulators are live
        warpgroup_wait<0>();
        warpgroup_fence_operand(tdVrdV);
      }
      issue_dq(i);
      // dK last: its GEMM runs while this warpgroup hands dQ to the writer (FA3's order).
      wg_gemm<false>(mma_kv, tdKrdS, tdKrQt(_, _, _, st_q.index()), tdKrdK);
      warpgroup_wait<1>();                        // dV, dQ done (batches complete in order)
      warpgroup_fence_operand(tdVrdV);
      warpgroup_fence_operand(tdQrdQ);
      pipe_do.consumer_release(st_do);            // dP^T and dV have read dO
      ++st_do;
      hand_dq(i);
      if (m + 1 < m_max) {
        mask_words(m + 1);                        // under dK, before S^T adds 32 live registers
        // S^T of the next block into tSrS (dead since rP), queued behind dK.
        PipelineState st_q_next = st_q;
        ++st_q_next;
        pipe_q.consumer_wait(st_q_next);
        wg_gemm<true>(mma_sdp, tSrK, tSrQ(_, _, _, st_q_next.index()), tSrS);
        warpgroup_wait<1>();                      // dK done (in flight: the next S^T)
        warpgroup_fence_operand(tdKrdK);
        pipe_q.consumer_release(st_q);            // S^T and dK have read Q
        ++st_q;
        p_and_ds(m + 1, st_q, st_do);
      } else {
        warpgroup_wait<0>();                      // dK done
        warpgroup_fence_operand(tdKrdK);
        pipe_q.consumer_release(st_q);
        ++st_q;
      }
    }
  }
};

}  // namespace flash::sm90
