// The order in which one CTA of the sm90 backward (one K/V block) walks its query tiles. Torch- and
// CuTe-free, host and device: tests/test_bwd_walk_cpu.py compiles it with g++.
#pragma once

#include "../host_device.h"

// The rotated walk: a non-causal kernel with the dQ writer starts each K/V block at a different query
// tile. Why: every K/V block of a head walks tiles 0, 1, .. in step, so at each step all of them
// reduce-add into the same dQ tile (same L2 lines), and under store-first (bwd_api.h) all but one wait
// for that one's store: d = 64 non-causal lost 3 % with store-first on and the walk in step (main kernel
// 881 -> 958 us at 1k). Spread evenly, no two blocks of a head are at the same tile in the same step
// while the head has at least as many query tiles as K/V blocks.
// Measured (seventeenth session, H100 SXM, bf16, backward TFLOP/s against the in-step walk with the
// default store-first policy, two calls, A / B / A; benchmarks/results/h100_rotate.md): rotated with
// store-first everywhere, d = 64 non-causal +4 / +4 / +1-2 / +0.5-1 % at 512 / 1k / 2k / 4k (fwd+bwd
// +2-3 % to 2k), d = 128 non-causal -2..+2 % (neutral; identical builds differed by up to 4 % in the same
// calls). So the default (2) rotates the plain d = 64 non-causal kernel, the one measured and tested
// (tests/test_sm90_bwd_gpu.py, the sanitizers plain and deterministic), and bwd_store_first stores first
// there; the dropout kernels keep the in-step walk (not run rotated). 0: never; 1: every non-causal kernel
// with the dQ writer (comparisons).
#ifndef FLASH_ATTN_CUDA_SM90_BWD_ROTATE
#define FLASH_ATTN_CUDA_SM90_BWD_ROTATE 2
#endif

namespace flash::sm90 {

// Whether the non-deterministic kernel of head dim `headdim` with the dQ writer rotates its walk: not
// causal (its blocks start at different tiles already); the policy above.
constexpr bool bwd_rotates(int headdim, bool causal, bool dropout) {
  constexpr int kMode = FLASH_ATTN_CUDA_SM90_BWD_ROTATE;
  static_assert(kMode >= 0 && kMode <= 2, "FLASH_ATTN_CUDA_SM90_BWD_ROTATE is 0, 1 or 2");
  if (causal || kMode == 0) { return false; }
  return kMode == 1 || (headdim == 64 && !dropout);
}

// Whether the kernel <kCausal, kDropout, kTurns> with (kDQByTma) or without the dQ writer rotates: not
// deterministic either (the turns go in K/V block order at every tile: block n would wait at each tile
// for the blocks below it to walk there, a staircase), only the dQ writer's tiles.
template <int kHeadDim, bool kCausal, bool kDropout, bool kTurns, bool kDQByTma>
constexpr bool kBwdRotates = !kTurns && kDQByTma && bwd_rotates(kHeadDim, kCausal, kDropout);

// Steps m_min <= m < m_max (the pipelines' and sdQ's stages count them: i = m - m_min); step m works on
// query tile tile(m). Not rotated: tile(m) = m. Rotated: K/V block n_block of n_blocks starts at
// m_min + rot, rot = n_block * tiles / n_blocks (tiles = m_max - m_min), and wraps around.
template <bool kRotate>
struct QWalk {
  int m_min, m_max;
  int rot;  // 0 <= rot < tiles; kRotate only

  FLASH_HD int tile(int m) const {
    if constexpr (kRotate) {
      const int t = m + rot;
      return t < m_max ? t : t - (m_max - m_min);
    } else {
      return m;
    }
  }
};

// The walk of K/V block n_block (0 <= n_block < n_blocks, the grid's blocks) over tiles [m_min, m_max).
// 32-bit: a 64-bit division is a called subroutine in the kernel; the product wraps only past 2^32
// (seqlen_q x seqlen_k beyond ~2^45), and the remainder keeps rot a tile offset whatever it is (the
// spread, not correctness, depends on it).
template <bool kRotate>
FLASH_HD QWalk<kRotate> make_q_walk(int m_min, int m_max, int n_block, int n_blocks) {
  const unsigned tiles = unsigned(m_max - m_min);
  if (!kRotate || m_max <= m_min || n_blocks <= 0) { return {m_min, m_max, 0}; }
  return {m_min, m_max, int(unsigned(n_block) * tiles / unsigned(n_blocks) % tiles)};
}

}  // namespace flash::sm90
