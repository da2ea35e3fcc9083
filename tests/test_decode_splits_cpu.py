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


# The decode tile rule (heuristics.h decode_pick_wide): the shapes measured (GQA 32/8, d = 128: work =
# batch x 8; wide K/V blocks of 128 keys) -> whether the wide tile was the faster one.
PICK_PROGRAM = r"""
#include <cstdio>
#include "heuristics.h"
int main() {
  int work, sms, n_blocks;
  while (std::scanf("%d %d %d", &work, &sms, &n_blocks) == 3) {
    std::printf("%d\n", int(flash::decode_pick_wide(work, sms, n_blocks)));
  }
  return 0;
}
"""
PICK_MEASURED = {  # H100 SXM, twenty-second session: us base (mean of two runs) / wide, or wide's speed-up
    (8, 8): False,     # 1 x 1k: 7.07 / 7.47 (each wide block would stream 1 K/V block)
    (8, 32): False,    # 1 x 4k: 10.69 / 11.02
    (8, 64): False,    # 1 x 8k: 17.44 / 16.41, but 4 blocks per split (paged 16: 0.991x)
    (8, 256): True,    # 1 x 32k: 50.04 / 48.46
    (64, 8): False,    # 8 x 1k: 19.12 / 16.34, but paged 16 0.969x and 0.88 of contiguous
    (64, 32): True,    # 8 x 4k: 1.025x
    (64, 256): True,   # 8 x 32k: 1.017x
    (128, 8): True,    # 16 x 1k: 28.03 / 25.0 (paged 16 1.101x)
    (256, 8): False,   # 32 x 1k: wide 0.977x (H200, ninth session: ours / cuDNN 1.02 base, 0.93 wide)
    (256, 16): False,  # 32 x 2k: 0.990x
    (256, 32): False,  # 32 x 4k: 0.997x (paged 16 0.980x)
    (256, 64): True,   # 32 x 8k: 1.005x
    (256, 256): True,  # 32 x 32k: 1.008x
    (512, 32): False,  # 64 x 4k: 0.996x (paged 16 0.978x)
    (512, 256): True,  # 64 x 32k: 1.013x
    (32, 16): False,   # MHA 32/32 1 x 2k: 17.10 / 16.11, 4 blocks per split (MHA 8 x 4k is (256, 32): 1.007x)
    (32, 32): False,   # MHA 1 x 4k: 1.000x, paged 16 0.936x
    (64, 16): False,   # 8 x 2k: 1.014x, paged 16 0.950x
    (32, 256): True,   # MHA 1 x 32k: 1.019x (paged 16 0.996x)
}


@pytest.fixture(scope="module")
def pick(tmp_path_factory):
    exe = host_cxx.build(tmp_path_factory.mktemp("pick"), "pick", PICK_PROGRAM)
    return lambda cases: [bool(int(x)) for x in host_cxx.run(exe, cases).split()]


def test_tile_rule_measured(pick):
    got = pick([(w, H200_SMS, n) for w, n in PICK_MEASURED])
    assert dict(zip(PICK_MEASURED, got)) == PICK_MEASURED


def test_tile_rule_invariants(pick, splits):
    cases = [(w, sms, n) for w in (1, 8, 64, 100, 132, 133, 256, 1024) for sms in (46, 108, 132)
             for n in (0, 1, 3, 4, 8, 31, 32, 256, 1024)]
    got = pick(cases)
    counts, _ = splits([(w, sms, sms, n) for w, sms, n in cases if n > 0])
    count = dict(zip([c for c in cases if c[2] > 0], counts))
    for (w, sms, n), wide in zip(cases, got):
        if n == 0:
            assert not wide
            continue
        if wide:  # every wide thread block streams >= 4 K/V blocks (16 if split); several waves only from 64 blocks
            assert n // count[(w, sms, n)] >= (16 if count[(w, sms, n)] > 1 else 4), (w, sms, n)
            assert w * count[(w, sms, n)] <= sms or n >= 64, (w, sms, n)
