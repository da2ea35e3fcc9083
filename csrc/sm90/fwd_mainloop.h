// Consumer mainloop of the sm90 forward: one consumer warpgroup's 64 query rows against the key
// blocks [n_min, n_max), walked from the last block down (the masked blocks come first).
//
// kOverlap (FA3's intra-warpgroup pipelining + ping-pong between the consumer warpgroups):
//   iteration j issues S_j = Q K_j^T and O += P_{j-1} V_{j-1} back to back, then runs the softmax
//   of S_j while the PV GEMM is still in flight; the GEMM issue of one warpgroup is ordered after
//   the previous warpgroup's by a cycle of named barriers (turn_barrier below), so one warpgroup's
//   softmax overlaps the others' GEMMs.
// Without kOverlap each block is S = QK^T, wait, softmax, O += PV, wait (the reference variant).
//
// kDropout: after the softmax of a block (its row sums taken from the undropped P, so the LSE is
// unchanged) the dropped elements of P become 0 (dropout.h; 1 / (1 - p) is folded into the
// epilogue's normalisation). With kOverlap the Philox rounds run while the PV GEMM of the block
// before is still in flight, like the exponentials.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "../dropout.h"
#include "../params.h"
#include "fwd_layouts.h"
#include "fwd_mask.h"
#include "fwd_softmax.h"
#include "watchdog.h"
#include "tuning_mode.h"
#include "wg_gemm.h"

namespace flash::sm90 {

using namespace cute;

// Named-barrier ids (cutlass adds its 8 reserved ones; 8 are left): with W consumer warpgroups,
// c in [0, W) has the GEMM-issue turn barrier c and the epilogue barrier W + c (W = 2: 0, 1 and 2, 3;
// W = 3: 0, 1, 2 and 3, 4, 5).
//
// The turn passes round the warpgroups in a cycle 0 -> 1 -> .. -> W-1 -> 0 (FA3's scheduler barrier):
// warpgroup c waits on barrier c (256 threads: its own 128 arriving + the 128 of warpgroup c-1 that
// passed the turn), issues its GEMMs, and arrives (128) on barrier c+1 mod W. Warpgroup 0 arrives on
// its own barrier once before the loop (the first turn). Every warpgroup runs the same number of
// turns (n_max - n_min, the CTA's range), so each barrier c > 0 sees exactly one pass per wait;
// barrier 0 holds one unmatched pass of 128 at the end (the last warpgroup's), as with W = 2. A
// barrier never has two passes pending: warpgroup c-1 passes again only after a full cycle, which
// includes c's wait on that barrier.
// With W = 2 the ids are written as a select on cwg == 0 as before this generalisation: the
// d = 128 / 256 kernels compile to the same SASS (helper functions here changed their scheduling).

// Those ids, for consumer warpgroup cwg of kW: its turn barrier, the next warpgroup's, its epilogue barrier.
template <int kW>
CUTE_DEVICE uint32_t turn_barrier(int cwg) {
  return kW == 2 ? (cwg == 0 ? 0u : 1u) : uint32_t(cwg);
}
template <int kW>
CUTE_DEVICE uint32_t next_turn_barrier(int cwg) {
  return kW == 2 ? (cwg == 0 ? 1u : 0u) : (cwg == kW - 1 ? 0u : uint32_t(cwg + 1));
}
template <int kW>
CUTE_DEVICE uint32_t epilogue_barrier(int cwg) {
  return kW == 2 ? (cwg == 0 ? 2u : 3u) : uint32_t(kW + cwg);
}

// The overlap loop's softmax issued before its wait for the PV GEMM (wg_gemm.h end_block_before_wait).
// SASS with it: every MUFU of a block before the wait (without: none, ptxas hoists the wait). Measured
// (twenty-first session, H100 SXM, bf16, forward TFLOP/s, base / on / base in one call, then base / on /
// base / on in a second; benchmarks/NOTES.md "Twenty-first session", results/h100_fwd_schedblock.md):
//   d = 128: causal 4k 557 / 573 / 545, 8k 567 / 591 / 556 (+4 %); 1k-8k otherwise -1 .. +1.3 %.
//   d = 256: -2 .. +3 %, no trend.  d = 64: 1k 436 / 429 / 447, causal 1k 304 / 290 / 308 (-3 / -5 %).
// Outputs bit-identical either way (scripts/fwd_bits.py). FLASH_ATTN_CUDA_SM90_FWD_SCHEDULE_BLOCK: 2 (default)
// d = 128 only, 0 never, 1 every head dim.
#ifndef FLASH_ATTN_CUDA_SM90_FWD_SCHEDULE_BLOCK
#define FLASH_ATTN_CUDA_SM90_FWD_SCHEDULE_BLOCK 2
#endif
constexpr bool fwd_schedule_block(int headdim) {
  return tuning_mode_on<FLASH_ATTN_CUDA_SM90_FWD_SCHEDULE_BLOCK>(headdim, 128);
}

// Where the overlap loop rescales O by the last softmax's correction. 0: after the PV wait, at the end of
// the block (the PV GEMM of block n + 1 has completed, P_n not yet converted). 1: in the next block, after
// its S = QK^T GEMM is issued and before its PV GEMM (FA3's place): the FMULs then run while the tensor
// cores work on S instead of between the PV wait and the next GEMM issue, the warpgroup's critical path.
// Same products in the same order: O bit-identical (scripts/fwd_bits.py). Why tried: ncu (twenty-first session,
// H100, d = 128 causal 8k, benchmarks/NOTES.md) against FA3's kernel on the same 128 x 128 tile: ours spends
// 24 % more warp-stall samples in the softmax / conversion part of a block and 12 % more cycles with the
// same tensor work. Measured (H100 SXM, bf16, base / on / base / on in one call, results/h100_fwd_rescaleqk.md):
// 0.983-1.012 at d = 64 / 128 / 256, 1k-8k, causal both, no trend (predicted +2-4 %): off. SASS with it: the
// FMULs between the S GEMM's HGMMAs and the PV GEMM's, 0 spills, no wgmma serialisation.
#ifndef FLASH_ATTN_CUDA_SM90_FWD_RESCALE_UNDER_QK
#define FLASH_ATTN_CUDA_SM90_FWD_RESCALE_UNDER_QK 0
#endif
constexpr bool kFwdRescaleUnderQK = FLASH_ATTN_CUDA_SM90_FWD_RESCALE_UNDER_QK != 0;

// The overlap loop's softmax without the -inf guard in blocks that need no mask (fwd_softmax.h step<false>):
// the masked and unmasked blocks then take two copies of the softmax, chosen per block by the branch that
// already decides the mask. ncu (twenty-first session): the guard is 2 FSETP + 2 FSEL per row pair and block
// in ours, FA3 has it in its masked blocks only. Measured (H100 SXM, d = 128 bf16, base / on / base / on in one
// call, results/history/h100_guard_*): non-causal 2k / 8k +1.2 / +1.1 %, causal 2k -2.3 %, 8k +0.4 % (predicted
// +1-2 %): within the runs' noise, off. O and LSE bit-identical; 0 spills; the default's SASS unchanged.
// FLASH_ATTN_CUDA_SM90_FWD_GUARD_MASKED_ONLY=1 on, where the exp split (below) is off: the split's softmax always
// keeps the guard (at d = 128 since the split became the default, the option then needs FWD_EXP_SPLIT=0).
#ifndef FLASH_ATTN_CUDA_SM90_FWD_GUARD_MASKED_ONLY
#define FLASH_ATTN_CUDA_SM90_FWD_GUARD_MASKED_ONLY 0
#endif
constexpr bool kFwdGuardMaskedOnly = FLASH_ATTN_CUDA_SM90_FWD_GUARD_MASKED_ONLY != 0;

// The overlap loop's V wait: a try-wait before the GEMM turn and the wait itself (skipped when the try-wait
// found V) between the S and PV GEMM issues, so the turn is not held over an mbarrier poll. ncu (twenty-first
// session, d = 128 causal 8k): 1.6 % of the warp-stall samples sit on the V wait inside the turn; FA3 polls
// only on the blocks whose try-wait failed. SASS: one TRYWAIT before the BAR.SYNC, 0 spills. Measured (twenty-
// second session, H100 SXM, bf16, base / on / base / on in one call, results/history/h100_vtrywait_*), d = 128:
// non-causal 8k 635.3 / 631.6 / 638.6 / 628.6, causal 8k 602.0 / 590.3 / 571.7 / 577.8, the other points (1k / 4k,
// d = 256) -2 .. +1 % with no trend (the wait held 1.6 % of the stall samples): off. O and LSE bit-identical, the
// sm90 forward tests pass.
// FLASH_ATTN_CUDA_SM90_FWD_V_TRY_WAIT=1 on (scripts/fwd_option_gpu.sh).
#ifndef FLASH_ATTN_CUDA_SM90_FWD_V_TRY_WAIT
#define FLASH_ATTN_CUDA_SM90_FWD_V_TRY_WAIT 0
#endif
constexpr bool kFwdVTryWait = FLASH_ATTN_CUDA_SM90_FWD_V_TRY_WAIT != 0;

// The overlap loop's PV wait inside the softmax: the exponentials of each row's first
// FLASH_ATTN_CUDA_SM90_FWD_EXP_SPLIT columns (of 32 at kBlockN = 128) before it, the rest after it, where
// ptxas interleaves them with the O rescale (64 FMUL) and the P conversion (32 F2FP) that must wait for the
// PV GEMM. Why: a SASS reading against FA3 (twenty-fifth session, benchmarks/NOTES.md): with every MUFU
// before the wait ours ran 106 instructions between the wait and the next GEMM issue; FA3's wait sits after
// 13-23 of its MUFU and its loop ends one F2FP after the last one. SASS with 8: 22 (non-causal) / 20 (causal)
// of the loop's 66 MUFU before the wait, 0 spills, 168 registers, no wgmma serialisation.
// Measured (H100 SXM, d = 128 bf16, forward TFLOP/s, three calls with base runs between the variants,
// FA3 and cuDNN in each, results/history/h100_fwdsplit_*): non-causal 2k 595.7 (3 base runs) against 610.6 /
// 609.5 / 608.6 (+2.4 %), 8k 626.2 against 643.6 / 644.3 / 644.4 (+2.9 %), causal 8k 577.5 against 597.8 /
// 591.4 / 588.1 (+2.6 %); 1k and causal 1k / 2k within the runs' spread (causal 2k base 462-494). Split 4 / 12
// measured the same to 1 % (non-causal 8k 651.6 / 641.3, 644.3), 16 no gain (626.7). With it ours / FA3 at
// 2k / 8k: 1.00 / 0.98-1.01 (base runs 0.97-1.00 / 0.95-0.97). Bit-identical O and LSE (OnlineSoftmax::step_split).
// 8 (default); 0 all exps before the wait (the earlier default). Without dropout, at the head dims of
// FLASH_ATTN_CUDA_SM90_FWD_EXP_SPLIT_DIMS (tuning_mode.h: 2, the default, d = 128; 1 every head dim, with the
// block boundary that pins the wait, which d = 64 / 256 do not have by default; not yet measured there).
#ifndef FLASH_ATTN_CUDA_SM90_FWD_EXP_SPLIT
#define FLASH_ATTN_CUDA_SM90_FWD_EXP_SPLIT 8
#endif
#ifndef FLASH_ATTN_CUDA_SM90_FWD_EXP_SPLIT_DIMS
#define FLASH_ATTN_CUDA_SM90_FWD_EXP_SPLIT_DIMS 2
#endif
constexpr int kFwdExpSplit = FLASH_ATTN_CUDA_SM90_FWD_EXP_SPLIT;
constexpr bool fwd_exp_split(int headdim) {
  return kFwdExpSplit > 0 && tuning_mode_on<FLASH_ATTN_CUDA_SM90_FWD_EXP_SPLIT_DIMS>(headdim, 128);
}

// The GEMM turns between the consumer warpgroups (turn_barrier above) at d = 256.
// FLASH_ATTN_CUDA_SM90_FWD256_NO_TURNS=1: none; each warpgroup issues its GEMMs as soon as its operands are
// ready. FA3 uses its scheduler barrier only up to d = 128 (hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp,
// UseSchedulerBarrier), so its d = 256 loops have no BAR (SASS reading, twenty-fifth session, benchmarks/NOTES.md);
// ours syncs and arrives once per block. Scheduling only: O and LSE are the same either way. Measured on an H100
// SXM against base runs of the same call: +2-4 % non-causal in one run (twenty-seventh session), then three
// pairs (results/history/h100_noturns28.md) -2.3 / +1.5 / -0.5 % non-causal 1k / 2k / 8k, +0.4 / -1.5 / +0.2 %
// causal: no gain beyond the runs' spread. Off.
#ifndef FLASH_ATTN_CUDA_SM90_FWD256_NO_TURNS
#define FLASH_ATTN_CUDA_SM90_FWD256_NO_TURNS 0
#endif
constexpr bool fwd_gemm_turns(int headdim) { return !(FLASH_ATTN_CUDA_SM90_FWD256_NO_TURNS != 0 && headdim == 256); }

// One consumer warpgroup's GEMM-issue turn (turn_barrier above): wait for it, pass it on, and warpgroup 0's first
// turn (give_first). kOn = false (fwd_gemm_turns): no barrier at all.
template <bool kOn>
struct GemmTurn {
  uint32_t mine, next;  // this warpgroup's turn barrier and the next warpgroup's
  CUTE_DEVICE void wait() const {
    if constexpr (kOn) { cutlass::arch::NamedBarrier::arrive_and_wait(2 * 128, mine); }
  }
  CUTE_DEVICE void pass() const {
    if constexpr (kOn) { cutlass::arch::NamedBarrier::arrive(2 * 128, next); }
  }
  CUTE_DEVICE void give_first(int cwg) const {
    if constexpr (kOn) {
      if (cwg == 0) { cutlass::arch::NamedBarrier::arrive(2 * 128, mine); }  // warpgroup 0 issues first
    }
  }
};

// run_blocks' default q_free: nothing (the one-tile kernel, and the persistent kernel when O shares Q's rows).
struct NoQFree {
  CUTE_DEVICE void operator()() const {}
};

template <class Traits, bool kCausal, bool kDropout>
struct FwdMainloop {
  using Element = typename Traits::Element;
  using Pipeline = typename Traits::Pipeline;
  using PipelineState = typename Traits::PipelineState;
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kRows = 2;  // rows of S per thread (64-row wgmma accumulator)
  static_assert(!kDropout || dropout_tile(kBlockN), "dropout needs key blocks of whole 64-column Philox chunks");
  static constexpr bool kExpSplit = !kDropout && fwd_exp_split(Traits::kHeadDim);
  static constexpr bool kTurns = fwd_gemm_turns(Traits::kHeadDim);  // the GEMM-issue turn barriers

  // One tile per CTA (fwd_kernel.h): pipeline states from the start, warpgroup 0 takes the first
  // GEMM turn here.
  // cwg: consumer warpgroup (0 .. kNConsumerWG - 1); tid: thread in it; m0: first query row of the CTA; rng: this
  // (batch, head)'s dropout generator (read with kDropout only).
  // On return tOrO holds the unnormalised O (of the dropped P) and softmax the row statistics.
  template <class SQ, class SK, class SVt, class TensorO>
  CUTE_DEVICE static void run(SQ const& sQ, SK const& sK, SVt const& sVt, Pipeline& pipe_k, Pipeline& pipe_v,
                              TensorO& tOrO, OnlineSoftmax<kRows>& softmax, const DropoutRng& rng, int cwg,
                              int tid, int m0, int n_min, int n_max, int seqlen_q, int seqlen_k) {
    PipelineState st_k, st_v;  // consumer start: stage 0, phase 0
    run_blocks<true>(sQ, sK, sVt, pipe_k, pipe_v, st_k, st_v, tOrO, softmax, rng, cwg, tid, m0, n_min, n_max,
                     seqlen_q, seqlen_k);
  }

  // The blocks of one tile. st_k, st_v: the consumer pipeline states, carried from tile to tile by
  // the persistent kernel (fwd_persistent.h). kArriveFirstTurn: warpgroup 0 gives itself the first
  // GEMM turn here (one tile per CTA); the persistent kernel does it once before its tile loop
  // instead, and each tile then starts on the turn warpgroup 1 passed at the end of the last one.
  // q_free(): called by every thread once the tile's last S = QK^T has completed (this thread's
  // wgmma wait returned), i.e. once the warpgroup's Q rows are no longer read: the persistent kernel
  // with a separate O buffer lets the producer load the next tile's Q under the last softmax, the
  // last PV GEMM and the epilogue. NoQFree (the one-tile kernel) compiles to nothing.
  template <bool kArriveFirstTurn, class SQ, class SK, class SVt, class TensorO, class QFree = NoQFree>
  CUTE_DEVICE static void run_blocks(SQ const& sQ, SK const& sK, SVt const& sVt, Pipeline& pipe_k,
                                     Pipeline& pipe_v, PipelineState& st_k, PipelineState& st_v, TensorO& tOrO,
                                     OnlineSoftmax<kRows>& softmax, const DropoutRng& rng, int cwg, int tid,
                                     int m0, int n_min, int n_max, int seqlen_q, int seqlen_k,
                                     QFree q_free = {}) {
    typename Traits::MmaQK mma_qk;
    typename Traits::MmaPV mma_pv;
    auto thr_qk = mma_qk.get_thread_slice(tid);
    auto thr_pv = mma_pv.get_thread_slice(tid);

    Tensor tSrQ = thr_qk.partition_fragment_A(sQ);   // (MMA, 1, d/16) descriptors
    Tensor tSrK = thr_qk.partition_fragment_B(sK);   // (MMA, 1, d/16, stages)
    Tensor tOrV = thr_pv.partition_fragment_B(sVt);  // (MMA, 1, kBlockN/16, stages)
    Tensor tSrS = partition_fragment_C(mma_qk, select<0, 1>(typename Traits::TileQK{}));  // ((2,2,N/8),1,1) fp32
    Tensor rP = make_tensor<Element>(tSrS.layout());                                       // P of the block before
    Tensor tOrP = make_tensor(rP.data(), acc_as_a_operand(rP.layout()));                   // ((2,2,2),1,N/16)

    Tensor s = make_tensor(tSrS.data(), acc_rowcol(tSrS.layout()));   // (rows, cols) view
    Tensor o = make_tensor(tOrO.data(), acc_rowcol(tOrO.layout()));
    Tensor cS = make_identity_tensor(select<0, 1>(typename Traits::TileQK{}));
    Tensor tScS = thr_qk.partition_C(cS);
    Tensor tScS_rc = make_tensor(tScS.data(), acc_rowcol(tScS.layout()));
    const int row0 = m0 + Traits::kWGRows * cwg;

    float corr[kRows];

    auto mask = [&](int n) {
      if (block_needs_mask<kBlockM, kBlockN, kCausal>(n, m0, seqlen_q, seqlen_k)) {
        apply_mask<kCausal>(s, tScS_rc, row0, n * kBlockN, seqlen_q, seqlen_k);
      }
    };
    // The wgmma accumulator of one warp is the SM80 16 x 8 C fragment repeated across the columns
    // (fwd_layouts.h): apply_dropout's one-warp-across-the-columns form; rows and keys counted from
    // the sequence's start (row0 + local row, n * kBlockN + local column), as philox.h maps them.
    auto drop = [&](int n) {
      if constexpr (kDropout) { apply_dropout<1, false>(s, tScS_rc, rng, row0, n * kBlockN); }
    };
    auto to_p = [&]() {
      CUTE_UNROLL
      for (int i = 0; i < size(tSrS); ++i) { rP(i) = Element(tSrS(i)); }
    };

    if constexpr (!Traits::kOverlap) {
      for (int n = n_max - 1; n >= n_min; --n) {
        pipe_consumer_wait(pipe_k, st_k, WaitSite::kKFull, m0, n);
        wg_gemm<true>(mma_qk, tSrQ, tSrK(_, _, _, st_k.index()), tSrS);
        warpgroup_wait<0>();
        warpgroup_fence_operand(tSrS);
        pipe_k.consumer_release(st_k);
        ++st_k;
        if (n == n_min) { q_free(); }
        mask(n);
        softmax.step(s, corr);
        drop(n);
        scale_rows(o, corr);
        to_p();
        pipe_consumer_wait(pipe_v, st_v, WaitSite::kVFull, m0, n);
        wg_gemm<false>(mma_pv, tOrP, tOrV(_, _, _, st_v.index()), tOrO);
        warpgroup_wait<0>();
        warpgroup_fence_operand(tOrO);
        pipe_v.consumer_release(st_v);
        ++st_v;
      }
      return;
    }

    constexpr int kW = Traits::kNConsumerWG;
    // turn_barrier / next_turn_barrier spelled out: through the helpers the one-tile kernel's SASS
    // (d = 128 / 256) moves its registers around (nvcc 13.0); same values.
    const GemmTurn<kTurns> turn{kW == 2 ? (cwg == 0 ? 0u : 1u) : uint32_t(cwg),
                                kW == 2 ? (cwg == 0 ? 1u : 0u) : (cwg == kW - 1 ? 0u : uint32_t(cwg + 1))};
    if constexpr (kArriveFirstTurn) { turn.give_first(cwg); }

    // First (last-indexed) block: S, softmax, P; O is still zero.
    pipe_consumer_wait(pipe_k, st_k, WaitSite::kKFull, m0, n_max - 1);
    turn.wait();
    wg_gemm<true>(mma_qk, tSrQ, tSrK(_, _, _, st_k.index()), tSrS);
    turn.pass();
    warpgroup_wait<0>();
    warpgroup_fence_operand(tSrS);
    pipe_k.consumer_release(st_k);
    ++st_k;
    if (n_max - 1 == n_min) { q_free(); }
    mask(n_max - 1);
    softmax.step(s, corr);
    drop(n_max - 1);
    to_p();

    for (int n = n_max - 2; n >= n_min; --n) {
      pipe_consumer_wait(pipe_k, st_k, WaitSite::kKFull, m0, n);
      // kFwdVTryWait: V's try-wait now, its wait after the S GEMM issue (skip_wait: no poll when off).
      [[maybe_unused]] cutlass::ConsumerToken v_token = pipe_v.consumer_try_wait(st_v, !kFwdVTryWait);
      turn.wait();
      wg_gemm<true>(mma_qk, tSrQ, tSrK(_, _, _, st_k.index()), tSrS);
      if constexpr (kFwdRescaleUnderQK) { scale_rows_between_blocks(o, corr); }  // block n + 1's correction
      if constexpr (kFwdVTryWait) {
        pipe_consumer_wait_token(pipe_v, st_v, v_token, WaitSite::kVFull, m0, n + 1);
      } else {
        pipe_consumer_wait(pipe_v, st_v, WaitSite::kVFull, m0, n + 1);
      }
      wg_gemm<false>(mma_pv, tOrP, tOrV(_, _, _, st_v.index()), tOrO);
      turn.pass();
      warpgroup_wait<1>();  // S_n done, PV of the block before still running
      warpgroup_fence_operand(tSrS);
      pipe_k.consumer_release(st_k);
      ++st_k;
      if (n == n_min) { q_free(); }
      // The PV GEMM's wait: the softmax issued before it (d = 128, fwd_schedule_block), or part of it (kExpSplit).
      auto wait_pv = [&]() {
        if constexpr (fwd_schedule_block(Traits::kHeadDim) || kExpSplit) { end_block_before_wait(seqlen_k); }
        warpgroup_wait<0>();
      };
      if constexpr (kExpSplit) {
        mask(n);
        softmax.template step_split<kFwdExpSplit>(s, corr, wait_pv);
      } else {
        if constexpr (kFwdGuardMaskedOnly) {
          if (block_needs_mask<kBlockM, kBlockN, kCausal>(n, m0, seqlen_q, seqlen_k)) {
            apply_mask<kCausal>(s, tScS_rc, row0, n * kBlockN, seqlen_q, seqlen_k);
            softmax.step(s, corr);
          } else {
            softmax.template step<false>(s, corr);
          }
        } else {
          mask(n);
          softmax.step(s, corr);
        }
        drop(n);
        wait_pv();
      }
      warpgroup_fence_operand(tOrO);
      warpgroup_fence_operand(rP);
      pipe_v.consumer_release(st_v);
      ++st_v;
      if constexpr (!kFwdRescaleUnderQK) { scale_rows_between_blocks(o, corr); }
      to_p();
    }

    if constexpr (kFwdRescaleUnderQK) { scale_rows_between_blocks(o, corr); }  // the last block's correction
    pipe_consumer_wait(pipe_v, st_v, WaitSite::kVFull, m0, n_min);
    wg_gemm<false>(mma_pv, tOrP, tOrV(_, _, _, st_v.index()), tOrO);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tOrO);
    pipe_v.consumer_release(st_v);
    // The persistent kernel carries st_v into the next tile: every released stage must be stepped
    // past (without this the state lagged one stage per tile and the second tile of a CTA waited
    // for a V phase the producer could only fill after that tile's own epilogue: the hang of
    // 2026-12-02, benchmarks/NOTES.md issue 11 v5). Dead code for the one-tile kernel.
    ++st_v;
  }

  // The blocks of a tile for a warpgroup whose 64 rows all lie at or past seqlen_q (the last query
  // tile when seqlen_q is not a multiple of kBlockM: d = 64's 192-row tile at seqlen 1k has 64 live
  // rows and two such warpgroups; persistent kernel only, fwd_persistent.h). It issues no GEMM and no
  // softmax, and keeps exactly its part of what the other roles count: each K and V stage waited
  // for (full) and released, in run_blocks' order; each GEMM turn waited for and passed on (the busy
  // warpgroups' turn cycle is the same, their GEMMs just get the tensor cores to themselves); q_free
  // where run_blocks calls it. Its O is not computed (no row of it is stored) and it has no LSE row.
  template <bool kArriveFirstTurn, class QFree = NoQFree>
  CUTE_DEVICE static void idle_blocks(Pipeline& pipe_k, Pipeline& pipe_v, PipelineState& st_k, PipelineState& st_v,
                                      int cwg, int m0, int n_min, int n_max, QFree q_free = {}) {
    if constexpr (!Traits::kOverlap) {
      for (int n = n_max - 1; n >= n_min; --n) {
        pipe_consumer_wait(pipe_k, st_k, WaitSite::kKFull, m0, n);
        pipe_k.consumer_release(st_k);
        ++st_k;
        if (n == n_min) { q_free(); }
        pipe_consumer_wait(pipe_v, st_v, WaitSite::kVFull, m0, n);
        pipe_v.consumer_release(st_v);
        ++st_v;
      }
      return;
    }
    constexpr int kW = Traits::kNConsumerWG;
    const GemmTurn<kTurns> turn{turn_barrier<kW>(cwg), next_turn_barrier<kW>(cwg)};
    if constexpr (kArriveFirstTurn) { turn.give_first(cwg); }
    // First block: K wait, S's turn; then per block K wait, the turn of S and PV (V of the block
    // before), K release, V release; the last PV takes no turn.
    pipe_consumer_wait(pipe_k, st_k, WaitSite::kKFull, m0, n_max - 1);
    turn.wait();
    turn.pass();
    pipe_k.consumer_release(st_k);
    ++st_k;
    if (n_max - 1 == n_min) { q_free(); }
    for (int n = n_max - 2; n >= n_min; --n) {
      pipe_consumer_wait(pipe_k, st_k, WaitSite::kKFull, m0, n);
      turn.wait();
      pipe_consumer_wait(pipe_v, st_v, WaitSite::kVFull, m0, n + 1);
      turn.pass();
      pipe_k.consumer_release(st_k);
      ++st_k;
      if (n == n_min) { q_free(); }
      pipe_v.consumer_release(st_v);
      ++st_v;
    }
    pipe_consumer_wait(pipe_v, st_v, WaitSite::kVFull, m0, n_min);
    pipe_v.consumer_release(st_v);
    ++st_v;
  }
};

}  // namespace flash::sm90
