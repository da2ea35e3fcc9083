"""The persistent sm90 forward's tile order (csrc/sm90/fwd_scheduler.h) and its cost model
(tools/sm90_tile_order_model.py). The header's FwdScheduler is compiled for the host (g++) and
decoded for every tile of random shapes (causal with seqlen_q != seqlen_k, GQA, a last L2 section
with fewer pairs): the causal order must be a bijection onto (m_block, head, batch), longest first
inside each section, with a section's K/V within the L2 budget, and equal the model's mirror; the
non-causal order stays index order (also where the kernel draws its tiles from the counter: d = 64).
The model: the dynamic order's predicted makespan near the lower bound and above the index order and
the one-tile kernel at every benchmark shape."""
import os
import pathlib
import random
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "third_party"))
import sm90_tile_order_model as model  # noqa: E402

PROGRAM = r"""
#include <cstdio>
#include "sm90/fwd_scheduler.h"
using namespace flash;
// stdin: block_m kv_row_bytes causal seqlen_q seqlen_k nheads nheads_k batch per line.
// stdout per shape: "shape num_tiles section", then "m head batch" per tile in index order.
// The launch's part first: p.sm90_tiles (fwd_launch.h).
template <int kBlockM, bool kCausal>
void dump(FwdParams p, int kv_row_bytes) {
  sm90::FwdScheduler<kBlockM, kCausal>::fill_tile_order(p.sm90_tiles, p, kv_row_bytes);
  const sm90::FwdScheduler<kBlockM, kCausal> s(p);
  // Non-causal, also the order of the kernels that draw their tiles (kOrderInParams: d = 64), after it.
  const sm90::FwdScheduler<kBlockM, kCausal, true> s_params(p);
  if (s.tiles(p) != s.num_tiles || s_params.tiles(p) != s.num_tiles) { return; }  // the caller sees a missing shape
  std::printf("shape %d %d\n", s.tiles(p), p.sm90_tiles.section);
  for (int t = 0; t < s.tiles(p); ++t) {
    int m, h, b;
    s.decode(t, m, h, b, p);
    std::printf("%d %d %d", m, h, b);
    if (!kCausal) {
      s_params.decode(t, m, h, b, p);
      std::printf(" %d %d %d", m, h, b);
    }
    std::printf("\n");
  }
}
int main() {
  int bm, rb, causal;
  FwdParams p;
  while (std::scanf("%d %d %d %d %d %d %d %d", &bm, &rb, &causal, &p.seqlen_q, &p.seqlen_k, &p.nheads, &p.nheads_k,
                    &p.batch) == 8) {
    if (bm == 192) {
      if (causal) { dump<192, true>(p, rb); } else { dump<192, false>(p, rb); }
    } else if (bm == 128) {
      if (causal) { dump<128, true>(p, rb); } else { dump<128, false>(p, rb); }
    } else {
      return 2;
    }
  }
  return 0;
}
"""
TILES = {64: (192, 256), 128: (128, 512), 256: (128, 1024)}  # d: (kBlockM, K + V bytes per key, bf16)


def shapes():
    rnd = random.Random(11)
    out = [(64, True, 1024, 1024, 32, 32, 16), (128, True, 16384, 16384, 16, 16, 1), (128, True, 4096, 4096, 16, 16, 4),
           (256, True, 300, 1000, 6, 2, 3), (64, True, 1000, 300, 5, 5, 3), (128, False, 1000, 1000, 3, 1, 2),
           (128, True, 1, 1, 1, 1, 1)]
    for _ in range(25):
        d = rnd.choice((64, 128, 256))
        nheads_k = rnd.choice((1, 2, 3))
        out.append((d, rnd.random() < 0.8, rnd.randint(1, 3000), rnd.choice((rnd.randint(1, 3000), 65536, 200000)),
                    nheads_k * rnd.choice((1, 2, 4)), nheads_k, rnd.randint(1, 5)))
    return out


@pytest.fixture(scope="module")
def decoded(tmp_path_factory):
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("needs g++")
    try:
        import find_cutlass
        cutlass = find_cutlass.include_dir()
    except (ImportError, SystemExit, RuntimeError) as err:
        pytest.skip(f"CUTLASS headers not found ({err})")
    cuda = pathlib.Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"
    if not (cuda / "cuda_runtime_api.h").is_file():  # cute/config.hpp includes it
        pytest.skip(f"no cuda_runtime_api.h in {cuda} (set CUDA_HOME)")
    tmp = tmp_path_factory.mktemp("order")
    (tmp / "order.cpp").write_text(PROGRAM)
    subprocess.run([cxx, "-std=c++17", "-O1", f"-I{ROOT / 'csrc'}", f"-I{cutlass}", f"-I{cuda}", str(tmp / "order.cpp"),
                    "-o", str(tmp / "order")], check=True, timeout=300)
    cases = shapes()
    text = "".join(f"{TILES[d][0]} {TILES[d][1]} {int(c)} {sq} {sk} {h} {hk} {b}\n" for d, c, sq, sk, h, hk, b in cases)
    run = subprocess.run([str(tmp / "order")], input=text, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    blocks, shape = [], None
    for line in run.stdout.splitlines():
        if line.startswith("shape"):
            shape = [int(x) for x in line.split()[1:]] + [[]]
            blocks.append(shape)
        else:
            shape[2].append(tuple(int(x) for x in line.split()))
    assert len(blocks) == len(cases)
    return list(zip(cases, blocks))


def test_causal_order_is_longest_first_per_section_and_matches_the_model(decoded):
    for (d, causal, sq, sk, nheads, nheads_k, batch), (num_tiles, section, tiles) in decoded:
        if not causal:
            continue
        block_m = TILES[d][0]
        num_m = -(-sq // block_m)
        pairs = nheads * batch
        assert num_tiles == num_m * pairs == len(tiles)
        assert sorted(tiles) == sorted((m, h, b) for m in range(num_m) for h in range(nheads) for b in range(batch))
        ratio = nheads // nheads_k  # query heads per KV head: adjacent pairs that share K/V
        assert section == model.section_pairs(sk, d, nheads, nheads_k, batch)
        assert section % ratio == 0 and 1 <= section <= pairs
        kv_heads = section // ratio  # distinct K/V heads a section reads
        assert kv_heads * sk * TILES[d][1] <= model.L2_KV_BYTES or kv_heads == 1, (d, sk, section)
        for t, tile in enumerate(tiles):
            assert tile == model.decode_causal(t, num_m, nheads, pairs, section), (t, d, sq, sk)
        for start in range(0, num_tiles, section * num_m):  # each section: key blocks never grow
            keys = [model.tile_blocks(block_m, m, sq, sk, True)[0] for m, _, _ in tiles[start:start + section * num_m]]
            assert keys == sorted(keys, reverse=True), (d, sq, sk, start)


def test_noncausal_order_is_index_order(decoded):
    seen = 0
    for (d, causal, sq, _, nheads, _, batch), (num_tiles, _, tiles) in decoded:
        if causal:
            continue
        num_m = -(-sq // TILES[d][0])
        assert [t[:3] for t in tiles] == [(m, h, b) for b in range(batch) for h in range(nheads) for m in range(num_m)]
        seen += 1
    assert seen > 0


def test_drawn_noncausal_order_is_index_order(decoded):
    """The kernels that draw their non-causal tiles from the counter (d = 64) read the sizes from
    FwdParams::sm90_tiles: the same index order."""
    seen = 0
    for (d, causal, *_), (_, _, tiles) in decoded:
        if causal:
            continue
        assert [t[3:] for t in tiles] == [t[:3] for t in tiles], d
        seen += 1
    assert seen > 0


def test_model_fits_the_measured_noncausal_runs():
    for d in (64, 128):
        for kernel in ("one-tile", "persistent"):
            assert model.fit_noncausal(d, kernel)[2] < 0.02, (d, kernel)


def test_dynamic_order_balances_the_benchmark_shapes():
    for d in (64, 128):
        out, _ = model.predict(d)
        for i, s in enumerate(model.SEQLENS):
            assert out["dynamic"][i] >= 0.97 * out["bound"][i], (d, s, out)
            assert out["dynamic"][i] > out["index"][i] and out["dynamic"][i] >= out["one-tile"][i], (d, s, out)


def test_model_schedulers_on_a_known_case():
    """Small lists worked by hand: [1, 1, 1, 5, 5, 5] round-robin on 3 CTAs gives each 1 + 5; [5, 1 x 5]
    greedy on 2 gives one 5 and five 1s."""
    assert model.greedy([3, 3, 2, 2, 2], 3) == 5
    assert model.round_robin([3, 3, 2, 2, 2], 3) == 5
    assert model.round_robin([1, 1, 1, 5, 5, 5], 3) == 6
    assert model.greedy([5, 1, 1, 1, 1, 1], 2) == 5
