"""Attention dropout without a GPU: the Philox4x32-10 reference against published known-answer
vectors, the C++ header (csrc/philox.h, compiled with the host compiler) against the reference,
the mask's statistics and structure, argument checks and the op schemas."""
import math
import pathlib
import shutil
import subprocess

import pytest
import torch

import flash_attn_cuda
from flash_attn_cuda._validate import DROPOUT_P_MAX, check_dropout_p
from flash_attn_cuda.reference import (dropout_keep_mask, dropout_keep_rate, dropout_scale, dropout_threshold,
                                       philox4x32_10)

ROOT = pathlib.Path(__file__).resolve().parent.parent
M = 0xFFFFFFFF

# Random123's kat_vectors for philox4x32 with 10 rounds: (counter, key) -> output.
KATS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((M, M, M, M), (M, M), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("counter,key,expected", KATS)
def test_philox_reference_matches_known_answers(counter, key, expected):
    out = philox4x32_10(*counter, *key)
    assert tuple(int(x) for x in out) == expected


def test_threshold_and_keep_rate_of_the_reference():
    # t = round((1 - p) * 256): keep iff byte < t, kept values scaled by 256 / t
    assert dropout_threshold(0.0) == 256 and dropout_threshold(0.5) == 128 and dropout_threshold(0.1) == 230
    assert dropout_threshold(1 / 1024) == 256 and dropout_threshold(DROPOUT_P_MAX) == 1
    assert dropout_threshold(0.999) == 0  # refused: check_dropout_p below
    assert dropout_keep_rate(0.1) == 230 / 256 and dropout_scale(0.1) == 256 / 230
    for p in (0.01, 0.1, 0.2, 0.3, 0.5, 0.9, DROPOUT_P_MAX):
        assert abs(dropout_keep_rate(p) - (1 - p)) <= 1 / 512 + 1e-12, p
    for p in (0.3, 0.1):
        keep = dropout_keep_mask(1234, 5678, 2, 3, 256, 256, p)         # 393216 elements
        n = keep.numel()
        rate, q = keep.float().mean().item(), dropout_keep_rate(p)
        sigma = math.sqrt(q * (1 - q) / n)
        assert abs(rate - q) < 5 * sigma, f"keep rate {rate:.5f} vs {q} (5 sigma = {5 * sigma:.5f})"


def test_dropout_p_that_keeps_nothing_is_refused():
    assert check_dropout_p(DROPOUT_P_MAX) == DROPOUT_P_MAX
    with pytest.raises(ValueError, match="8-bit resolution"):
        check_dropout_p(0.999)


def test_mask_is_a_function_of_seed_offset_and_position():
    a = dropout_keep_mask(1, 0, 2, 2, 64, 128, 0.5)
    assert torch.equal(a, dropout_keep_mask(1, 0, 2, 2, 64, 128, 0.5))
    # heads and batches differ (offset + b * nheads + h); a call's own offset reservation is batch * nheads
    assert not torch.equal(a[0, 0], a[0, 1]) and not torch.equal(a[0, 0], a[1, 0])
    assert torch.equal(a[1, 0], dropout_keep_mask(1, 2, 1, 1, 64, 128, 0.5)[0, 0])
    # the next call (offset advanced by batch * nheads, rounded up to 4 by PyTorch) and another seed differ
    for other in (dropout_keep_mask(1, 4, 2, 2, 64, 128, 0.5), dropout_keep_mask(2, 0, 2, 2, 64, 128, 0.5)):
        same = (other == a).float().mean().item()
        assert 0.45 < same < 0.55, same
    # sub-blocks of a larger call's mask are the smaller call's (no dependence on the sizes)
    assert torch.equal(dropout_keep_mask(1, 0, 2, 2, 100, 300, 0.5)[:, :, :64, :128], a)
    # offset carries into the high counter word
    big = dropout_keep_mask(1, (1 << 32) - 1, 1, 2, 16, 64, 0.5)
    assert torch.equal(big[0, 1], dropout_keep_mask(1, 1 << 32, 1, 1, 16, 64, 0.5)[0, 0])


_HOST_PROGRAM = r"""
#include <cstdio>
#include "philox.h"
int main() {
  unsigned long long seed, offset;
  int threshold, nheads;
  double p;
  while (std::scanf("%llu %llu %d %d %lf", &seed, &offset, &threshold, &nheads, &p) == 5) {
    int b, h, row, col;
    if (std::scanf("%d %d %d %d", &b, &h, &row, &col) != 4) { return 1; }
    flash::DropoutRng rng{unsigned(seed), unsigned(seed >> 32), offset + (unsigned long long)(b) * nheads + h,
                          unsigned(threshold)};
    flash::PhiloxCounter r = flash::philox4x32_10(flash::dropout_counter(rng, row, col), rng.key0, rng.key1);
    std::printf("%u %u %u %u %d %u\n", r.x, r.y, r.z, r.w, int(flash::dropout_keep(rng, row, col)),
                flash::dropout_threshold(p));
  }
  return 0;
}
"""


def _host_program(tmp_path):
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    src = tmp_path / "philox_check.cpp"
    src.write_text(_HOST_PROGRAM)
    exe = tmp_path / "philox_check"
    subprocess.run([cxx, "-std=c++17", "-O1", f"-I{ROOT / 'csrc'}", str(src), "-o", str(exe)], check=True, timeout=120)
    return exe


def _run_host(exe, cases):
    """cases: (seed, offset, p, nheads, b, h, row, col) -> [(four Philox words, keep)] from csrc/philox.h,
    whose threshold function (the binding's) must give the reference's t for p."""
    text = "".join(f"{s} {o} {dropout_threshold(p)} {nh} {p!r} {b} {h} {r} {c}\n" for s, o, p, nh, b, h, r, c in cases)
    lines = subprocess.run([str(exe)], input=text, capture_output=True, text=True, check=True,
                           timeout=120).stdout.splitlines()
    assert len(lines) == len(cases)
    for (_, _, p, *_), line in zip(cases, lines):
        assert int(line.split()[5]) == dropout_threshold(p), p
    return [([int(x) for x in line.split()[:4]], bool(int(line.split()[4]))) for line in lines]


def test_cpp_header_matches_the_reference(tmp_path):
    """csrc/philox.h compiled for the host (the kernels evaluate the same functions): Philox words
    at random large coordinates, and every element of a small grid against dropout_keep_mask."""
    exe = _host_program(tmp_path)
    g = torch.Generator().manual_seed(0)
    cases = []
    for _ in range(64):
        seed = int(torch.randint(0, 1 << 62, (1,), generator=g)) * 3
        offset = int(torch.randint(0, 1 << 40, (1,), generator=g)) * 4 + (1 << 32) - 8
        b, h = int(torch.randint(0, 3, (1,), generator=g)), int(torch.randint(0, 5, (1,), generator=g))
        row, col = int(torch.randint(0, 1 << 20, (1,), generator=g)), int(torch.randint(0, 1 << 20, (1,), generator=g))
        cases.append((seed, offset, 0.37, 5, b, h, row, col))
    # the threshold function at the edges of its range (1 - p exactly between two levels: 0.1 + 1/512 ...)
    for p in (1e-4, 1 / 512, 0.1, 0.1 + 1 / 512, 0.3, 0.5, 0.99, DROPOUT_P_MAX, 0.999):
        cases.append((7, 8, p, 1, 0, 0, 17, 33))
    for (seed, offset, p, nheads, b, h, row, col), (words, keep) in zip(cases, _run_host(exe, cases)):
        base = offset + b * nheads + h
        lane = (row % 8) * 4 + (col % 8) // 2
        ref = [int(x) for x in philox4x32_10((col // 64) * 2 + (col // 8) % 2, (row // 16) * 32 + lane, base & M,
                                             base >> 32, seed & M, seed >> 32)]
        assert words == ref, (seed, offset, b, h, row, col)
        slot = ((row // 8) % 2) * 8 + ((col // 16) % 4) * 2 + col % 2
        u8 = (ref[slot // 4] >> (8 * (slot % 4))) & 0xFF
        assert keep == (u8 < dropout_threshold(p))
    # every element of a small grid (two chunks down, three across, ragged)
    seed, offset, p, batch, nheads, rows, cols = 987654321987, 40, 0.45, 2, 3, 40, 150
    grid = [(seed, offset, p, nheads, b, h, r, c) for b in range(batch) for h in range(nheads)
            for r in range(rows) for c in range(cols)]
    keeps = torch.tensor([k for _, k in _run_host(exe, grid)]).view(batch, nheads, rows, cols)
    assert torch.equal(keeps, dropout_keep_mask(seed, offset, batch, nheads, rows, cols, p))


needs_extension = pytest.mark.skipif(not flash_attn_cuda._ops.HAS_EXTENSION, reason="extension not built")


@needs_extension
def test_schemas_carry_dropout():
    ops = torch.ops.flash_attn_cuda
    for name in ("fwd", "fwd_varlen"):
        schema = getattr(ops, name).default._schema
        assert schema.arguments[-1].name == "dropout_p" and str(schema.arguments[-1].default_value) == "0.0"
        assert [r.name for r in schema.returns] == ["out", "lse", "rng_state"]
    if flash_attn_cuda._ops.HAS_BACKWARD:
        for name in ("bwd", "bwd_varlen", "bwd_into", "bwd_varlen_into"):
            args = [a.name for a in getattr(ops, name).default._schema.arguments]
            assert args[-2:] == ["dropout_p", "rng_state"], name
    assert [a.name for a in ops.dropout_mask.default._schema.arguments] == [
        "rng_state", "batch", "nheads", "seqlen_q", "seqlen_k", "dropout_p"]


@needs_extension
def test_fake_impls_give_rng_state_shapes(fake):
    q = torch.empty(2, 64, 4, 64, dtype=torch.bfloat16, device="cuda")
    out, lse, rng = torch.ops.flash_attn_cuda.fwd(q, q, q, 0.125, False, False, -1, -1, 0.0, None, 0.1)
    assert rng.shape == (2,) and rng.dtype == torch.int64 and out.shape == q.shape and lse.shape == (2, 4, 64)
    _, _, rng0 = torch.ops.flash_attn_cuda.fwd(q, q, q, 0.125, False)
    assert rng0.shape == (0,)
    mask = torch.ops.flash_attn_cuda.dropout_mask(rng, 2, 4, 64, 64, 0.1)
    assert mask.shape == (2, 4, 64, 64) and mask.dtype == torch.bool


@needs_extension
def test_raw_ops_refuse_cpu_tensors_and_bad_dropout():
    q = torch.empty(1, 8, 1, 64, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="expected CUDA tensors"):
        torch.ops.flash_attn_cuda.fwd(q, q, q, 0.125, False, False, -1, -1, 0.0, None, 0.1)
    with pytest.raises(RuntimeError, match="expected CUDA tensors"):
        torch.ops.flash_attn_cuda.dropout_mask(torch.zeros(2, dtype=torch.int64), 1, 1, 8, 8, 0.1)
