"""Bank conflicts of the sm90 backward's dQ stores into shared memory, without a GPU: tools/sdq_banks.cu,
compiled host-only with nvcc, takes each consumer thread's st.shared.v2.f32 addresses from the real CuTe
C-fragment partition and sdQ layout (csrc/sm90/bwd_traits.h BwdSmemLayoutDQ) and counts the wavefronts per store
under the half-warp rule of 8-byte accesses. Checked: the 128-byte-swizzle layout costs 4 (what Nsight Compute
measured on the H100, benchmarks/NOTES.md twenty-seventh session: 2-way conflicts) and the 8-column blocks
(FLASH_ATTN_CUDA_SM90_BWD_SDQ_COL8=1) the ideal 2, at d = 64 and 128.
Skipped, with the reason, where nvcc or the CUTLASS headers are missing."""
from __future__ import annotations

import pathlib
import re

import pytest

import host_cxx

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wavefronts(tmp_path_factory):
    stdout = host_cxx.build_cute(tmp_path_factory.mktemp("sdq_banks"), ROOT / "tools" / "sdq_banks.cu", std="c++17")
    out = {}
    for line in stdout.splitlines():
        m = re.match(r"d = (\d+), (.+?)\s+wavefronts per STS.64: mean ([\d.]+), worst (\d+)", line)
        assert m, line
        out[(int(m.group(1)), m.group(2))] = (float(m.group(3)), int(m.group(4)))
    assert len(out) == 4, stdout
    return out


@pytest.mark.parametrize("d", [64, 128])
def test_swizzled_sdq_stores_are_two_way_conflicted(wavefronts, d):
    assert wavefronts[(d, "128-byte swizzle")] == (4.0, 4)


@pytest.mark.parametrize("d", [64, 128])
def test_column_block_sdq_stores_are_conflict_free(wavefronts, d):
    assert wavefronts[(d, "8-column blocks")] == (2.0, 2)
