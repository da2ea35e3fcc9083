"""The tile tables keyed by shared-memory budget (csrc/smem_budget.h, fwd_tile_config.h,
bwd_tile_config.h), without a GPU: tests/smem_tiles.cu, compiled host-only with nvcc, prints every
(direction, head dim, budget) row with its shared memory as the traits compute it, and the tile the
dispatch picks under real GPUs' opt-in limits. Checked here:

- every row fits its budget, every tile divides its operands (the same rules as the static_asserts,
  restated so a table edit that slipped past them fails here too);
- every head dim has a tile on A100 (163 KB) and sm86/sm89 (99 KB) in both directions;
- the rows with a tile of their own are exactly the extra instantiations gen_instantiations.py writes.

Skipped, with the reason, where nvcc or the CUTLASS headers are missing.
"""
from __future__ import annotations

import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import gen_instantiations  # noqa: E402
import host_cxx  # noqa: E402

HEAD_DIMS = (32, 64, 96, 128, 160, 192, 224, 256)
BUDGETS_KB = (227, 163, 99)
# cudaDevAttrMaxSharedMemoryPerBlockOptin: H100/H200, A100, sm86/sm89
GPU_OPTIN = {"sm90": 232448, "sm80": 166912, "sm86/sm89": 101376}


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    stdout = host_cxx.build_cute(tmp_path_factory.mktemp("smem_tiles"), ROOT / "tests" / "smem_tiles.cu")
    rows, picks = {}, {}
    for line in stdout.splitlines():
        kind, direction, *fields = line.split()
        values = [int(v) for v in fields]
        if kind == "row":
            d, kb, own, bm, bn, warps, stages, smem, sdp, dkv, dq = values
            rows[(direction, d, kb)] = dict(own=bool(own), bm=bm, bn=bn, warps=warps, stages=stages, smem=smem,
                                            sdp=sdp, dkv=dkv, dq=dq)
        else:
            d, budget, kb, smem = values
            picks[(direction, d, budget)] = (kb, smem)
    assert len(rows) == 2 * len(HEAD_DIMS) * len(BUDGETS_KB)
    return rows, picks


def _fwd_divides(d, t):
    threads = 32 * t["warps"]
    rows_per_pass = threads // ((64 if d % 64 == 0 else 32) // 8)
    return (t["bm"] % (16 * t["warps"]) == 0 and t["bn"] % 16 == 0 and t["bm"] % rows_per_pass == 0
            and t["bn"] % rows_per_pass == 0)


def _bwd_divides(d, t):
    w, bm, bn = t["warps"], t["bm"], t["bn"]
    rows_per_pass = 32 * w // ((64 if d % 64 == 0 else 32) // 8)
    return (w % t["sdp"] == 0 and w % t["dkv"] == 0 and w % t["dq"] == 0
            and bm % (16 * t["sdp"]) == 0 and bn % (16 * (w // t["sdp"])) == 0
            and bn % (16 * t["dkv"]) == 0 and d % (16 * (w // t["dkv"])) == 0
            and bm % (16 * t["dq"]) == 0 and d % (16 * (w // t["dq"])) == 0
            and 128 % bm == 0 and bm % rows_per_pass == 0 and bn % rows_per_pass == 0 and t["stages"] in (1, 2))


def _smem(direction, d, t):
    """Shared memory from the tile shape (2-byte elements): the traits' formula restated."""
    if direction == "fwd":
        return (t["bm"] + 2 * t["bn"]) * d * 2
    return (2 * t["stages"] * t["bm"] * d + 2 * t["bn"] * d + 2 * t["bm"] * t["bn"]) * 2


@pytest.mark.parametrize("direction", ("fwd", "bwd"))
def test_every_row_fits_its_budget_and_divides_its_operands(table, direction):
    rows, _ = table
    for d in HEAD_DIMS:
        for kb in BUDGETS_KB:
            t = rows[(direction, d, kb)]
            assert t["smem"] <= kb * 1024, (direction, d, kb, t)
            assert t["smem"] == _smem(direction, d, t), (direction, d, kb, t)
            divides = _fwd_divides if direction == "fwd" else _bwd_divides
            assert divides(d, t), (direction, d, kb, t)


@pytest.mark.parametrize("gpu", GPU_OPTIN)
@pytest.mark.parametrize("direction", ("fwd", "bwd"))
def test_every_head_dim_has_a_tile_on_every_ampere_ada_hopper_gpu(table, direction, gpu):
    rows, picks = table
    budget = GPU_OPTIN[gpu]
    for d in HEAD_DIMS:
        kb, smem = picks[(direction, d, budget)]
        assert kb in BUDGETS_KB and 0 < smem <= budget, (direction, d, gpu, kb, smem)
        # the first row, largest budget first, that fits: no larger row would have fit
        for larger in BUDGETS_KB[:BUDGETS_KB.index(kb)]:
            assert rows[(direction, d, larger)]["smem"] > budget, (direction, d, gpu, larger)


def test_default_rows_are_picked_on_the_h200(table):
    rows, picks = table
    for direction in ("fwd", "bwd"):
        for d in HEAD_DIMS:
            assert picks[(direction, d, GPU_OPTIN["sm90"])] == (227, rows[(direction, d, 227)]["smem"])


def test_budget_below_every_row_picks_nothing(table):
    _, picks = table
    # 64 KB: below the backward's 99 KB rows at d = 64 (96 KB); the pick reports "none"
    assert picks[("bwd", 64, 64 * 1024)] == (0, -1)
    assert picks[("fwd", 64, 64 * 1024)][0] == 227  # the 32 KB forward tile still fits


def test_own_rows_are_the_extra_instantiations(table):
    rows, _ = table
    own = {(direction, d, kb) for (direction, d, kb), t in rows.items() if t["own"] and kb != 227}
    listed = {(direction, d, kb) for (direction, d), kbs in gen_instantiations.SMEM_TILES.items() for kb in kbs}
    assert own == listed
    # an own row differs from the next larger budget's tile; an inherited row equals it
    for (direction, d, kb), t in rows.items():
        if kb == 227:
            continue
        larger = rows[(direction, d, 227 if kb == 163 else 163)]
        same = all(t[k] == larger[k] for k in ("bm", "bn", "warps", "stages", "sdp", "dkv", "dq"))
        assert same != t["own"], (direction, d, kb)


@pytest.mark.extension
def test_knob_parsing_as_the_calls_read_it(monkeypatch):
    """FLASH_ATTN_CUDA_SMEM_BUDGET through the built extension (no GPU needed): KB, 0 when unset or
    empty, one RuntimeError naming the variable for anything but a positive integer."""
    from flash_attn_cuda import _ops
    knob = "FLASH_ATTN_CUDA_SMEM_BUDGET"
    monkeypatch.delenv(knob, raising=False)
    assert _ops.smem_budget_setting() == 0
    for value, kb in (("163", 163), (" 99 ", 99), ("", 0)):
        monkeypatch.setenv(knob, value)
        assert _ops.smem_budget_setting() == kb
    for bad in ("0", "-5", "abc", "99KB", "1e3", "12345678"):
        monkeypatch.setenv(knob, bad)
        with pytest.raises(RuntimeError, match=knob):
            _ops.smem_budget_setting()
