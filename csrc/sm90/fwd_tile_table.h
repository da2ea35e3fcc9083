// Tile choice of the sm90 forward per head dim: kBlockN, stages, and kNConsumerWG, the consumer
// warpgroups of 64 query rows each (kBlockM = 64 kNConsumerWG: 2 -> 128 rows, 3 -> 192 rows;
// fwd_traits.h). kBlockNDropout / kNConsumerWGDropout: the dropout variant's (kDropout,
// fwd_kernel.h), which needs whole 16 x 64 Philox chunks per block (dropout.h apply_dropout:
// kBlockN % 64 == 0).
// Numbers: H200, bf16, TFLOP/s on the FA2 grid (batch * seqlen = 16k, hidden 2048), filled in as
// measured (benchmarks/NOTES.md, "Hopper forward (issue 11)").
#pragma once

#include "fwd_traits.h"

namespace flash::sm90 {

template <int kHeadDim>
struct FwdTile;

// d = 64: 192 x 128 with three consumer warpgroups (FA3's d = 64 tile: 192 rows, 128 keys when
// P stays in registers), 2 stages; 24 KB Q + 2 x 2 x 16 KB K/V = 88 KB. Why: at d = 64 a key block
// is half the GEMM work per softmax element of d = 128, so with two warpgroups the tensor cores
// idle while both do softmax; with three, two can have GEMMs in flight while one does softmax.
// setmaxnreg 24 / 3 x 160: O 32 + S 64 + P 32 registers per thread fit 160; 192 keys (S 96 + P 48
// + O 32) would not (FA3 then keeps P in shared memory).
// H200 bf16, 1k / 4k / 16k (run 2; sm80 245.9 / 296.9 / 320.0, causal 215.3 / 280.6 / 304.5):
//   128 x 128, 2 WG: 304.9 / 424.7 / 449.6, causal 248.9 / 396.5 / 454.0  (chosen until issue 11's d=64 step)
//   128 x 192, 2 WG: 280.1 / 436.0 / 474.3, causal 221.4 / 391.9 / 448.3
//   192 x 128, 3 WG: not yet measured  <- chosen. Prediction (Python bench, where 2 WG gave 368 / 432 /
//     451 = 0.88 / 0.95 / 0.97x cuDNN at 1k / 4k / 16k): +5-10 % at >= 2k (~460 / ~480 at 4k / 16k,
//     >= 1.0x cuDNN); 1k about even (1024 rows = 5.3 tiles of 192: 11 % of the last tiles idle).
// Persistent kernel (the default since 2026-12-03): the last query tile of a sequence that is not a
// multiple of 192 rows has one or two warpgroups with no live row; they skip their GEMMs (fwd_persistent.h
// kIdleWarpgroups): causal 1k 274 -> 299 TFLOP/s (0.83 -> 0.92x cuDNN), results/history/h200_idlewg_*.
// Non-causal, the same short tiles handed out by the tile counter instead of round-robin (fwd_persistent.h
// kDynamicNonCausal): 512 / 1k / 2k / 4k +3-10 / +5 / +2 / +1 %, results/history/h200_dynidx_*.
// Dropout: stays 128 x 128 with two warpgroups (measured, tested) until a FEATURES + BACKWARD build
// runs tests/test_dropout_gpu.py on 192 x 128: that variant compiles here with 0 spills under
// setmaxnreg 160 (ptxas, nvcc 13.0; registers up to R151), HGMMA present, no trap.
// 3 / 4 K/V stages (persistent kernel, 2026-12-03, results/history/h200_d64st_*; the next tile's first
// blocks loaded further ahead): 2 stages 425-428 / 441-442 / 491 / 516-517 TFLOP/s at 512 / 1k / 4k / 16k,
// causal 228-229 / 296-298 / 440-441 / 508-509; 3: 429 / 438 / 492 / 517, causal 231 / 303 / 441 / 510;
// 4: 439 / 440 / 492 / 517, causal 228 / 298 / 441 / 509. Within noise: 2 stays.
// FLASH_ATTN_CUDA_SM90_FWD64_CAUSAL_WG=2 gives the causal kernel a 128 x 128 two-warpgroup tile (no idle
// warpgroups in the last tile of 512 / 1k rows, 4 / 8 tiles of 128 against 2.7 / 5.3 of 192). Measured
// (seventeenth session, H100 SXM, causal forward against 192 x 128 in one call, A B A,
// results/h100_fwd64_wg2.md): +2.8 % at 512, +9.4 % at 1k (0.85-0.88 -> 0.95x cuDNN), -6 / -7 / -12 % at
// 2k / 4k / 16k. Default 3: the non-causal tile for every causal call; the two-warpgroup one serves short
// causal calls as a kernel of its own (kNConsumerWGShortCausal, FLASH_ATTN_CUDA_SM90_SHORT_CAUSAL builds).
#ifndef FLASH_ATTN_CUDA_SM90_FWD64_CAUSAL_WG
#define FLASH_ATTN_CUDA_SM90_FWD64_CAUSAL_WG 3
#endif
template <>
struct FwdTile<64> {
  static constexpr int kBlockN = 128;
  static constexpr int kBlockNNonCausal = kBlockN;
  static constexpr int kBlockNDropout = 128;
  static constexpr int kStages = 2;
  static constexpr int kNConsumerWG = 3;
  static constexpr int kNConsumerWGCausal = FLASH_ATTN_CUDA_SM90_FWD64_CAUSAL_WG;
  static constexpr int kNConsumerWGShortCausal = 2;  // fwd_api.h fwd_short_causal
  static constexpr int kNConsumerWGDropout = 2;
  static constexpr int kClusterMNonCausal = 1;
};

// d = 128: 128 x 128, 2 stages; 32 KB Q + 2 x 2 x 32 KB K/V = 160 KB.
// H200 bf16, seqlen 1k / 4k / 16k, run 1 (sm80 324.6 / 347.7 / 352.3) | run 2 (325.7 / 349.5 / 345.0):
//   128 x 128 overlap + ping-pong: 520.5 / 657.2 / 638.3, causal 322.4 / 547.6 / 631.8  <- chosen
//                                | 521.7 / 661.6 / 690.6, causal 316.8 / 551.1 / 687.0
//   128 x 176 overlap + ping-pong: 512.6 / 638.9 / 648.5, causal 300.3 / 542.2 / 648.8
//                                | 515.4 / 624.9 / 622.9, causal 308.8 / 554.9 / 656.7
//   128 x 128 no overlap:          457.7 / 564.9 / 553.3, causal 295.8 / 478.6 / 524.6
// fp16 (run 2): 443.7 / 586.5 / 572.4, causal 299.6 / 529.7 / 663.3 (sm80 274.0 / 299.2 / 336.4)
// 3 stages (224 KB, cuDNN's kernel uses 227 KB; Python bench, same run as cuDNN, 2026-12-03,
// results/history/h200_fwd_s3_*): 512.7 / 587.0 / 613.0, causal 370.4 / 518.2 / 610.1 against 2 stages'
// 559.8 and 517.0 (two runs) / 592.1 / 613.2, causal 371.2 / 519.8 / 608.3: no gain, 2 stays.
// Non-causal options, FA3's d = 128 non-causal configuration (off; measured, H100 SXM, bf16, against the mean
// of two base runs in one call, FA3 and cuDNN in each run, results/history/h100_fwdclu_*: cluster -0.2 / +1.5 /
// +0.3 % at 2048 / 8064 / 8192, cluster + 176 keys -2.7 / +2.9 / +1.2 %; FA3's own 8064 (no cluster) ran at or
// above its 8192 (cluster), so the cluster is not where FA3's 2-5 % lead comes from):
// FLASH_ATTN_CUDA_SM90_FWD128_NC_BLOCK_N: the non-causal kernel's keys per block (FA3: 176; our 128 x 176
// without a cluster measured above). FLASH_ATTN_CUDA_SM90_FWD128_CLUSTER=2: the non-causal persistent
// kernel runs in clusters of two CTAs on adjacent query tiles of one head, each CTA loading half of
// every K / V block and multicasting it to both (fwd_persistent.h kClusterM): half the K / V traffic
// from L2 per tile. At 660 TFLOP/s a 128-row tile reads K / V from L2 at ~5 TB/s (128 FLOP per byte).
#ifndef FLASH_ATTN_CUDA_SM90_FWD128_NC_BLOCK_N
#define FLASH_ATTN_CUDA_SM90_FWD128_NC_BLOCK_N 128
#endif
#ifndef FLASH_ATTN_CUDA_SM90_FWD128_CLUSTER
#define FLASH_ATTN_CUDA_SM90_FWD128_CLUSTER 1
#endif
template <>
struct FwdTile<128> {
  static constexpr int kBlockN = 128;
  static constexpr int kBlockNNonCausal = FLASH_ATTN_CUDA_SM90_FWD128_NC_BLOCK_N;
  static constexpr int kBlockNDropout = 128;
  static constexpr int kStages = 2;
  static constexpr int kNConsumerWG = 2;
  static constexpr int kNConsumerWGCausal = kNConsumerWG;
  static constexpr int kNConsumerWGDropout = 2;
  static constexpr int kClusterMNonCausal = FLASH_ATTN_CUDA_SM90_FWD128_CLUSTER;
};

// d = 256: 128 x 80, 2 stages; 64 KB Q + 2 x 2 x 40 KB K/V = 224 KB (of 227). O is 128
// registers per consumer thread, S 40, P 20. H200 bf16, 1k / 4k / 16k (run 2; sm80 257.5 /
// 281.7 / 315.7, causal 185.0 / 239.5 / 312.9):
//   128 x 80: 556.8 / 733.5 / 706.6, causal 358.0 / 579.6 / 771.6  <- chosen
//   128 x 64: 512.9 / 629.1 / 611.6, causal 347.9 / 550.6 / 730.7  <- dropout (80 is not a multiple
//             of 64; without dropout this tile is 8-14 % below 128 x 80)
template <>
struct FwdTile<256> {
  static constexpr int kBlockN = 80;
  static constexpr int kBlockNNonCausal = kBlockN;
  static constexpr int kBlockNDropout = 64;
  static constexpr int kStages = 2;
  static constexpr int kNConsumerWG = 2;
  static constexpr int kNConsumerWGCausal = kNConsumerWG;
  static constexpr int kNConsumerWGDropout = 2;
  static constexpr int kClusterMNonCausal = 1;
};

// kCausal: the causal kernel's tile (kNConsumerWGCausal, kBlockN; the non-causal one kBlockNNonCausal; the
// dropout variant keeps its own).
template <typename Element, int kHeadDim, bool kDropout = false, bool kCausal = false>
using FwdTraitsFor =
    FwdTraits<kHeadDim,
              kDropout ? FwdTile<kHeadDim>::kBlockNDropout
                       : (kCausal ? FwdTile<kHeadDim>::kBlockN : FwdTile<kHeadDim>::kBlockNNonCausal),
              FwdTile<kHeadDim>::kStages, Element, true,
              kDropout ? FwdTile<kHeadDim>::kNConsumerWGDropout
                       : (kCausal ? FwdTile<kHeadDim>::kNConsumerWGCausal : FwdTile<kHeadDim>::kNConsumerWG)>;

// The short causal kernel's tile (fwd_api.h fwd_short_causal; head dims whose FwdTile has
// kNConsumerWGShortCausal): the causal tile's keys and stages, kNConsumerWGShortCausal warpgroups.
template <typename Element, int kHeadDim>
using FwdTraitsShortCausal = FwdTraits<kHeadDim, FwdTile<kHeadDim>::kBlockN, FwdTile<kHeadDim>::kStages, Element, true,
                                       FwdTile<kHeadDim>::kNConsumerWGShortCausal>;

// CTAs per cluster of the non-causal persistent kernel without dropout (fwd_persistent.h kClusterM).
template <int kHeadDim>
constexpr int kFwdClusterM = FwdTile<kHeadDim>::kClusterMNonCausal;
static_assert(kFwdClusterM<128> == 1 || kFwdClusterM<128> == 2, "FLASH_ATTN_CUDA_SM90_FWD128_CLUSTER: 1 or 2");

}  // namespace flash::sm90
