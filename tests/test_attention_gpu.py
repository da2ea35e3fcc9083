"""flash_attn_cuda.attention on the GPU against a float32 reference.

The forward tests run on each kernel family (the `family` fixture, tests/conftest.py: sm80 always,
sm90 on a compute capability 9.0 GPU with a 90a build) and check which one served every call.

Tolerance rule (FA2's): our max error vs the float32 reference must be at most twice the max
error of the same computation done by PyTorch in the low precision, plus 1e-5. Every output
buffer is poisoned (NaN) before the call, so an element the kernel fails to write shows up.
"""
import math

import pytest
import torch
from fa2_checks import assert_served, poison
import flash_attn_cuda
from flash_attn_cuda import attention
from flash_attn_cuda.reference import attention_ref

pytestmark = pytest.mark.gpu

# Without a GPU or the extension conftest skips every test here: the lists only need to exist.
HDIMS = flash_attn_cuda.compiled_head_dims() or (64,)
DTYPES = flash_attn_cuda.compiled_dtypes() or (torch.bfloat16,)

SM90_HDIMS = flash_attn_cuda._ops.sm90_head_dims()


def hdim_for(family, hdim):
    """hdim, or for the sm90 family the nearest head dim it has a kernel for (so its tests run it)."""
    if family != "sm90" or hdim in SM90_HDIMS or not SM90_HDIMS:
        return hdim
    return min(SM90_HDIMS, key=lambda d: abs(d - hdim))


SEQLENS = [(1, 1), (7, 7), (64, 128), (113, 203), (128, 128), (255, 1000), (1000, 255), (2049, 2049)]


def run_and_check(q, k, v, causal=False, softmax_scale=None, family=None):
    """family: the FLASH_ATTN_CUDA_FAMILY the call runs with; checks which family served it."""
    batch, seqlen_q, nheads, d = q.shape
    poison((q.shape, q.dtype), ((batch, nheads, seqlen_q), torch.float32))
    out, lse = attention(q, k, v, causal=causal, softmax_scale=softmax_scale, return_lse=True)
    torch.cuda.synchronize()
    if family is not None:
        assert_served(family, q, k)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert lse.shape == (batch, nheads, seqlen_q) and lse.dtype == torch.float32

    ref, ref_lse = attention_ref(q, k, v, causal, softmax_scale, compute_dtype=torch.float32)
    ref_lowp, _ = attention_ref(q, k, v, causal, softmax_scale, compute_dtype=None)
    assert not out.isnan().any(), "output has NaN (unwritten or wrong)"
    err = (out.float() - ref).abs().max().item()
    err_pt = (ref_lowp.float() - ref).abs().max().item()
    assert err <= 2 * err_pt + 1e-5, f"max error {err:.3e} > 2 x PyTorch's {err_pt:.3e} + 1e-5"

    empty = ref_lse == float("-inf")  # rows that see no key
    assert torch.equal(lse == float("-inf"), empty), "LSE must be -inf exactly on rows with no visible key"
    assert torch.all(out.float().abs().amax(-1).transpose(1, 2)[empty] == 0), "rows with no key must be 0"
    if (~empty).any():
        # fp32 scores summed in another order: error relative to the LSE's magnitude
        # (large-magnitude inputs give LSEs in the thousands).
        lse_err = ((lse[~empty] - ref_lse[~empty]).abs() / (1 + ref_lse[~empty].abs())).max().item()
        assert lse_err <= 1e-4, f"LSE relative error {lse_err:.3e}"
    return out, lse


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hdim", HDIMS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seqlen_q,seqlen_k", SEQLENS)
def test_matches_reference(seqlen_q, seqlen_k, causal, hdim, dtype, family):
    if family == "sm90" and hdim not in SM90_HDIMS:
        pytest.skip(f"no sm90 kernel for head dim {hdim} (the fallback: test_forced_sm90_falls_back_to_sm80)")
    torch.manual_seed(seqlen_q * 7 + seqlen_k + hdim)
    batch, nheads = (2, 3) if seqlen_q * seqlen_k < 1_000_000 else (1, 2)
    q = torch.randn(batch, seqlen_q, nheads, hdim, device="cuda", dtype=dtype)
    k = torch.randn(batch, seqlen_k, nheads, hdim, device="cuda", dtype=dtype)
    v = torch.randn(batch, seqlen_k, nheads, hdim, device="cuda", dtype=dtype)
    run_and_check(q, k, v, causal, family=family)


# The edges of the 192-row query tile (sm90 d=64: three consumer warpgroups of 64 rows,
# sm90/fwd_tile_table.h) and of the 128-row ones: one row short of / at / past one and two tiles, a
# last tile whose third warpgroup has no row (193, 385) and whose rows all lie past seqlen_q in one
# warpgroup's TMA box; causal with seqlen_q > seqlen_k (the first rows see no key: O = 0, LSE = -inf).
TILE_EDGE_SEQLENS = [(191, 191), (192, 192), (193, 193), (193, 64), (383, 129), (384, 384), (385, 200),
                     (129, 385), (64, 383), (257, 255)]
# d=64 (the 192-row tile) and d=128 (a 128-row one) where compiled, else the first compiled head dim.
EDGE_HDIMS = [d for d in HDIMS if d in (64, 128)] or list(HDIMS[:1])


@pytest.mark.parametrize("hdim", EDGE_HDIMS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seqlen_q,seqlen_k", TILE_EDGE_SEQLENS)
def test_query_tile_edges(seqlen_q, seqlen_k, causal, hdim, family):
    if family == "sm90" and hdim not in SM90_HDIMS:
        pytest.skip(f"no sm90 kernel for head dim {hdim}")
    torch.manual_seed(seqlen_q * 3 + seqlen_k + hdim)
    dtype = DTYPES[0]
    q = torch.randn(2, seqlen_q, 3, hdim, device="cuda", dtype=dtype)
    k = torch.randn(2, seqlen_k, 3, hdim, device="cuda", dtype=dtype)
    v = torch.randn(2, seqlen_k, 3, hdim, device="cuda", dtype=dtype)
    run_and_check(q, k, v, causal, family=family)


@pytest.mark.parametrize("hdim", [8, 40, 72, 136, 200, 248])
@pytest.mark.parametrize("causal", [False, True])
def test_uncompiled_head_dims_run_next_size_up(hdim, causal, family):
    if not any(d >= hdim for d in HDIMS):
        pytest.skip(f"no compiled head dim >= {hdim} in this build")
    dtype = DTYPES[0]
    q, k, v = (torch.randn(2, 150, 2, hdim, device="cuda", dtype=dtype) for _ in range(3))
    run_and_check(q, k, v, causal, family=family)


@pytest.mark.parametrize("batch,nheads", [(1, 1), (3, 5), (8, 16)])
def test_batch_and_heads(batch, nheads, family):
    hdim, dtype = hdim_for(family, HDIMS[-1]), DTYPES[0]
    q = torch.randn(batch, 300, nheads, hdim, device="cuda", dtype=dtype)
    k = torch.randn(batch, 257, nheads, hdim, device="cuda", dtype=dtype)
    v = torch.randn(batch, 257, nheads, hdim, device="cuda", dtype=dtype)
    run_and_check(q, k, v, causal=True, family=family)


@pytest.mark.parametrize("nheads,nheads_k", [(8, 2), (6, 1)])
@pytest.mark.parametrize("causal", [False, True])
def test_grouped_query_attention(nheads, nheads_k, causal, family):
    hdim, dtype = hdim_for(family, HDIMS[0]), DTYPES[0]
    q = torch.randn(2, 190, nheads, hdim, device="cuda", dtype=dtype)
    k = torch.randn(2, 333, nheads_k, hdim, device="cuda", dtype=dtype)
    v = torch.randn(2, 333, nheads_k, hdim, device="cuda", dtype=dtype)
    run_and_check(q, k, v, causal, family=family)


@pytest.mark.parametrize("causal", [False, True])
def test_strided_inputs(causal, family):
    """Views whose batch/seq/head strides are not those of a contiguous tensor."""
    hdim, dtype = hdim_for(family, HDIMS[0]), DTYPES[-1]
    # (batch, nheads, seqlen, d) storage seen as (batch, seqlen, nheads, d), as after a transpose
    q = torch.randn(2, 4, 177, hdim, device="cuda", dtype=dtype).transpose(1, 2)
    # a packed qkv projection: (batch, seqlen, 3, nheads, d) sliced
    kv = torch.randn(2, 211, 3, 4, hdim, device="cuda", dtype=dtype)
    k, v = kv[:, :, 1], kv[:, :, 2]
    assert not q.is_contiguous() and not k.is_contiguous()
    out, _ = run_and_check(q, k, v, causal, family=family)
    dense, _ = attention(q.contiguous(), k.contiguous(), v.contiguous(), causal=causal, return_lse=True)
    assert_served(family, q, k)
    assert torch.equal(out, dense), "strided and contiguous inputs must give identical results"


@pytest.mark.parametrize("scale", [10.0, 30.0])
def test_large_magnitude_inputs(scale, family):
    hdim, dtype = hdim_for(family, HDIMS[0]), DTYPES[0]
    q = scale * torch.randn(2, 500, 2, hdim, device="cuda", dtype=dtype)
    k = scale * torch.randn(2, 500, 2, hdim, device="cuda", dtype=dtype)
    v = torch.randn(2, 500, 2, hdim, device="cuda", dtype=dtype)
    out, _ = run_and_check(q, k, v, causal=True, family=family)
    # Scores in the thousands: PyTorch's own low-precision error is large here (bf16 scores
    # can flip near-tied maxima), so also bound ours directly. Our scores are fp32; only P and
    # O are rounded to the low precision: |error| <= ~2 eps * max|v|.
    ref, _ = attention_ref(q, k, v, True, None, compute_dtype=torch.float32)
    bound = 2 * torch.finfo(dtype).eps * v.abs().max().item()
    err = (out.float() - ref).abs().max().item()
    assert err <= bound, f"max error {err:.3e} > {bound:.3e}"


def test_softmax_scale_and_rows_without_keys(family):
    hdim, dtype = hdim_for(family, HDIMS[0]), DTYPES[0]
    q = torch.randn(1, 300, 2, hdim, device="cuda", dtype=dtype)
    k = torch.randn(1, 70, 2, hdim, device="cuda", dtype=dtype)
    v = torch.randn(1, 70, 2, hdim, device="cuda", dtype=dtype)
    out, lse = run_and_check(q, k, v, causal=True, softmax_scale=0.3, family=family)
    assert torch.all(lse[:, :, :230] == float("-inf")) and torch.all(out[:, :230] == 0)


def test_repeated_runs_are_bitwise_identical(family):
    hdim, dtype = hdim_for(family, HDIMS[-1]), DTYPES[0]
    q, k, v = (torch.randn(2, 1024, 4, hdim, device="cuda", dtype=dtype) for _ in range(3))
    first = attention(q, k, v, causal=True)
    assert_served(family, q, k)
    for _ in range(3):
        assert torch.equal(attention(q, k, v, causal=True), first)


def test_forced_sm90_falls_back_to_sm80(monkeypatch):
    """FLASH_ATTN_CUDA_FAMILY=sm90 on calls the sm90 family cannot serve runs the sm80 kernels, right,
    never an error: every call on a GPU other than compute capability 9.0 or in a build without 90a,
    and head dims without an sm90 kernel."""
    monkeypatch.setenv("FLASH_ATTN_CUDA_FAMILY", "sm90")
    sm90_gpu = flash_attn_cuda._ops.HAS_SM90 and torch.cuda.get_device_capability() == (9, 0)
    hdims = [d for d in HDIMS if d not in SM90_HDIMS] if sm90_gpu else list(HDIMS[:1])
    if not hdims:
        pytest.skip("every compiled head dim has an sm90 kernel on this compute capability 9.0 GPU")
    for hdim in hdims:
        q, k, v = (torch.randn(2, 200, 2, hdim, device="cuda", dtype=DTYPES[0]) for _ in range(3))
        run_and_check(q, k, v, causal=True)
        assert flash_attn_cuda._ops.last_fwd_family() == "sm80", hdim


def test_forced_sm80_and_auto(monkeypatch):
    """sm80 forces the sm80 kernels; auto (and unset) serves every call too, with sm90 where it can when
    _ops.SM90_BY_DEFAULT (else sm80)."""
    hdim = hdim_for("sm90", HDIMS[0])
    q, k, v = (torch.randn(1, 300, 2, hdim, device="cuda", dtype=DTYPES[0]) for _ in range(3))
    monkeypatch.setenv("FLASH_ATTN_CUDA_FAMILY", "sm80")
    forced, _ = run_and_check(q, k, v, causal=True)
    assert flash_attn_cuda._ops.last_fwd_family() == "sm80"
    sm90_gpu = flash_attn_cuda._ops.HAS_SM90 and torch.cuda.get_device_capability() == (9, 0)
    for setting in ("auto", ""):
        monkeypatch.setenv("FLASH_ATTN_CUDA_FAMILY", setting)
        run_and_check(q, k, v, causal=True)
        expected = "sm90" if sm90_gpu and hdim in SM90_HDIMS and flash_attn_cuda._ops.SM90_BY_DEFAULT else "sm80"
        assert flash_attn_cuda._ops.last_fwd_family() == expected, setting


def test_bad_family_value_raises(monkeypatch):
    hdim, dtype = HDIMS[0], DTYPES[0]
    q = torch.randn(1, 64, 2, hdim, device="cuda", dtype=dtype)
    monkeypatch.setenv("FLASH_ATTN_CUDA_FAMILY", "sm75")
    with pytest.raises(RuntimeError, match="FLASH_ATTN_CUDA_FAMILY must be sm80, sm90 or auto .or unset., got 'sm75'"):
        attention(q, q, q)


def test_empty_and_zero_length_inputs():
    hdim, dtype = HDIMS[0], DTYPES[0]
    q = torch.randn(2, 0, 2, hdim, device="cuda", dtype=dtype)
    k = torch.randn(2, 5, 2, hdim, device="cuda", dtype=dtype)
    assert attention(q, k, k).shape == q.shape
    q = torch.randn(2, 3, 2, hdim, device="cuda", dtype=dtype)
    k = torch.randn(2, 0, 2, hdim, device="cuda", dtype=dtype)
    out, lse = attention(q, k, k, return_lse=True)
    assert torch.all(out == 0) and torch.all(lse == float("-inf"))


def test_torch_compile_fullgraph():
    hdim, dtype = HDIMS[0], DTYPES[0]

    def block(x, wq, wk, wv):
        b, s, _ = x.shape
        q = (x @ wq).view(b, s, 4, hdim)
        k = (x @ wk).view(b, s, 4, hdim)
        v = (x @ wv).view(b, s, 4, hdim)
        return attention(q, k, v, causal=True).reshape(b, s, -1).relu()

    x = torch.randn(2, 256, 4 * hdim, device="cuda", dtype=dtype)
    w = [torch.randn(4 * hdim, 4 * hdim, device="cuda", dtype=dtype) / math.sqrt(4 * hdim) for _ in range(3)]
    compiled = torch.compile(block, fullgraph=True)
    torch.testing.assert_close(compiled(x, *w), block(x, *w), rtol=0, atol=0)


def test_opcheck():
    hdim, dtype = HDIMS[0], DTYPES[0]
    q, k, v = (torch.randn(2, 100, 2, hdim, device="cuda", dtype=dtype) for _ in range(3))
    # The backward is not implemented yet, so inputs do not require grad.
    torch.library.opcheck(torch.ops.flash_attn_cuda.fwd.default, (q, k, v, hdim ** -0.5, True),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_static",
                                      "test_aot_dispatch_dynamic"))


def test_backward_raises_clearly_without_backward_build():
    if flash_attn_cuda._ops.HAS_BACKWARD:
        pytest.skip("this build has the backward (tests/test_backward_gpu.py)")
    hdim, dtype = HDIMS[0], DTYPES[0]
    q, k, v = (torch.randn(1, 16, 1, hdim, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
    with pytest.raises(NotImplementedError, match="backward"):
        attention(q, k, v).sum().backward()


def test_bad_inputs_raise_on_gpu():
    hdim, dtype = HDIMS[0], DTYPES[0]
    q = torch.randn(1, 16, 2, hdim, device="cuda", dtype=dtype)
    with pytest.raises(TypeError, match="float16 or torch.bfloat16"):
        attention(q.float(), q.float(), q.float())
    with pytest.raises(ValueError, match="CUDA tensor"):
        attention(q.cpu(), q, q)
    with pytest.raises(ValueError, match="softmax_scale"):
        attention(q, q, q, softmax_scale=0.0)
    with pytest.raises(RuntimeError, match="softmax_scale"):  # the raw op checks too
        torch.ops.flash_attn_cuda.fwd(q, q, q, -1.0, False)
    big = torch.randn(1, 16, 2, hdim + 8, device="cuda", dtype=dtype)[..., 1:hdim + 1]
    with pytest.raises(ValueError, match="16-byte aligned"):
        attention(big, big, big)
    with pytest.raises(RuntimeError, match="16-byte aligned"):  # the raw op checks too
        torch.ops.flash_attn_cuda.fwd(big, big, big, 0.125, False)
