// Consumer mainloop of the sm90 backward's role-split tile (bwd_traits_split.h has the GEMMs and the
// budgets): consumer 0 computes S^T, P^T and dV, consumer 1 dP^T, dS^T and dK, each half of dQ, for
// the CTA's 64 keys against the query blocks [m_min, m_max). Per block m (Q and dO stage s):
//   consumer 0: S^T issued, waited; Q released; mask, P^T; P^T fp32 to sP; arrive kPReady; P^T bf16;
//               dV += P^T dO issued; sync kDSReady; dQ half 0 issued; dV, dQ waited; dO released;
//               dQ half 0 added to dq_accum (red_dq: red.global.add.v4.f32, whole lines).
//   consumer 1: dP^T issued, waited; sync kPReady; P^T from sP, dS^T = P^T (dP^T - D); dO released;
//               dS^T bf16 to sdS; fence; arrive kDSReady, sync kDSOwn (this warpgroup); dK += dS^T Q
//               and dQ half 1 issued, waited;
//               Q released; dQ half 1 added to dq_accum.
// Hazards (one sP and one sdS buffer): consumer 0 writes sP of block m + 1 after kDSReady of block m,
// which consumer 1 reaches only after reading sP of block m. Consumer 1 writes sdS of block m + 1
// after kPReady of block m + 1, which consumer 0 arrives at only after its dQ GEMM of block m
// completed (it waits on it in block m), and after its own dQ, dK GEMMs of block m completed. The
// named barriers cannot run ahead a generation: consumer 0 arrives at kPReady of block m + 1 only
// after kDSReady of block m, which needs consumer 1 past kPReady of block m; consumer 1 arrives at
// kDSReady of block m + 1 only after kPReady of block m + 1, which needs consumer 0 past kDSReady of
// block m.
//
// kDropout (bwd_dropout.h, "role-split tile"): consumer 0 makes its thread's 8 flag words of block m's
// mask in registers (BwdDropoutT::make_flags: 8 Philox calls and 4 shuffles) right after issuing S^T,
// while the GEMM runs (live then: dV 128 registers and the in-flight S^T 32, not the dQ half), marks
// the dropped elements of P^T by their sign before the sP store and feeds dV with P^T o M (the
// 1 / (1 - p) on dV at the store, bwd_kernel.h). Consumer 1 makes no Philox call: dS^T =
// P^T o (dP^T o M / (1 - p) - D) from the marked P^T it reads anyway. No shared memory and no barrier
// beyond the plain tile's.
#pragma once

#include <cute/tensor.hpp>
#include <cute/atom/copy_atom.hpp>
#include <cutlass/arch/barrier.h>

#include "../dropout.h"
#include "acc_lines.h"
#include "bwd_dropout.h"
#include "bwd_mainloop.h"  // st_to_pt, BwdBarrier, BwdDropoutArgs
#include "fwd_layouts.h"
#include "wg_gemm.h"

namespace flash::sm90 {

using namespace cute;

// How one consumer's dQ part reaches dq_accum (red_dq). atomicAdd on float2 / float4 with the result
// unused: SASS REDG.E.ADD.F32x2 / F32x4. Each request of a warp touches 8 rows of dq_accum (pairs,
// quads) or 4 (lines); per row it carries:
//   0 "pairs": the accumulator's own column pairs, red.global.add.v2.f32: 32 B (one sector);
//   1 "quads": lanes t, t ^ 1 swap one pair of two neighbouring 8-column blocks (shfl.xor 1),
//      red.global.add.v4.f32: 64 B (two sectors), half the requests;
//   2 "lines": then lanes t, t ^ 4 (rows r, r + 1) swap one quad of two neighbouring 16-column
//      pieces (shfl.xor 4): each request covers 4 rows x 128 B, whole L2 lines, as a TMA reduce does.
// Nsight Compute (H200, d = 256, 4 x 4k, bf16; benchmarks/NOTES.md "Twelfth session"): with pairs the
// kernel was L2-bound (lts throughput 88 %, tag requests 70 %: 268 M one-sector reduce requests)
// while the tensor pipe was active 34 % of the time.
#ifndef FLASH_ATTN_CUDA_SM90_DQ_RED
#define FLASH_ATTN_CUDA_SM90_DQ_RED 2
#endif
constexpr int kDqRedForm = FLASH_ATTN_CUDA_SM90_DQ_RED;
static_assert(kDqRedForm >= 0 && kDqRedForm <= 2, "FLASH_ATTN_CUDA_SM90_DQ_RED: 0 pairs, 1 quads, 2 lines");

// One consumer's dQ part (kDQRows x kDQCols, columns from col0) added into the row-major fp32
// dq_accum rows of this (batch, head) from query row m0, in the form kDqRedForm (above; acc_lines.h
// has the accumulator layout and the exchanges). Addresses are the thread's first element plus
// compile-time offsets: with a per-element 64-bit address ptxas hoisted all 32 of them out of the
// query loop and spilled (168 B). Rows < seqlen_q_rounded (bwd_supports: a multiple of 128); column
// offsets are multiples of 2 (pairs) or 4 floats (quads, lines): 8- / 16-byte aligned (rows of kD floats).
template <class Traits, class TensorR>
CUTE_DEVICE void red_dq(TensorR const& acc, float* dq_rows, int m0, int col0, int tid) {
  constexpr int kD = Traits::kHeadDim;
  typename Traits::MmaDQ mma_dq;
  auto thr = mma_dq.get_thread_slice(tid);
  Tensor coords = thr.partition_C(make_identity_tensor(select<0, 1>(typename Traits::TileDQ{})));
  Tensor rc = make_tensor(acc.data(), acc_rowcol(acc.layout()));  // (rows (2, 1), cols (2, kDQCols/8, 1))
  constexpr int kCols = decltype(size<1>(rc))::value;             // 2 per 8-column block
  static_assert(decltype(size<0>(rc))::value == 2 && kCols == Traits::kDQCols / 4,
                "one 64-row wgmma accumulator: rows {r, r + 8}, column pairs every 8");
  const int lane = tid % 32;
  const int row = m0 + get<0>(coords(0));  // 16 w + lane / 4 within the tile
  if constexpr (kDqRedForm == 0) {
    float* base = dq_rows + int64_t(row) * kD + col0 + get<1>(coords(0));
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) {
      CUTE_UNROLL
      for (int j = 0; j < kCols / 2; ++j) {
        atomicAdd(reinterpret_cast<float2*>(base + 8 * r * kD + 8 * j), make_float2(rc(r, 2 * j), rc(r, 2 * j + 1)));
      }
    }
  } else if constexpr (kDqRedForm == 1) {
    float* base = dq_rows + int64_t(row) * kD + col0 + quad_col(lane);
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) {
      CUTE_UNROLL
      for (int p = 0; p < kCols / 4; ++p) {
        atomicAdd(reinterpret_cast<float4*>(base + 8 * r * kD + 16 * p), acc_quad(rc, r, p, lane));
      }
    }
  } else {
    float* base = dq_rows + int64_t(row - line_row_back(lane)) * kD + col0 + line_col0(lane);
    for_each_line_quad(acc, lane, [&](int dr, int dc, float4 v) {
      atomicAdd(reinterpret_cast<float4*>(base + dr * kD + dc), v);
    });
  }
}

template <class Traits, bool kCausal, bool kDropout = false>
struct BwdMainloopSplit {
  using Element = typename Traits::Element;
  using Pipeline = typename Traits::Pipeline;
  using PipelineState = typename Traits::PipelineState;
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kD = Traits::kHeadDim;
  static constexpr uint32_t kBoth = Traits::kNConsumerThreads;
  static_assert(!kDropout || (kBlockM == BwdDropoutT::kQueries && kBlockN == BwdDropoutT::kKeys),
                "bwd_dropout.h's tile: 64 keys x 64 queries");

  // dQ half `cwg` of block m: dS (sdS) times K^T columns [cwg kDQCols, ...), zero-initialised, issued.
  template <class Smem, class TensorDQ>
  CUTE_DEVICE static void issue_dq(Smem const& sm, TensorDQ& tdQrdQ, int cwg, int tid) {
    typename Traits::MmaDQ mma_dq;
    auto thr_dq = mma_dq.get_thread_slice(tid);
    Tensor tdQrdS = thr_dq.partition_fragment_A(sm.ds);  // (MMA, 1, kBlockN/16)
    Tensor tdQrKt = thr_dq.partition_fragment_B(
        local_tile(sm.kt, Shape<Int<Traits::kDQCols>, Int<kBlockN>>{}, make_coord(cwg, _0{})));
    wg_gemm<true>(mma_dq, tdQrdS, tdQrKt, tdQrdQ);
  }

  // Consumer 0: S^T, P^T (to sP for consumer 1), dV += P^T dO, dQ half 0. tdVrdV: (64 keys, d) fp32.
  // Shared tiles as in bwd_mainloop.h; sp: (kPValues / 4 x 128) float4; dq_rows: dq_accum rows;
  // kDropout: drop (the generator state; smask unused).
  template <class Smem, class TensorDV>
  CUTE_DEVICE static void run_p_dv(Smem const& sm, Pipeline& pipe_q, Pipeline& pipe_do, TensorDV& tdVrdV,
                                   int tid, int n0, int m_min, int m_max, int seqlen_q, int seqlen_k,
                                   float scale_log2, float* dq_rows, BwdDropoutArgs const& drop = BwdDropoutArgs{}) {
    typename Traits::MmaSdP mma_sdp;
    typename Traits::MmaKV mma_kv;
    auto thr_sdp = mma_sdp.get_thread_slice(tid);
    auto thr_kv = mma_kv.get_thread_slice(tid);
    Tensor tSrK = thr_sdp.partition_fragment_A(sm.k);      // (MMA, 1, d/16)
    Tensor tSrQ = thr_sdp.partition_fragment_B(sm.q);      // (MMA, 1, d/16, stages)
    Tensor tdVrdOt = thr_kv.partition_fragment_B(sm.dot);  // (MMA, 1, kBlockM/16, stages)
    using TileS = decltype(select<0, 1>(typename Traits::TileSdP{}));
    Tensor tSrS = partition_fragment_C(mma_sdp, TileS{});  // ((2,2,kBlockM/8),1,1) fp32: S^T, then P^T
    Tensor rP = make_tensor<Element>(tSrS.layout());
    Tensor tdVrP = make_tensor(rP.data(), acc_as_a_operand(rP.layout()));
    Tensor tdQrdQ = partition_fragment_C(typename Traits::MmaDQ{}, select<0, 1>(typename Traits::TileDQ{}));
    Tensor s = make_tensor(tSrS.data(), acc_rowcol(tSrS.layout()));  // (keys, q)
    Tensor tScS = thr_sdp.partition_C(make_identity_tensor(TileS{}));
    Tensor tScS_rc = make_tensor(tScS.data(), acc_rowcol(tScS.layout()));
    float4* sp = reinterpret_cast<float4*>(sm.p);
    static_assert(decltype(size(tSrS))::value == Traits::kPValues);

    PipelineState st_q, st_do;
#pragma unroll 1
    for (int m = m_min; m < m_max; ++m) {
      const int m0 = m * kBlockM;
      pipe_q.consumer_wait(st_q);
      wg_gemm<true>(mma_sdp, tSrK, tSrQ(_, _, _, st_q.index()), tSrS);
      uint32_t flags[BwdDropoutT::kWordsPerThread];
      if constexpr (kDropout) {  // this thread's flags of block m's mask, while S^T runs
        BwdDropoutT::make_flags(flags, dropout_rng(*drop.p, drop.batch, drop.head), tid, n0, m0);
      }
      warpgroup_wait<0>();
      warpgroup_fence_operand(tSrS);
      st_to_pt<kCausal, kBlockN, kBlockN>(s, tScS_rc, sm.lse_log2 + st_q.index() * kBlockM, scale_log2, n0, n0, m0,
                                          seqlen_q, seqlen_k);
      pipe_q.consumer_release(st_q);  // S^T and the LSE rows were this warpgroup's reads of the Q stage
      ++st_q;
      if constexpr (kDropout) {  // the dropped elements' sign set
        CUTE_UNROLL
        for (int c = 0; c < size<1>(s); ++c) {
          CUTE_UNROLL
          for (int r = 0; r < size<0>(s); ++r) {
            s(r, c) = BwdDropoutSplit::mark(s(r, c), BwdDropoutT::drop_mask(flags, r, c));
          }
        }
      }
      Traits::store_p(sp, tSrS, tid);
      cutlass::arch::NamedBarrier::arrive(kBoth, uint32_t(BwdBarrier::kPReady));
      if constexpr (kDropout) {
        CUTE_UNROLL
        for (int j = 0; j < size(tSrS); ++j) { rP(j) = Element(BwdDropoutSplit::kept_p(tSrS(j))); }  // P^T o M
      } else {
        CUTE_UNROLL
        for (int j = 0; j < size(tSrS); ++j) { rP(j) = Element(tSrS(j)); }
      }
      pipe_do.consumer_wait(st_do);
      wg_gemm<false>(mma_kv, tdVrP, tdVrdOt(_, _, _, st_do.index()), tdVrdV);
      cutlass::arch::NamedBarrier::arrive_and_wait(kBoth, uint32_t(BwdBarrier::kDSReady));
      issue_dq(sm, tdQrdQ, 0, tid);
      warpgroup_wait<0>();
      warpgroup_fence_operand(tdVrdV);
      warpgroup_fence_operand(tdQrdQ);
      pipe_do.consumer_release(st_do);  // dV has read dO
      ++st_do;
      red_dq<Traits>(tdQrdQ, dq_rows, m0, 0, tid);
    }
  }

  // Consumer 1: dP^T, dS^T (P^T from sP; to sdS), dK += dS^T Q, dQ half 1. tdKrdK: (64 keys, d) fp32.
  // kDropout: the dropped elements of sP's P^T carry their sign (run_p_dv); drop.p: rp_dropout.
  template <class Smem, class TensorDK>
  CUTE_DEVICE static void run_ds_dk(Smem const& sm, Pipeline& pipe_q, Pipeline& pipe_do, TensorDK& tdKrdK,
                                    int tid, int m_min, int m_max, float* dq_rows,
                                    BwdDropoutArgs const& drop = BwdDropoutArgs{}) {
    typename Traits::MmaSdP mma_sdp;
    typename Traits::MmaKV mma_kv;
    auto thr_sdp = mma_sdp.get_thread_slice(tid);
    auto thr_kv = mma_kv.get_thread_slice(tid);
    Tensor tdPrV = thr_sdp.partition_fragment_A(sm.v);        // (MMA, 1, d/16)
    Tensor tdPrdO = thr_sdp.partition_fragment_B(sm.dout);    // (MMA, 1, d/16, stages)
    Tensor tdKrQt = thr_kv.partition_fragment_B(sm.qt);       // (MMA, 1, kBlockM/16, stages)
    using TileS = decltype(select<0, 1>(typename Traits::TileSdP{}));
    Tensor tdPrdP = partition_fragment_C(mma_sdp, TileS{});   // dP^T, then dS^T
    Tensor tPrP = make_tensor<float>(tdPrdP.layout());        // P^T from consumer 0
    Tensor rdS = make_tensor<Element>(tdPrdP.layout());
    Tensor tdKrdS = make_tensor(rdS.data(), acc_as_a_operand(rdS.layout()));
    Tensor tdQrdQ = partition_fragment_C(typename Traits::MmaDQ{}, select<0, 1>(typename Traits::TileDQ{}));
    Tensor dp = make_tensor(tdPrdP.data(), acc_rowcol(tdPrdP.layout()));  // (keys, q)
    Tensor p = make_tensor(tPrP.data(), acc_rowcol(tPrP.layout()));
    Tensor tScS = thr_sdp.partition_C(make_identity_tensor(TileS{}));
    Tensor tScS_rc = make_tensor(tScS.data(), acc_rowcol(tScS.layout()));
    const float4* sp = reinterpret_cast<const float4*>(sm.p);
    // dS^T (keys, q) out with stmatrix.trans (keys contiguous in sdS), shared-space stores.
    auto r2s_ds = make_tiled_copy_C(Copy_Atom<SM90_U16x8_STSM_T, Element>{}, mma_sdp);
    auto r2s_thr_ds = r2s_ds.get_thread_slice(tid);
    Tensor tdSrdS = r2s_thr_ds.retile_S(rdS);
    Tensor tdSsdSt = r2s_thr_ds.partition_D(as_position_independent_swizzle_tensor(sm.dst));

    PipelineState st_q, st_do;
#pragma unroll 1
    for (int m = m_min; m < m_max; ++m) {
      const int m0 = m * kBlockM;
      pipe_do.consumer_wait(st_do);
      wg_gemm<true>(mma_sdp, tdPrV, tdPrdO(_, _, _, st_do.index()), tdPrdP);
      warpgroup_wait<0>();
      warpgroup_fence_operand(tdPrdP);
      cutlass::arch::NamedBarrier::arrive_and_wait(kBoth, uint32_t(BwdBarrier::kPReady));
      Traits::load_p(sp, tPrP, tid);
      const float* delta = sm.delta + st_do.index() * kBlockM;
      CUTE_UNROLL
      for (int c = 0; c < size<1>(dp); ++c) {
        const float dd = delta[get<1>(tScS_rc(0, c))];
        CUTE_UNROLL
        for (int r = 0; r < size<0>(dp); ++r) {
          if constexpr (kDropout) {
            dp(r, c) = BwdDropoutSplit::ds(p(r, c), dp(r, c), drop.p->rp_dropout, dd);
          } else {
            dp(r, c) = p(r, c) * (dp(r, c) - dd);
          }
        }
      }
      pipe_do.consumer_release(st_do);  // dP^T and the delta rows were this warpgroup's reads of the dO stage
      ++st_do;
      CUTE_UNROLL
      for (int j = 0; j < size(tdPrdP); ++j) { rdS(j) = Element(tdPrdP(j)); }
      copy(r2s_ds, tdSrdS, tdSsdSt);
      cutlass::arch::fence_view_async_shared();  // wgmma (async proxy) reads what stmatrix wrote
      // Consumer 0 waits for dS^T (and for this warpgroup's reads of sP); this one need not wait for
      // consumer 0, only for its own sdS stores before its dK GEMM reads them. One bar.sync per
      // barrier: compute-sanitizer synccheck rejects a bar.sync met from two instructions (the two
      // consumers' code), 544-640 errors on the H200 when both synced kDSReady.
      cutlass::arch::NamedBarrier::arrive(kBoth, uint32_t(BwdBarrier::kDSReady));
      cutlass::arch::NamedBarrier::sync(cutlass::NumThreadsPerWarpGroup, uint32_t(BwdBarrier::kDSOwn));
      pipe_q.consumer_wait(st_q);
      wg_gemm<false>(mma_kv, tdKrdS, tdKrQt(_, _, _, st_q.index()), tdKrdK);
      issue_dq(sm, tdQrdQ, 1, tid);
      warpgroup_wait<0>();
      warpgroup_fence_operand(tdKrdK);
      warpgroup_fence_operand(tdQrdQ);
      pipe_q.consumer_release(st_q);  // dK has read Q
      ++st_q;
      red_dq<Traits>(tdQrdQ, dq_rows, m0, Traits::kDQCols, tid);
    }
  }
};

}  // namespace flash::sm90
