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
