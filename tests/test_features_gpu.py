"""Sliding window, softcap and ALiBi on the GPU, forward and backward, against the float32 reference
(flash_attn_cuda.reference.attention_ref) with FA2's tolerance rule: our max error is at most
twice PyTorch's own low-precision error plus a small epsilon. Outputs are poisoned first."""
import pytest
import torch
from fa2_checks import assert_fa2_close, assert_grads_fa2_close, assert_lse_close, poison
import flash_attn_cuda
from flash_attn_cuda import attention
from flash_attn_cuda.reference import attention_ref

pytestmark = pytest.mark.gpu

# Without a GPU or the extension conftest skips every test here: the lists only need to exist.
HDIMS = flash_attn_cuda.compiled_head_dims() or (64,)
DTYPES = flash_attn_cuda.compiled_dtypes() or (torch.bfloat16,)
HAS_BACKWARD = flash_attn_cuda._ops.HAS_BACKWARD

SEQLENS = [(1, 1), (113, 203), (256, 256), (1000, 255), (255, 1000), (1337, 1337)]
# (window_size, causal, softcap)
OPTIONS = [((32, -1), False, 0.0), ((-1, 17), False, 0.0), ((64, 64), False, 0.0), ((200, 0), False, 0.0),
           ((100, -1), True, 0.0), ((0, 0), False, 0.0), ((-1, -1), False, 30.0), ((-1, -1), True, 5.0),
           ((48, 8), False, 20.0)]


def _ref(q, k, v, causal, window_size, softcap, compute_dtype):
    return attention_ref(q, k, v, causal, compute_dtype=compute_dtype, window_size=window_size, softcap=softcap)


def check_forward(q, k, v, window_size, causal, softcap):
    poison((q.shape, q.dtype))
    out, lse = attention(q, k, v, causal=causal, window_size=window_size, softcap=softcap, return_lse=True)
    ref, ref_lse = _ref(q, k, v, causal, window_size, softcap, torch.float32)
    ref_lowp, _ = _ref(q, k, v, causal, window_size, softcap, None)
    assert_fa2_close("out", out, ref, ref_lowp)
    assert_lse_close(lse, ref_lse, rtol=2e-3 if softcap else 1e-4)  # tanh.approx


def check_backward(q, k, v, window_size, causal, softcap):
    assert_grads_fa2_close(lambda a, b, c: attention(a, b, c, causal=causal, window_size=window_size, softcap=softcap),
                           lambda a, b, c, dt: _ref(a, b, c, causal, window_size, softcap, dt)[0],
                           (q, k, v), torch.randn_like(q))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hdim", HDIMS)
@pytest.mark.parametrize("window_size,causal,softcap", OPTIONS, ids=str)
@pytest.mark.parametrize("seqlen_q,seqlen_k", SEQLENS)
def test_forward_options(seqlen_q, seqlen_k, window_size, causal, softcap, hdim, dtype):
    torch.manual_seed(seqlen_q + seqlen_k + hdim)
    q = torch.randn(2, seqlen_q, 3, hdim, device="cuda", dtype=dtype)
    k = torch.randn(2, seqlen_k, 3, hdim, device="cuda", dtype=dtype)
    v = torch.randn(2, seqlen_k, 3, hdim, device="cuda", dtype=dtype)
    check_forward(q, k, v, window_size, causal, softcap)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hdim", HDIMS)
@pytest.mark.parametrize("window_size,causal,softcap", OPTIONS, ids=str)
@pytest.mark.parametrize("seqlen_q,seqlen_k", [(113, 203), (1000, 255), (255, 1000), (1337, 1337)])
def test_backward_options(seqlen_q, seqlen_k, window_size, causal, softcap, hdim, dtype):
    if not HAS_BACKWARD:
        pytest.skip("built with FLASH_ATTN_CUDA_BACKWARD=0")
    torch.manual_seed(seqlen_q + 7 * seqlen_k + hdim)
    q = torch.randn(2, seqlen_q, 3, hdim, device="cuda", dtype=dtype)
    k = torch.randn(2, seqlen_k, 3, hdim, device="cuda", dtype=dtype)
    v = torch.randn(2, seqlen_k, 3, hdim, device="cuda", dtype=dtype)
    check_backward(q, k, v, window_size, causal, softcap)


@pytest.mark.parametrize("causal", [False, True])
def test_gqa_with_window_and_softcap(causal):
    hdim, dtype = HDIMS[0], DTYPES[0]
    q = torch.randn(2, 300, 8, hdim, device="cuda", dtype=dtype)
    k = torch.randn(2, 333, 2, hdim, device="cuda", dtype=dtype)
    v = torch.randn(2, 333, 2, hdim, device="cuda", dtype=dtype)
    check_forward(q, k, v, (40, 10), causal, 15.0)
    if HAS_BACKWARD:
        check_backward(q, k, v, (40, 10), causal, 15.0)


def test_compile_with_options():
    hdim, dtype = HDIMS[0], DTYPES[0]
    q, k, v = (torch.randn(2, 256, 4, hdim, device="cuda", dtype=dtype) for _ in range(3))

    def f(q, k, v):
        return attention(q, k, v, window_size=(64, 0), softcap=10.0)

    torch.testing.assert_close(torch.compile(f, fullgraph=True)(q, k, v), f(q, k, v), rtol=0, atol=0)
    torch.library.opcheck(torch.ops.flash_attn_cuda.fwd.default, (q, k, v, hdim ** -0.5, False, False, 64, 0, 10.0))


def _alibi_ref(q, k, v, causal, window_size, slopes, compute_dtype):
    return attention_ref(q, k, v, causal, compute_dtype=compute_dtype, window_size=window_size, alibi_slopes=slopes)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hdim", HDIMS)
@pytest.mark.parametrize("per_batch,nheads_k", [(False, 4), (True, 4), (False, 2)], ids=str)
@pytest.mark.parametrize("window_size,causal", [((-1, -1), False), ((-1, -1), True), ((64, 16), False)], ids=str)
@pytest.mark.parametrize("seqlen_q,seqlen_k", [(113, 203), (1000, 255), (777, 777)])
def test_alibi_forward_and_backward(seqlen_q, seqlen_k, window_size, causal, per_batch, nheads_k, hdim, dtype):
    torch.manual_seed(seqlen_q + seqlen_k + hdim)
    batch, nheads = 2, 4
    q = torch.randn(batch, seqlen_q, nheads, hdim, device="cuda", dtype=dtype)
    k = torch.randn(batch, seqlen_k, nheads_k, hdim, device="cuda", dtype=dtype)
    v = torch.randn(batch, seqlen_k, nheads_k, hdim, device="cuda", dtype=dtype)
    slopes = torch.rand((batch, nheads) if per_batch else (nheads,), device="cuda") * 0.5
    poison((q.shape, q.dtype))
    out, lse = attention(q, k, v, causal=causal, window_size=window_size, alibi_slopes=slopes, return_lse=True)
    ref, ref_lse = _alibi_ref(q, k, v, causal, window_size, slopes, torch.float32)
    ref_lowp, _ = _alibi_ref(q, k, v, causal, window_size, slopes, None)
    assert_fa2_close("out", out, ref, ref_lowp)
    assert_lse_close(lse, ref_lse)
    if HAS_BACKWARD:
        assert_grads_fa2_close(
            lambda a, b, c: attention(a, b, c, causal=causal, window_size=window_size, alibi_slopes=slopes),
            lambda a, b, c, dt: _alibi_ref(a, b, c, causal, window_size, slopes, dt)[0], (q, k, v), torch.randn_like(q))


def _alibi_softcap_ref(q, k, v, causal, window_size, slopes, softcap, compute_dtype):
    return attention_ref(q, k, v, causal, compute_dtype=compute_dtype, window_size=window_size, alibi_slopes=slopes,
                         softcap=softcap)


@pytest.mark.parametrize("softcap", [2.0, 50.0])
@pytest.mark.parametrize("per_batch,nheads_k", [(False, 4), (True, 2)], ids=str)
@pytest.mark.parametrize("window_size,causal", [((-1, -1), False), ((-1, -1), True), ((64, 16), False)], ids=str)
@pytest.mark.parametrize("seqlen_q,seqlen_k", [(113, 203), (1000, 255), (777, 777)])
def test_alibi_with_softcap(seqlen_q, seqlen_k, window_size, causal, per_batch, nheads_k, softcap):
    """flash-attn's order: softcap first, the ALiBi bias added to the capped score; the backward
    recovers tanh from P with the bias added back (score_mods.h apply_softcap_grad)."""
    hdim, dtype = HDIMS[0], DTYPES[0]
    torch.manual_seed(seqlen_q + seqlen_k + int(softcap))
    batch, nheads = 2, 4
    q = 2 * torch.randn(batch, seqlen_q, nheads, hdim, device="cuda", dtype=dtype)
    k = torch.randn(batch, seqlen_k, nheads_k, hdim, device="cuda", dtype=dtype)
    v = torch.randn(batch, seqlen_k, nheads_k, hdim, device="cuda", dtype=dtype)
    slopes = torch.rand((batch, nheads) if per_batch else (nheads,), device="cuda") * 0.5
    poison((q.shape, q.dtype))
    out, lse = attention(q, k, v, causal=causal, window_size=window_size, softcap=softcap, alibi_slopes=slopes,
                         return_lse=True)
    ref, ref_lse = _alibi_softcap_ref(q, k, v, causal, window_size, slopes, softcap, torch.float32)
    ref_lowp, _ = _alibi_softcap_ref(q, k, v, causal, window_size, slopes, softcap, None)
    assert_fa2_close("out", out, ref, ref_lowp)
    assert_lse_close(lse, ref_lse, rtol=2e-3)  # tanh.approx
    if HAS_BACKWARD:
        assert_grads_fa2_close(
            lambda a, b, c: attention(a, b, c, causal=causal, window_size=window_size, softcap=softcap,
                                      alibi_slopes=slopes),
            lambda a, b, c, dt: _alibi_softcap_ref(a, b, c, causal, window_size, slopes, softcap, dt)[0], (q, k, v),
            torch.randn_like(q))


def test_saturating_softcap_gradients():
    """Scores far into tanh's flat part: the (1 - t^2) factor of the softcap gradient matters."""
    hdim, dtype = HDIMS[0], DTYPES[0]
    torch.manual_seed(0)
    q = 4 * torch.randn(2, 300, 3, hdim, device="cuda", dtype=dtype)
    k = torch.randn(2, 400, 3, hdim, device="cuda", dtype=dtype)
    v = torch.randn(2, 400, 3, hdim, device="cuda", dtype=dtype)
    check_forward(q, k, v, (-1, -1), False, 2.0)
    if HAS_BACKWARD:
        check_backward(q, k, v, (-1, -1), False, 2.0)


def test_deterministic_with_features():
    if not HAS_BACKWARD:
        pytest.skip("built with FLASH_ATTN_CUDA_BACKWARD=0")
    hdim, dtype = HDIMS[-1], DTYPES[-1]
    q, k, v = (torch.randn(2, 1000, 3, hdim, device="cuda", dtype=dtype) for _ in range(3))
    dout = torch.randn_like(q)
    slopes = torch.rand(3, device="cuda")
    runs = []
    for _ in range(3):
        leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
        out = attention(*leaves, window_size=(100, 0), alibi_slopes=slopes, deterministic=True)
        runs.append(torch.autograd.grad(out, leaves, dout))
    for later in runs[1:]:
        for a, b in zip(runs[0], later):
            assert torch.equal(a, b)


def test_huge_softcap_and_trainable_slopes_are_refused():
    hdim, dtype = HDIMS[0], DTYPES[0]
    q = torch.randn(1, 16, 2, hdim, device="cuda", dtype=dtype)
    with pytest.raises(ValueError, match="softcap"):
        attention(q, q, q, softcap=1e38)
    with pytest.raises(RuntimeError, match="softcap"):
        torch.ops.flash_attn_cuda.fwd(q, q, q, 0.125, False, False, -1, -1, 1e38, None)
    with pytest.raises(ValueError, match="no gradient"):
        attention(q, q, q, alibi_slopes=torch.ones(2, device="cuda", requires_grad=True))
