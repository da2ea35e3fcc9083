// Per-head-dim tile sizes of the forward kernel: one table, one row per compiled head dim.
//
// Constraints: smem = (kBlockM + 2*kBlockN) * d * 2 B must fit 227 KB (sm90) / 163 KB (sm80);
// per-thread accumulators are kBlockM*d/threads (O) + kBlockM*kBlockN/threads (S) floats and
// must stay well under 255 registers with the MMA fragments, or the kernel spills.
// Measured on the H200 (bf16, FA2-paper grid, non-causal / causal at seqlen 8k, TFLOP/s):
// see benchmarks/NOTES.md for the numbers behind each row and the alternatives tried.
#pragma once

namespace flash {

template <int kHeadDim> struct FwdTileConfig;

//                           kBlockM           kBlockN           warps
template <> struct FwdTileConfig<32>  { static constexpr int kBlockM = 128, kBlockN = 128, kNWarps = 4; };
template <> struct FwdTileConfig<64>  { static constexpr int kBlockM = 128, kBlockN = 128, kNWarps = 4; };
template <> struct FwdTileConfig<96>  { static constexpr int kBlockM = 128, kBlockN = 64,  kNWarps = 4; };
template <> struct FwdTileConfig<128> { static constexpr int kBlockM = 128, kBlockN = 64,  kNWarps = 4; };
template <> struct FwdTileConfig<160> { static constexpr int kBlockM = 128, kBlockN = 64,  kNWarps = 8; };
template <> struct FwdTileConfig<192> { static constexpr int kBlockM = 128, kBlockN = 64,  kNWarps = 8; };
template <> struct FwdTileConfig<224> { static constexpr int kBlockM = 128, kBlockN = 64,  kNWarps = 8; };
template <> struct FwdTileConfig<256> { static constexpr int kBlockM = 128, kBlockN = 64,  kNWarps = 8; };

}  // namespace flash
