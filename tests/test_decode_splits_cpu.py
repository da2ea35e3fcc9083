"""The decode split-count rule (csrc/heuristics.h decode_num_splits), compiled for the host (g++):
the counts measured fastest on the H200 (the numbers beside the rule) and the rule's invariants over a
grid of shapes: 1 <= splits <= kMaxSplits, every split has a K/V block of the longest sequence, and a
split call's thread blocks fit one wave of the GPU's slots."""
import pytest

import host_cxx

PROGRAM = r"""
#include <cstdio>
#include "heuristics.h"
int main(int argc, char** argv) {
  int work, sms, slots, n_blocks;
  while (std::scanf("%d %d %d %d", &work, &sms, &slots, &n_blocks) == 4) {
    std::printf("%d\n", flash::decode_num_splits(work, sms, slots, n_blocks));
  }
  std::printf("max %d\n", flash::kMaxSplits);
  return 0;
}
"""

H200_SMS, H200_SLOTS = 132, 264  # two decode blocks per SM at d = 128 (decode_dispatch.cu)
# (work blocks, K/V blocks of 64 keys) -> the count measured fastest (GQA 32/8: work = batch x 8 heads)
MEASURED = {
    (8, 16): 16,    # 1 x 1k: 7.01 us at 16 splits; 4 9.38, 8 8.11, 32 8.48
    (8, 32): 16,    # 1 x 2k: 8.06 at 16; 8 9.89, 12 9.21, 24 8.88, 32 9.40
    (8, 128): 16,   # 1 x 8k: 13.58 at 16; 4 31.52, 8 21.38, 32 14.55
    (8, 64): 16,    # 1 x 4k: 9.75 at 16; 12 12.2, 24 11.05, 32 11.31
    (8, 512): 33,   # 1 x 32k: 37.6 at 33; 28 39.4, 24 42.0, 40 45.4
    (64, 32): 4,    # 8 x 2k: 23.12 at 4; 2 23.39, 6 26.51, 8 26.99
    (64, 64): 4,    # 8 x 4k: 37.58 at 4; 2 39.75, 6 41.46
    (64, 512): 4,   # 8 x 32k: 242.3 at 4; 3 263.5, 6 258.4, 8 243.8
}


@pytest.fixture(scope="module")
def splits(tmp_path_factory):
    exe = host_cxx.build(tmp_path_factory.mktemp("splits"), "splits", PROGRAM)

    def run(cases):
        out = host_cxx.run(exe, cases).split()
        assert out[-2] == "max"
        return [int(x) for x in out[:-2]], int(out[-1])
    return run


def test_measured_optimum_on_h200(splits):
    cases = [(w, H200_SMS, H200_SLOTS, n) for w, n in MEASURED]
    got, _ = splits(cases)
    assert dict(zip(MEASURED, got)) == MEASURED


def test_invariants(splits):
    cases = [(w, sms, sms * per_sm, n) for w in (1, 2, 3, 8, 16, 32, 64, 100, 211, 256, 1024)
             for sms in (1, 46, 108, 132) for per_sm in (1, 2, 3) for n in (1, 2, 3, 7, 16, 32, 63, 64, 65, 512, 2048)]
    got, max_splits = splits(cases)
    for (w, sms, slots, n), s in zip(cases, got):
        assert 1 <= s <= max_splits, (w, sms, slots, n, s)
        assert s <= n, (w, sms, slots, n, s)                   # no split without a K/V block
        assert s == 1 or w * s <= slots, (w, sms, slots, n, s)  # one wave
        if w >= 0.8 * slots:
            assert s == 1, (w, sms, slots, n, s)
