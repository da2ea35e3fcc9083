"""The sm90 backward's count of K/V blocks that add into a dQ tile (csrc/sm90/dq_adders.h dq_tile_adders),
compiled for the host (g++), against the kernel's own rule for which query blocks a K/V block walks
(bwd_kernel.h q_block_range, restated here): every block non-causal; causal, K/V block n walks the query
blocks from the one holding its first visible query, n0 - (seqlen_k - seqlen_q), to the end. The count
decides which rows the dQ conversion of a store-first kernel reads (bwd_api.h; none: dQ = 0: nobody
stored into those tiles), and causal count - 1 is the block that starts nearest the tile (the deterministic
turns' first, bwd_kernel.h dq_turn_number)."""
import pytest

import host_cxx

BLOCK_M, BLOCK_N = 64, 128  # the sm90 backward tiles with the dQ writer (d = 64 / 128, bwd_tile_table.h)

PROGRAM = r"""
#include <cstdio>
#include "sm90/dq_adders.h"
int main() {
  int m, sq, sk, causal;
  while (std::scanf("%d %d %d %d", &m, &sq, &sk, &causal) == 4) {
    std::printf("%d\n", flash::sm90::dq_tile_adders<%BM%, %BN%>(m, sq, sk, causal != 0));
  }
  return 0;
}
"""


def q_block_range(n, sq, sk, causal):
    """bwd_kernel.h q_block_range: the query blocks [m_min, m_max) K/V block n walks."""
    m_max = (sq + BLOCK_M - 1) // BLOCK_M
    if not causal:
        return 0, m_max
    first = n * BLOCK_N - (sk - sq)
    return (0 if first <= 0 else first // BLOCK_M), m_max


def walkers(m, sq, sk, causal):
    n_blocks = (sk + BLOCK_N - 1) // BLOCK_N
    return [n for n in range(n_blocks) if q_block_range(n, sq, sk, causal)[0] <= m < q_block_range(n, sq, sk, causal)[1]]


@pytest.fixture(scope="module")
def adders(tmp_path_factory):
    source = PROGRAM.replace("%BM%", str(BLOCK_M)).replace("%BN%", str(BLOCK_N))
    exe = host_cxx.build(tmp_path_factory.mktemp("adders"), "adders", source)

    def run(cases):
        return [int(x) for x in host_cxx.run(exe, cases).split()]
    return run


SEQLENS = [1, 17, 63, 64, 65, 127, 128, 129, 200, 255, 256, 300, 511, 512, 1000, 1024]


def test_adders_equal_the_blocks_that_walk_the_tile(adders):
    cases = [(m, sq, sk, c) for sq in SEQLENS for sk in SEQLENS for c in (False, True)
             for m in range((sq + BLOCK_M - 1) // BLOCK_M)]
    got = adders(cases)
    bad = [(case, g, len(walkers(*case))) for case, g in zip(cases, got) if g != len(walkers(*case))]
    assert not bad, bad[:10]


def test_causal_first_arrival_is_the_last_walker(adders):
    """Causal: the walkers of tile m are 0 .. adders - 1, and the last of them starts its walk nearest to m;
    rows with no walker exist only when seqlen_q > seqlen_k."""
    cases = [(m, sq, sk, True) for sq in SEQLENS for sk in SEQLENS for m in range((sq + BLOCK_M - 1) // BLOCK_M)]
    for case, count in zip(cases, adders(cases)):
        ns = walkers(*case)
        assert ns == list(range(count)), case
        if count:
            starts = [q_block_range(n, case[1], case[2], True)[0] for n in ns]
            assert starts[-1] == max(starts), case
        else:
            assert case[1] > case[2], case
