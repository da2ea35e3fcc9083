// The order in which one CTA of the sm90 backward (one K/V block) walks its query tiles. Torch- and
// CuTe-free, host and device: tests/test_bwd_walk_cpu.py compiles it with g++.
#pragma once

#include "../host_device.h"

// Experiment (sixteenth session, compiled, not yet run on a GPU): FLASH_ATTN_CUDA_SM90_BWD_ROTATE=1 has
// the non-causal, non-deterministic kernels with the dQ writer (d = 64 / 128) start each K/V block at a
// different query tile. Why: every K/V block of a head walks tiles 0, 1, .. in step, so at each step
// all of them reduce-add into the same dQ tile (same L2 lines), and under store-first (bwd_api.h) all
// but one wait for that one's store: d = 64 non-causal lost 3 % with store-first on (main kernel 881 ->
// 958 us at 1k; the default policy leaves it off there, so the case to measure is this macro with
// FLASH_ATTN_CUDA_SM90_BWD_STORE_FIRST=1). Spread evenly, no two blocks of a head are at the same tile in
// the same step while the head has at least as many query tiles as K/V blocks.
#ifndef FLASH_ATTN_CUDA_SM90_BWD_ROTATE
#define FLASH_ATTN_CUDA_SM90_BWD_ROTATE 0
#endif

namespace flash::sm90 {

// Whether the kernel <kCausal, kTurns> with (kDQByTma) or without the dQ writer rotates its walk: not
// causal (its blocks start at different tiles already), not deterministic (the turns go in K/V block
// order at every tile: block n would wait at each tile for the blocks below it to walk there, a
// staircase), only the dQ writer's tiles.
template <bool kCausal, bool kTurns, bool kDQByTma>
constexpr bool kBwdRotates = FLASH_ATTN_CUDA_SM90_BWD_ROTATE != 0 && !kCausal && !kTurns && kDQByTma;

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
