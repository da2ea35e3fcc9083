"""The sm90 backward's walk over query tiles (csrc/sm90/bwd_walk.h QWalk, make_q_walk), compiled for the
host (g++): every K/V block visits each of its tiles exactly once (the stages count steps, the tiles come
from tile(step), so a repeated or missed tile would drop or double a block's dQ / dK / dV part); not
rotated, the walk is the identity (the default kernels' order); rotated, the blocks of a head are never
at the same tile in the same step while there are at least as many tiles as blocks, and block 0 walks in
order."""
import pytest

import host_cxx

PROGRAM = r"""
#include <cstdio>
#include "sm90/bwd_walk.h"
// Input lines: m_min m_max n_blocks rotate. Output: per K/V block one line of tile(step), steps m_min ..
template <bool kRotate>
void walk(int m_min, int m_max, int n_blocks) {
  for (int n = 0; n < n_blocks; ++n) {
    const auto w = flash::sm90::make_q_walk<kRotate>(m_min, m_max, n, n_blocks);
    for (int step = m_min; step < m_max; ++step) { std::printf("%d ", w.tile(step)); }
    std::printf("\n");
  }
}
int main() {
  int m_min, m_max, n_blocks, rotate;
  while (std::scanf("%d %d %d %d", &m_min, &m_max, &n_blocks, &rotate) == 4) {
    if (rotate) { walk<true>(m_min, m_max, n_blocks); } else { walk<false>(m_min, m_max, n_blocks); }
  }
  return 0;
}
"""

# (m_min, m_max, n_blocks): non-causal calls walk [0, ceil(seqlen_q / 64)) with ceil(seqlen_k / 128) blocks
CASES = [(0, t, n) for t in (1, 2, 3, 7, 8, 16, 17, 64, 65) for n in (1, 2, 3, 4, 8, 9, 32, 33, 100)] + \
        [(3, 10, 5), (5, 6, 2), (2, 40, 7)]


@pytest.fixture(scope="module")
def walks(tmp_path_factory):
    exe = host_cxx.build(tmp_path_factory.mktemp("walk"), "walk", PROGRAM)

    def run(rotate):
        lines = host_cxx.run(exe, [case + (rotate,) for case in CASES]).splitlines()
        out, i = {}, 0
        for case in CASES:
            out[case] = [[int(x) for x in line.split()] for line in lines[i:i + case[2]]]
            i += case[2]
        assert i == len(lines)
        return out
    return run


@pytest.mark.parametrize("rotate", [False, True])
def test_every_block_visits_each_tile_once(walks, rotate):
    for (m_min, m_max, n_blocks), per_block in walks(rotate).items():
        assert len(per_block) == n_blocks
        for tiles in per_block:
            assert sorted(tiles) == list(range(m_min, m_max)), (m_min, m_max, n_blocks, tiles)


def test_not_rotated_is_the_identity(walks):
    for (m_min, m_max, _), per_block in walks(False).items():
        assert all(tiles == list(range(m_min, m_max)) for tiles in per_block)


def test_rotated_blocks_never_share_a_tile_in_a_step(walks):
    for (m_min, m_max, n_blocks), per_block in walks(True).items():
        assert per_block[0] == list(range(m_min, m_max))
        if n_blocks <= m_max - m_min:
            for step in range(m_max - m_min):
                at = [tiles[step] for tiles in per_block]
                assert len(set(at)) == n_blocks, (m_min, m_max, n_blocks, step, at)


POLICY = r"""
#include <cstdio>
#include <initializer_list>
#include "sm90/bwd_walk.h"
// Prints bwd_rotates(d, causal, dropout) for d in 64, 128, 256, causal and dropout in 0, 1.
int main() {
  for (int d : {64, 128, 256})
    for (int causal : {0, 1})
      for (int dropout : {0, 1})
        std::printf("%d %d %d %d\n", d, causal, dropout, int(flash::sm90::bwd_rotates(d, causal, dropout)));
  return 0;
}
"""


@pytest.mark.parametrize("mode", [None, 0, 1, 2])
def test_rotation_policy(tmp_path, mode):
    """The default (2) rotates only the plain d = 64 non-causal kernel (the one measured and tested rotated,
    seventeenth session); 1 every non-causal one; 0 none; causal never."""
    define = "" if mode is None else f"#define FLASH_ATTN_CUDA_SM90_BWD_ROTATE {mode}\n"
    exe = host_cxx.build(tmp_path, "policy", define + POLICY)
    got = {tuple(int(x) for x in line.split()[:3]): line.split()[3] == "1"
           for line in host_cxx.run(exe, []).splitlines()}
    assert len(got) == 12
    effective = 2 if mode is None else mode
    for (d, causal, dropout), rotates in got.items():
        want = (not causal) and (effective == 1 or (effective == 2 and d == 64 and not dropout))
        assert rotates == want, (mode, d, causal, dropout)
