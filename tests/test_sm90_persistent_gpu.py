"""The persistent sm90 forward (csrc/sm90/fwd_persistent.h; the default build's, FLASH_ATTN_CUDA_SM90_PERSISTENT
unset, 1 or both; CTAs per call from FLASH_ATTN_CUDA_SM90_PERSISTENT_CTAS): on shapes where every CTA runs
several tiles (1, 3 and 7 CTAs; one per SM on a large grid), ragged seqlens, causal with seqlen_q > seqlen_k
(tiles with no visible key between running ones), GQA, dropout, its O and LSE must equal the base's bit for
bit (the same arithmetic per tile), and the base's must pass FA2's rule against a float32 reference. The
base: the one-tile kernel where the build has it (FLASH_ATTN_CUDA_SM90_PERSISTENT=both), else the
persistent kernel with one CTA per SM, the default build's kernel (then checked against the float32
reference, and the 1 / 3 / 7-CTA runs against it: other tile-to-CTA orders, the same bits).
Skipped where the GPU, the build's sm90 family or its persistent kernel is missing.
A hang here is the kernel's bug: run this file under `timeout` (benchmarks/NOTES.md, issue 11 v4).
"""
import os

import pytest
import torch
from fa2_checks import assert_fa2_close, assert_lse_close, poison
import flash_attn_cuda
from flash_attn_cuda import attention
from flash_attn_cuda.reference import attention_ref

pytestmark = pytest.mark.gpu

SM90_HDIMS = flash_attn_cuda._ops.sm90_head_dims() if flash_attn_cuda._ops.HAS_EXTENSION else ()
HDIMS = [d for d in (64, 128, 256) if d in SM90_HDIMS] or [128]
DTYPES = flash_attn_cuda.compiled_dtypes() or (torch.bfloat16,)
KNOB = "FLASH_ATTN_CUDA_SM90_PERSISTENT_CTAS"
CTAS = ["1", "3", "7", "sms"]
BASE = {"ctas": "0"}  # the knob value of the kernel the others are compared with (the fixture sets it)


@pytest.fixture(autouse=True)
def _sm90_persistent(monkeypatch):
    if not flash_attn_cuda._ops.HAS_SM90 or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the sm90 family needs 90a in the build and a compute capability 9.0 GPU")
    monkeypatch.setenv("FLASH_ATTN_CUDA_FAMILY", "sm90")
    monkeypatch.delenv(KNOB, raising=False)
    q = torch.randn(1, 256, 2, HDIMS[0], device="cuda", dtype=torch.bfloat16)
    monkeypatch.setenv(KNOB, "1")
    try:
        attention(q, q, q)
    except RuntimeError as e:
        if "no persistent sm90 forward" in str(e):
            pytest.skip("this build has no persistent sm90 forward (FLASH_ATTN_CUDA_SM90_PERSISTENT=0)")
        raise
    monkeypatch.setenv(KNOB, "0")
    try:
        attention(q, q, q)
        BASE["ctas"] = "0"
    except RuntimeError as e:
        assert "left out" in str(e), str(e)
        BASE["ctas"] = "sms"
    monkeypatch.delenv(KNOB)


def run(q, k, v, causal, ctas=None, dropout_p=0.0, seed=0, family="sm90"):
    """(out, lse) of the forward, which `family` must have served; ctas: the knob's value (None: the
    base, BASE)."""
    batch, seqlen_q, nheads, _ = q.shape
    poison((q.shape, q.dtype), ((batch, nheads, seqlen_q), torch.float32))
    os.environ[KNOB] = BASE["ctas"] if ctas is None else ctas
    try:
        torch.manual_seed(seed)
        out, lse = attention(q, k, v, dropout_p, causal=causal, return_lse=True)
        torch.cuda.synchronize()
    finally:
        os.environ.pop(KNOB, None)
    if family is not None:
        assert flash_attn_cuda._ops.last_fwd_family() == family, flash_attn_cuda._ops.last_fwd_family()
    return out, lse


def assert_same(a, b, what):
    assert torch.equal(a, b), f"{what}: max |diff| {(a.float() - b.float()).abs().max().item():.3e}"


# (seqlen_q, seqlen_k): 128-row tiles cut mid-tile; seqlen_q > seqlen_k leaves causal tiles with no key.
SHAPES = [(1000, 77), (113, 203), (129, 257), (255, 1000), (1000, 255), (2049, 2049)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hdim", HDIMS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seqlen_q,seqlen_k", SHAPES)
def test_persistent_equals_tile_kernel(seqlen_q, seqlen_k, causal, hdim, dtype):
    torch.manual_seed(seqlen_q * 3 + seqlen_k + hdim)
    q = torch.randn(2, seqlen_q, 4, hdim, device="cuda", dtype=dtype)
    k = torch.randn(2, seqlen_k, 2, hdim, device="cuda", dtype=dtype)  # GQA: 2 query heads per K/V head
    v = torch.randn(2, seqlen_k, 2, hdim, device="cuda", dtype=dtype)
    out0, lse0 = run(q, k, v, causal)
    ref, ref_lse = attention_ref(q, k, v, causal, compute_dtype=torch.float32)
    lowp, _ = attention_ref(q, k, v, causal, compute_dtype=None)
    assert_fa2_close("out", out0, ref, lowp)
    assert_lse_close(lse0, ref_lse)
    for ctas in CTAS:
        out, lse = run(q, k, v, causal, ctas)
        assert_same(out, out0, f"out, {ctas} CTAs")
        assert_same(lse, lse0, f"lse, {ctas} CTAs")


@pytest.mark.parametrize("causal", [False, True])
def test_persistent_one_cta_per_sm_on_a_large_grid(causal):
    """1024 tiles over one CTA per SM (132 on an H200): the shape the benchmark times."""
    hdim, dtype = HDIMS[-1] if 128 not in HDIMS else 128, DTYPES[0]
    torch.manual_seed(7)
    q, k, v = (torch.randn(2, 4096, 16, hdim, device="cuda", dtype=dtype) for _ in range(3))
    out0, lse0 = run(q, k, v, causal)
    out, lse = run(q, k, v, causal, "sms")
    assert_same(out, out0, "out")
    assert_same(lse, lse0, "lse")


def test_persistent_causal_l2_sections_with_a_short_last_one():
    """The causal order's L2 sections (fwd_scheduler.h): d = 128, 16k keys (8 MB of K/V per KV head ->
    4 KV heads, x3 query heads per KV head = 12 pairs per section), 18 pairs: a full section and a
    last one of 6; ragged seqlen_q, one CTA per SM and 7 CTAs, bit for bit vs the one-tile kernel."""
    if 128 not in HDIMS:
        pytest.skip("needs the d = 128 sm90 unit")
    torch.manual_seed(13)
    q = torch.randn(3, 16384 - 100, 6, 128, device="cuda", dtype=DTYPES[0])
    k, v = (torch.randn(3, 16384, 2, 128, device="cuda", dtype=DTYPES[0]) for _ in range(2))
    out0, lse0 = run(q, k, v, True)
    for ctas in ("sms", "7"):
        out, lse = run(q, k, v, True, ctas)
        assert_same(out, out0, f"out, {ctas} CTAs")
        assert_same(lse, lse0, f"lse, {ctas} CTAs")


@pytest.mark.parametrize("ctas", ["sms", "3"])
@pytest.mark.parametrize("causal", [True, False])
def test_persistent_drawn_tiles_in_a_cuda_graph(causal, ctas):
    """The tile counter (causal, and d = 64 non-causal: fwd_persistent.h kDynamicNonCausal) is zeroed on
    the stream by every launch: a captured graph replays correctly (a counter left at its last value
    would skip every tile of the second replay). 3 CTAs: each draws many tiles, so the ring's slots are
    reused within a replay."""
    if not causal and 64 not in HDIMS:
        pytest.skip("d = 64 (the non-causal kernel that draws its tiles) is not in this build")
    hdim, dtype = (HDIMS[0] if causal else 64), DTYPES[0]
    torch.manual_seed(17)
    q, k, v = (torch.randn(2, 1000, 4, hdim, device="cuda", dtype=dtype) for _ in range(3))
    os.environ[KNOB] = ctas
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            attention(q, k, v, causal=causal)  # warm-up outside the capture
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = attention(q, k, v, causal=causal)
    finally:
        os.environ.pop(KNOB, None)
    assert flash_attn_cuda._ops.last_fwd_family() == "sm90", flash_attn_cuda._ops.last_fwd_family()
    for replay in range(3):
        for x in (q, k, v):
            x.copy_(torch.randn_like(x))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        out0, _ = run(q, k, v, causal)
        assert_same(out, out0, f"out, replay {replay}")


@pytest.mark.parametrize("causal", [False, True])
def test_persistent_dropout_equals_tile_kernel(causal):
    """The kDropout variant loops too: same seed, same mask, same bits (the mask is per (batch, head, row, key))."""
    if not flash_attn_cuda._ops.HAS_FEATURES:
        pytest.skip("built with FLASH_ATTN_CUDA_FEATURES=0: dropout raises")
    hdim, dtype = HDIMS[0], DTYPES[0]
    torch.manual_seed(11)
    q = torch.randn(2, 1000, 4, hdim, device="cuda", dtype=dtype)
    k, v = (torch.randn(2, 777, 2, hdim, device="cuda", dtype=dtype) for _ in range(2))
    out0, lse0 = run(q, k, v, causal, dropout_p=0.1, seed=5, family=None)
    if flash_attn_cuda._ops.last_fwd_family() != "sm90":
        pytest.skip("no sm90 dropout units in this build (FLASH_ATTN_CUDA_FEATURES=0)")
    for ctas in ("3", "sms"):
        out, lse = run(q, k, v, causal, ctas, dropout_p=0.1, seed=5)
        assert_same(out, out0, f"out, {ctas} CTAs")
        assert_same(lse, lse0, f"lse, {ctas} CTAs")


def test_knob_asking_for_a_left_out_kernel_raises_only_where_sm90_runs(monkeypatch):
    """In a build without the one-tile kernel (the default) the knob value 0 is an error for a call the
    sm90 family serves, and ignored by one the sm80 family serves (FLASH_ATTN_CUDA_FAMILY=sm80)."""
    if BASE["ctas"] == "0":
        pytest.skip("this build has the one-tile kernel (FLASH_ATTN_CUDA_SM90_PERSISTENT=both)")
    q = torch.randn(1, 256, 2, HDIMS[0], device="cuda", dtype=torch.bfloat16)
    monkeypatch.setenv(KNOB, "0")
    with pytest.raises(RuntimeError, match="left out"):
        attention(q, q, q)
    monkeypatch.setenv("FLASH_ATTN_CUDA_FAMILY", "sm80")
    out = attention(q, q, q)
    assert flash_attn_cuda._ops.last_fwd_family() == "sm80"
    assert torch.isfinite(out).all()


def test_knob_rejects_garbage(monkeypatch):
    q = torch.randn(1, 256, 2, HDIMS[0], device="cuda", dtype=torch.bfloat16)
    monkeypatch.setenv(KNOB, "many")
    with pytest.raises(RuntimeError, match=KNOB):
        attention(q, q, q)
