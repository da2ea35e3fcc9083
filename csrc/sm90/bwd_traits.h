// Compile-time description of one sm90 backward tile: shared-memory layouts, the five warpgroup
// MMAs, the Q/dO pipelines and the shared-storage struct. No code runs here.
//
// One CTA per (kBlockN keys, head, batch), 384 threads: warpgroup 0 is the producer (one thread
// issues every TMA load), warpgroups 1 and 2 are consumers; consumer c owns keys
// [64 c, 64 c + 64) of the block (dK, dV of those keys stay in its registers). Per query block of
// kBlockM rows (FA3's design, "SdP swapAB": the scores are computed transposed, keys as rows):
//   S^T  = K_c Q^T      wgmma 64 x kBlockM x d,     A, B from shared memory (SS)
//   dP^T = V_c dO^T     wgmma 64 x kBlockM x d,     SS
//   P^T = exp2(S^T * scale_log2 - LSE_log2[q]), dS^T = P^T (dP^T - D[q])   (registers)
//   dV_c += P^T dO      wgmma 64 x d x kBlockM,     A (P^T) from registers, B (dO) MN-major (RS)
//   dK_c += dS^T Q      wgmma 64 x d x kBlockM,     RS, B (Q) MN-major
//   dQ    = dS K        both warpgroups' dS^T through shared memory; consumer c computes the
//                       (64 x kDQCols) part dQ_c of the (kBlockM x d) tile, K-dim all kBlockN keys
//                       (SS: A = dS keys-contiguous, B = K MN-major), fp32 to shared memory; the
//                       dQ writer (warp 1 of the producer warpgroup) issues one TMA reduce-add into
//                       dq_accum (params.h) per query block.
//                       kDQSwapAB (kBlockM = 80, not a wgmma M): dQ_c^T = K_c^T dS^T instead, the
//                       (kDQCols x kBlockM) part, wgmma 64 x kBlockM x kBlockN (SS: A = K^T MN-major,
//                       B = dS K-major), stored transposed into sdQ (bwd_mainloop.h store_shared).
// dS is double-buffered (kDSStages): the consumers never meet a second time per block. dQ is too where
// shared memory allows (kDQStages >= 2: the consumers never wait for the reduce of the previous block);
// with one sdQ stage (80-row tiles) they wait for the reduce of block i - 1 to have read it (bwd_mainloop.h
// has the hazards).
// Query tiles of kBlockM rows that do not divide kBwdRowAlign (80) reach past seqlen_q_rounded at the
// last tile: the producer copies only the LSE / delta rows that exist and pads the rest with the
// padding rows' values, +inf / 0 (bwd_kernel.h copy_scratch_rows), so those rows' P and dS are 0.
#pragma once

#include <type_traits>

#include <cute/tensor.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cutlass/pipeline/sm90_pipeline.hpp>

#include "../params.h"  // kBwdRowAlign
#include "tuning_mode.h"

namespace flash::sm90 {

using namespace cute;

// The operand tiles every sm90 backward tile shares (bwd_traits_split.h is the other user): Q, dO
// (q, d, stage) K-major with their transposed views, K, V (keys, d) with K^T, the Q/dO pipelines and
// the TMA byte counts. kKSwizzle64: K, V in the 64-byte swizzle (a 32-column dQ B slice needs it).
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kStages_, typename Element_, bool kKSwizzle64>
struct BwdOperandSmem {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;  // query rows per step of the loop
  static constexpr int kBlockN = kBlockN_;  // keys per CTA
  static constexpr int kStages = kStages_;  // Q and dO pipelines each
  // The last query tile may reach past seqlen_q_rounded (a multiple of kBwdRowAlign, params.h).
  static constexpr bool kRowGuard = kBwdRowAlign % kBlockM != 0;
  static_assert(kHeadDim % 64 == 0, "head dim must be a multiple of the 64-element SW128 atom");
  static_assert(sizeof(Element) == 2, "16-bit inputs only");

  // 128-byte swizzle, contiguous dim last in the shape's order of the K-major atoms.
  using SmemAtom = GMMA::Layout_K_SW128_Atom<Element>;
  using SmemLayoutQ = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockM>, Int<kHeadDim>, Int<kStages>>{}));
  using SmemLayoutDO = SmemLayoutQ;
  // Q^T / dO^T (d, q, stage): the same bytes viewed with the row index second (B of dK, dV).
  using SmemLayoutQt = decltype(composition(
      SmemLayoutQ{}, make_ordered_layout(Shape<Int<kHeadDim>, Int<kBlockM>, Int<kStages>>{}, Step<_2, _1, _3>{})));
  using SmemAtomK = std::conditional_t<kKSwizzle64, GMMA::Layout_K_SW64_Atom<Element>, SmemAtom>;
  using SmemLayoutK = decltype(tile_to_shape(SmemAtomK{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  using SmemLayoutV = SmemLayoutK;
  using SmemLayoutKt = decltype(composition(SmemLayoutK{},
                                            make_ordered_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{}, Step<_2, _1>{})));

  using Pipeline = cutlass::PipelineTmaAsync<kStages>;
  using PipelineState = typename cutlass::PipelineState<kStages>;

  // Q + its LSE_log2 rows, dO + its delta rows (params.h BwdParams scratch) per stage.
  static constexpr uint32_t kTmaBytesQ = kBlockM * kHeadDim * sizeof(Element) + kBlockM * sizeof(float);
  static constexpr uint32_t kTmaBytesKV = 2 * kBlockN * kHeadDim * sizeof(Element);
};

// dQ (kBlockM x d) split between the consumers of BwdTraits: by rows when kBlockM = 128, else by columns.
template <int kHeadDim, int kBlockM>
inline constexpr int kBwdDQCols = kBlockM == 128 ? kHeadDim : kHeadDim / 2;

// sdQ (q, d, stage) fp32, where the consumers store dQ from the wgmma C fragment: the 128-byte swizzle, one TMA
// reduce-add of 128-byte rows per stage. A thread's st.shared.v2.f32 writes columns 2 (t%4) + {0, 1} of row t/4
// (of its warp's 8), and an 8-byte store is served per half-warp (rows 0-3, rows 4-7). Under the swizzle rows 2r
// and 2r + 1 put their 32 bytes in the same two 16-byte chunks: a 2-way bank conflict per half-warp, 4 wavefronts
// per STS.64 instead of 2 (Nsight Compute, d = 128 bf16 2 x 8k: 34 M of the kernel's 390 M shared wavefronts
// excessive, causal; FA3 none).
// Removed (twenty-eighth session): sdQ as column blocks of 8 fp32 without swizzle (SDQ_COL8: conflict-free stores,
// but CuTe then issues 4 UTMAREDG.4D of 32-byte rows per stage). H100 SXM, backward against the same call's base
// (results/history/h100_sdqcol8_28.md): d = 128 -12.8 / -10.2 / -5.4 / -3.9 % at 2k / 8k / causal 2k / causal
// 8k, d = 64 -2.0 to -5.4 %. The writer's reduce of 32-byte rows costs more than the conflicts did.
// dq_full's arrivals: every consumer thread (default), or with FLASH_ATTN_CUDA_SM90_BWD_DQ_WARP_ARRIVE=1 one
// elected thread per consumer warp after __syncwarp (8 mbarrier arrivals per step instead of 256; FA3 hands its
// dQ over with one named-barrier arrive per warp). With SDQ_COL8 (above) it measured -0.6 to +0.5 % against
// SDQ_COL8 alone (h100_sdqcol8_28.md): off.
#ifndef FLASH_ATTN_CUDA_SM90_BWD_DQ_WARP_ARRIVE
#define FLASH_ATTN_CUDA_SM90_BWD_DQ_WARP_ARRIVE 0
#endif
// dQ's rows permuted (FLASH_ATTN_CUDA_SM90_BWD_DQ_ROW_PERM, tuning_mode.h: 2, the default, d = 64 and 128; 1 every
// head dim; 0 off): the conflict removed without touching sdQ, which keeps the 128-byte swizzle and its one TMA
// reduce-add of 128-byte rows per stage. The consumers write dS^T's query columns into sdS in the order sigma^-1,
// so the dQ wgmma's row p (A = sdS row p) is query sigma(p), and a thread stores that row to sdQ row sigma(p): a
// half-warp's rows 0-3 land on sdQ rows 0, 2, 4, 6, four distinct 32-byte bank groups under the swizzle (2
// wavefronts per STS.64; tools/sdq_banks.cu, which also checks the mapping end to end). Both are index maps on
// stores the kernel already makes (the dS stmatrix rows are 16-byte rows of one query each): nothing added in the
// loop (d = 128: 24 more SASS instructions of 8,968, address set-up; 0 spills, no C751x; d = 64 the same).
// Not for the swapped dQ^T; the mainloop leaves the dropout variant out (BwdMainloop::kRowPerm).
// Measured (twenty-eighth session, H100 SXM, d = 128 bf16, base / perm / base / perm in one call with FA3 and
// cuDNN, results/history/h100_dqperm28.md), backward at 2k / 8k / causal 8k: +2.6 / +3.8 / +3.9 %; causal 2k
// read -5.1 % there but +2.3 % in a second A / B / A / B of ours alone on the same machine (causal 1k / 2k / 4k:
// +2.1 / +2.3 / +2.0 %), where fwd+bwd moved +1.9 / +4.2 / +1.8 %. Tests (tests/test_sm90_bwd_gpu.py, d = 128:
// 62 passed) and compute-sanitizer (memcheck / racecheck / synccheck, d = 128) clean on it. d = 64 (thirtieth
// session, H100 SXM, bf16, base / perm / base / perm, results/history/h100_dqperm64_30.md): backward +1.0 to +5.9 %
// at 2k / 8k, causal and not, fwd+bwd +0.8 to +3.4 %; tests (d = 64 fp16 + bf16 with the feature and dropout
// kernels: 145 passed) and the sanitizers (plain and deterministic) clean. d = 256 not measured: off there.
#ifndef FLASH_ATTN_CUDA_SM90_BWD_DQ_ROW_PERM
#define FLASH_ATTN_CUDA_SM90_BWD_DQ_ROW_PERM 2
#endif
// sigma over the kBlockM query rows, within each 8: wgmma row p = a + 4 b + 8 c (a < 4, b < 2) holds query
// 2 a + b + 8 c. Its inverse: query q = b + 2 a + 8 c sits at row a + 4 b + 8 c.
template <int kBlockM>
using BwdDQRowPerm = Layout<Shape<_4, _2, Int<kBlockM / 8>>, Stride<_2, _1, _8>>;
template <int kBlockM>
using BwdDQRowPermInv = Layout<Shape<_2, _4, Int<kBlockM / 8>>, Stride<_4, _1, _8>>;

template <int kHeadDim_, int kBlockM_, int kBlockN_, int kStages_, typename Element_, int kDQStages_ = 2>
struct BwdTraits
    : BwdOperandSmem<kHeadDim_, kBlockM_, kBlockN_, kStages_, Element_, kBwdDQCols<kHeadDim_, kBlockM_> % 64 != 0> {
  using Base = BwdOperandSmem<kHeadDim_, kBlockM_, kBlockN_, kStages_, Element_,
                              kBwdDQCols<kHeadDim_, kBlockM_> % 64 != 0>;
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;  // query rows per step of the loop
  static constexpr int kBlockN = kBlockN_;  // keys per CTA: 2 consumer warpgroups x 64
  static constexpr int kStages = kStages_;  // Q and dO pipelines each
  static constexpr bool kRoleSplit = false; // both consumers run the same steps on their own keys
  static constexpr bool kDQByTma = true;    // sdQ + the dQ writer warp's TMA reduce-add
  static constexpr int kDSStages = 2;       // sdS buffers: block m + 1 writes dS while m's dQ GEMM may read
  static constexpr int kDQStages = kDQStages_;  // sdQ buffers: (>= 2) block m + 1 writes dQ while m's reduce reads
  static constexpr int kNConsumerWG = 2;
  static constexpr int kWGKeys = 64;
  static constexpr int kNThreads = 128 * (kNConsumerWG + 1);
  static constexpr int kNConsumerThreads = 128 * kNConsumerWG;
  // dq_full: one arrival per consumer warp (FLASH_ATTN_CUDA_SM90_BWD_DQ_WARP_ARRIVE above), else per thread.
  static constexpr bool kDQWarpArrive = FLASH_ATTN_CUDA_SM90_BWD_DQ_WARP_ARRIVE != 0;
  static constexpr int kDQFullArrivals = kDQWarpArrive ? kNConsumerThreads / 32 : kNConsumerThreads;
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;
  // dQ (kBlockM x d) split between the consumers: by rows when kBlockM = 128, else by columns.
  static constexpr bool kDQSplitRows = kBlockM == 128;
  static constexpr int kDQRows = kDQSplitRows ? 64 : kBlockM;
  static constexpr int kDQCols = kBwdDQCols<kHeadDim, kBlockM>;
  // dQ^T = K^T dS^T per consumer (kDQCols x kBlockM) where kBlockM is no multiple of 64 (a wgmma's M).
  static constexpr bool kDQSwapAB = kBlockM % 64 != 0;
  // dS^T's query columns written in the order sigma^-1, dQ's rows stored in the order sigma (above).
  static constexpr bool kDQRowPerm =
      tuning_mode_on<FLASH_ATTN_CUDA_SM90_BWD_DQ_ROW_PERM>(kHeadDim, 128, 64) && !kDQSwapAB;

  static_assert(kBlockN == kWGKeys * kNConsumerWG, "each consumer warpgroup owns 64 keys");
  static_assert(kBlockM == 64 || kBlockM == 80 || kBlockM == 128,
                "kBlockM is the N of the S^T wgmma and one or two dQ row blocks, or the N of the swapped dQ^T");
  static_assert(kDQStages >= 2 || kDQSwapAB, "two sdQ stages but where shared memory has room for one (80 rows)");
  static_assert(kDQCols % 64 == 0 || (kDQCols == 32 && !kDQSwapAB), "dQ column split at whole swizzle atoms of K");
  static_assert(kBlockM % 16 == 0, "kBlockM is the K of the dK / dV wgmma and a multiple of 16 rows (LSE bytes)");

  using TileSdP = Shape<Int<kWGKeys>, Int<kBlockM>, Int<kHeadDim>>;  // S^T, dP^T per consumer
  using TileKV = Shape<Int<kWGKeys>, Int<kHeadDim>, Int<kBlockM>>;   // dK, dV per consumer
  // dQ part per consumer: (rows, d columns, keys), or swapped (d columns, rows, keys).
  using TileDQ = std::conditional_t<kDQSwapAB, Shape<Int<kDQCols>, Int<kBlockM>, Int<kBlockN>>,
                                    Shape<Int<kDQRows>, Int<kDQCols>, Int<kBlockN>>>;
  using MmaSdP = decltype(make_tiled_mma(GMMA::ss_op_selector<Element, Element, float, TileSdP>()));
  using MmaKV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, TileKV, GMMA::Major::K, GMMA::Major::MN>()));
  // A = dS (K-major), B = K (MN-major); swapped: A = K^T (MN-major), B = dS (K-major).
  using MmaDQ = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, TileDQ, kDQSwapAB ? GMMA::Major::MN : GMMA::Major::K,
                           kDQSwapAB ? GMMA::Major::K : GMMA::Major::MN>()));

  using SmemAtom = typename Base::SmemAtom;
  using SmemLayoutQ = typename Base::SmemLayoutQ;
  using SmemLayoutDO = typename Base::SmemLayoutDO;
  using SmemLayoutQt = typename Base::SmemLayoutQt;
  // K is also B of dQ = dS K, read MN-major in column slices of kDQCols: 32-column slices (d = 64 with
  // kBlockM = 64) need the 64-byte swizzle, whose atoms are 32 elements wide.
  using SmemLayoutK = typename Base::SmemLayoutK;
  using SmemLayoutV = typename Base::SmemLayoutV;
  using SmemLayoutKt = typename Base::SmemLayoutKt;
  // dS (q, keys, stage), keys contiguous: A of dQ = dS K; written through its transpose (keys, q, stage).
  using SmemLayoutDS =
      decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockM>, Int<kBlockN>, Int<kDSStages>>{}));
  using SmemLayoutDSt = decltype(composition(
      SmemLayoutDS{}, make_ordered_layout(Shape<Int<kBlockN>, Int<kBlockM>, Int<kDSStages>>{}, Step<_2, _1, _3>{})));
  // dQ partial sums (q, d, stage) fp32 for the TMA reduce-add (one (q, d) stage per reduce; above).
  using SmemLayoutDQ = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<float>{},
                                              Shape<Int<kBlockM>, Int<kHeadDim>, Int<kDQStages>>{}));
  // Its transpose (d, q, stage): where the swapped dQ^T is stored.
  using SmemLayoutDQt = decltype(composition(
      SmemLayoutDQ{}, make_ordered_layout(Shape<Int<kHeadDim>, Int<kBlockM>, Int<kDQStages>>{}, Step<_2, _1, _3>{})));
  // kDQRowPerm's views, composed by mode: dS^T (keys, q, stage) written at rows sigma^-1 (q), dQ's wgmma row p
  // (q, d, stage) stored at sdQ row sigma(p).
  using DStWriteTiler = decltype(make_tile(_, BwdDQRowPermInv<kBlockM>{}, _));
  using DQStoreTiler = decltype(make_tile(BwdDQRowPerm<kBlockM>{}, _, _));

  using Pipeline = typename Base::Pipeline;
  using PipelineState = typename Base::PipelineState;
  static constexpr uint32_t kTmaBytesQ = Base::kTmaBytesQ;
  static constexpr uint32_t kTmaBytesKV = Base::kTmaBytesKV;

  struct SharedStorage {
    cute::array_aligned<Element, cosize_v<SmemLayoutQ>, 1024> q;
    cute::array_aligned<Element, cosize_v<SmemLayoutDO>, 1024> dout;
    cute::array_aligned<Element, cosize_v<SmemLayoutK>, 1024> k;
    cute::array_aligned<Element, cosize_v<SmemLayoutV>, 1024> v;
    cute::array_aligned<Element, cosize_v<SmemLayoutDS>, 1024> ds;
    cute::array_aligned<float, cosize_v<SmemLayoutDQ>, 1024> dq;
    cute::array_aligned<float, kBlockM * kStages, 16> lse_log2;
    cute::array_aligned<float, kBlockM * kStages, 16> delta;
    typename Pipeline::SharedStorage pipe_q;
    typename Pipeline::SharedStorage pipe_do;
    alignas(8) uint64_t barrier_kv;
    uint64_t barrier_dq_full[kDQStages];   // kDQFullArrivals consumer arrivals: sdQ stage written
    uint64_t barrier_dq_empty[kDQStages];  // 1 writer arrival: the reduce has read the stage
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static_assert(kSmemBytes <= 232448, "exceeds the 227 KB per-block shared memory of sm90");
};

}  // namespace flash::sm90
