"""The varlen backward's scratch layout (csrc/params.h): every sequence's rows, padded up to a
multiple of kBwdRowAlign, lie inside [0, bwd_varlen_scratch_rows) and no two sequences overlap.
Compiles a small C++ program against the real header (no CUDA needed) and checks random and
edge-case length lists."""
import subprocess

import host_cxx

PROGRAM = r"""
#include <cstdio>
#include <random>
#include <vector>
#include "params.h"
using namespace flash;
// Exit 1 on the first length list whose padded sequences overlap or overflow the scratch.
static bool check(const std::vector<int>& lengths) {
  int cu = 0;
  const int batch = static_cast<int>(lengths.size());
  int total = 0;
  for (int s : lengths) total += s;
  long long prev_end = 0;
  for (int b = 0; b < batch; ++b) {
    const long long start = bwd_varlen_scratch_start(cu, b);
    const long long end = start + (lengths[b] + kBwdRowAlign - 1) / kBwdRowAlign * kBwdRowAlign;
    if (start % kBwdRowAlign != 0 || start < prev_end || end > bwd_varlen_scratch_rows(total, batch)) {
      std::printf("bad layout at sequence %d of %d (start %lld, end %lld, prev_end %lld)\n", b, batch, start, end,
                  prev_end);
      return false;
    }
    prev_end = end;
    cu += lengths[b];
  }
  return true;
}
int main() {
  std::mt19937 rng(1234);
  std::vector<std::vector<int>> cases = {{}, {0}, {1}, {128}, {129}, {127, 1}, {0, 0, 0}, {255, 1, 255, 1}};
  for (int trial = 0; trial < 20000; ++trial) {
    std::vector<int> lengths(1 + rng() % 12);
    const int max_len = 1 + rng() % 600;
    for (int& s : lengths) s = (rng() % 4 == 0) ? 0 : static_cast<int>(rng() % (max_len + 1));
    cases.push_back(lengths);
  }
  for (const auto& c : cases) if (!check(c)) return 1;
  std::printf("%zu cases ok\n", cases.size());
  return 0;
}
"""


def test_varlen_scratch_sequences_never_overlap(tmp_path):
    exe = host_cxx.build(tmp_path, "layout", PROGRAM)
    run = subprocess.run([str(exe)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "cases ok" in run.stdout
