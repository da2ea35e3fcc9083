"""Bank conflicts of the sm90 backward's dQ stores into shared memory, without a GPU: tools/sdq_banks.cu,
compiled host-only with nvcc, takes each consumer thread's st.shared.v2.f32 addresses from the real CuTe
C-fragment partition and sdQ layout (csrc/sm90/bwd_traits.h SmemLayoutDQ) and counts the wavefronts per store
under the half-warp rule of 8-byte accesses. Checked: the plain 128-byte swizzle costs 4 (what Nsight Compute
measured on the H100, benchmarks/NOTES.md twenty-seventh session: 2-way conflicts) and the stores through the
DQ_ROW_PERM view (FLASH_ATTN_CUDA_SM90_BWD_DQ_ROW_PERM=1) the ideal 2, at d = 64 and 128; and that view's rows
match dS^T's permuted write end to end (every query's dQ lands in its own sdQ row), which fails with either
view left out.
Skipped, with the reason, where nvcc or the CUTLASS headers are missing."""
from __future__ import annotations

import pathlib
import re

import pytest

import host_cxx

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    stdout = host_cxx.build_cute(tmp_path_factory.mktemp("sdq_banks"), ROOT / "tools" / "sdq_banks.cu", std="c++17")
    waves = {}
    for m in re.finditer(r"d = (\d+), (.+?)\s+wavefronts per STS.64: mean ([\d.]+), worst (\d+)", stdout):
        waves[(int(m.group(1)), m.group(2))] = (float(m.group(3)), int(m.group(4)))
    assert len(waves) == 4, stdout
    m = re.search(r"row permutation mismatches: d = 64 tile 64 (\d+), d = 128 tile 64 (\d+), d = 64 tile 128 (\d+)",
                  stdout)
    one = re.search(r"one side only: d = 128 tile 64 (\d+) \(dQ plain\), (\d+) \(dS plain\)", stdout)
    assert m and one, stdout
    return waves, [int(g) for g in m.groups()], [int(g) for g in one.groups()]


@pytest.mark.parametrize("d", [64, 128])
def test_swizzled_sdq_stores_are_two_way_conflicted(model, d):
    assert model[0][(d, "128-byte swizzle")] == (4.0, 4)


@pytest.mark.parametrize("d", [64, 128])
def test_permuted_row_stores_are_conflict_free(model, d):
    assert model[0][(d, "rows permuted")] == (2.0, 2)


def test_row_permutation_maps_every_query_to_its_sdq_row(model):
    assert model[1] == [0, 0, 0]
    assert all(n > 0 for n in model[2])  # the check can fail: either view left out
