"""Which causal d = 64 forward calls the short causal kernel takes (csrc/sm90/fwd_api.h fwd_short_causal,
compiled for the host with g++): causal, no dropout, seqlen_q up to 1024, and only where the regular
causal tile's 192-row tiles leave more query rows idle than 128-row tiles would (512, 1024: yes; 768,
where 192-row tiles fit exactly: no); never other head dims, non-causal or dropout calls, nor beyond 1k
(measured: benchmarks/results/h100_short_causal.md)."""
import pytest

import host_cxx

PROGRAM = r"""
#include <cstdio>
#include "sm90/fwd_api.h"
// Input lines: headdim causal dropout seqlen_q. Output: 1 if the short causal kernel is picked.
int main() {
  int d, causal, dropout, seqlen_q;
  while (std::scanf("%d %d %d %d", &d, &causal, &dropout, &seqlen_q) == 4) {
    std::printf("%d\n", int(flash::sm90::fwd_short_causal(d, causal != 0, dropout != 0, seqlen_q)));
  }
  return 0;
}
"""


@pytest.fixture(scope="module")
def picks(tmp_path_factory):
    exe = host_cxx.build(tmp_path_factory.mktemp("short_causal"), "short_causal", PROGRAM, cuda_headers=True)

    def run(cases):
        return [bool(int(x)) for x in host_cxx.run(exe, cases).split()]
    return run


def idle_rows(seqlen, tile):
    return -seqlen % tile


def test_causal_d64_picks_by_idle_rows(picks):
    lengths = list(range(1, 1300))
    got = picks([(64, 1, 0, s) for s in lengths])
    for s, short in zip(lengths, got):
        assert short == (s <= 1024 and idle_rows(s, 192) > idle_rows(s, 128)), s
    by_len = dict(zip(lengths, got))
    assert by_len[512] and by_len[1024] and by_len[640]
    assert not by_len[768] and not by_len[1152] and not by_len[1088]


def test_never_other_calls(picks):
    cases = [(d, c, p, s) for d in (32, 64, 96, 128, 256) for c in (0, 1) for p in (0, 1) for s in (1, 512, 1024)
             if not (d == 64 and c == 1 and p == 0)]
    assert not any(picks(cases))
