"""Gradients through flash_attn_cuda.attention (our backward kernels) against autograd
through a float32 reference.

Tolerance rule (FA2's): for each of dq, dk, dv our max error vs the float32 reference is at
most twice the max error of PyTorch's own autograd in the low precision, plus 1e-4.
"""
import pytest
import torch
from fa2_checks import assert_grads_fa2_close, assert_served, grads
import flash_attn_cuda
from flash_attn_cuda import attention
from flash_attn_cuda.reference import attention_ref

pytestmark = pytest.mark.gpu

# Without a GPU or the extension conftest skips every test here: the lists only need to exist.
HDIMS = flash_attn_cuda.compiled_head_dims() or (64,)
DTYPES = flash_attn_cuda.compiled_dtypes() or (torch.bfloat16,)
HAS_BACKWARD = flash_attn_cuda._ops.HAS_BACKWARD


@pytest.fixture(autouse=True)
def _needs_backward_build():
    if not HAS_BACKWARD:
        pytest.skip("built with FLASH_ATTN_CUDA_BACKWARD=0")


def check_backward(q, k, v, causal, deterministic=False):
    assert_grads_fa2_close(lambda a, b, c: attention(a, b, c, causal=causal, deterministic=deterministic),
                           lambda a, b, c, dt: attention_ref(a, b, c, causal, compute_dtype=dt)[0],
                           (q, k, v), torch.randn_like(q))


SEQLENS = [(1, 1), (7, 7), (113, 203), (128, 128), (255, 100), (1000, 1000)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hdim", HDIMS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seqlen_q,seqlen_k", SEQLENS)
def test_gradients_match_reference(seqlen_q, seqlen_k, causal, hdim, dtype):
    torch.manual_seed(seqlen_q + 3 * seqlen_k + hdim)
    q = torch.randn(2, seqlen_q, 3, hdim, device="cuda", dtype=dtype)
    k = torch.randn(2, seqlen_k, 3, hdim, device="cuda", dtype=dtype)
    v = torch.randn(2, seqlen_k, 3, hdim, device="cuda", dtype=dtype)
    check_backward(q, k, v, causal)


@pytest.mark.parametrize("causal", [False, True])
def test_gqa_gradients(causal):
    hdim, dtype = HDIMS[0], DTYPES[0]
    q = torch.randn(2, 150, 8, hdim, device="cuda", dtype=dtype)
    k = torch.randn(2, 170, 2, hdim, device="cuda", dtype=dtype)
    v = torch.randn(2, 170, 2, hdim, device="cuda", dtype=dtype)
    check_backward(q, k, v, causal)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(1, 1000, 2, 1200), (3, 257, 5, 513), (2, 4096, 1, 4096)], ids=str)
def test_deterministic_is_bit_identical_and_right(shape, causal):
    """Three runs give the same bits; the result also passes the reference check."""
    batch, seqlen_q, nheads, seqlen_k = shape
    hdim, dtype = HDIMS[-1], DTYPES[-1]
    torch.manual_seed(seqlen_q)
    q = torch.randn(batch, seqlen_q, nheads, hdim, device="cuda", dtype=dtype)
    k = torch.randn(batch, seqlen_k, nheads, hdim, device="cuda", dtype=dtype)
    v = torch.randn(batch, seqlen_k, nheads, hdim, device="cuda", dtype=dtype)
    dout = torch.randn_like(q)
    runs = [grads(lambda a, b, c: attention(a, b, c, causal=causal, deterministic=True), (q, k, v), dout)
            for _ in range(3)]
    for later in runs[1:]:
        for name, a, b in zip(("dq", "dk", "dv"), runs[0], later):
            assert torch.equal(a, b), f"{name} differs between deterministic runs"
    if seqlen_q * seqlen_k <= 2 ** 22:  # the float32 reference is N^2 memory
        check_backward(q, k, v, causal, deterministic=True)


SM90_HDIMS = flash_attn_cuda._ops.sm90_head_dims()


@pytest.mark.parametrize("hdim", SM90_HDIMS or (128,))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seqlen_q,seqlen_k,nheads_k", [(113, 203, 3), (512, 512, 1), (1000, 700, 3)])
def test_gradients_through_each_family(seqlen_q, seqlen_k, nheads_k, causal, hdim, family):
    """The backward runs on the out and lse of either forward family (same contract): gradients
    vs the reference, and the forward really ran on the family asked for."""
    if hdim not in HDIMS:
        pytest.skip(f"head dim {hdim} not compiled")
    torch.manual_seed(seqlen_q + hdim)
    dtype = DTYPES[-1]
    q = torch.randn(2, seqlen_q, 3, hdim, device="cuda", dtype=dtype)
    k = torch.randn(2, seqlen_k, nheads_k, hdim, device="cuda", dtype=dtype)
    v = torch.randn(2, seqlen_k, nheads_k, hdim, device="cuda", dtype=dtype)
    check_backward(q, k, v, causal)
    assert_served(family, q, k)  # check_backward's own forward was the last one


def test_strided_input_gradients():
    hdim, dtype = HDIMS[-1], DTYPES[-1]
    qkv = torch.randn(2, 300, 3, 4, hdim, device="cuda", dtype=dtype)
    check_backward(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], causal=True)


def test_compile_fwd_bwd_fullgraph():
    hdim, dtype = HDIMS[0], DTYPES[0]
    q, k, v = (torch.randn(2, 256, 4, hdim, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))

    def f(q, k, v):
        return attention(q, k, v, causal=True).float().square().sum()

    loss = torch.compile(f, fullgraph=True)(q, k, v)
    compiled = torch.autograd.grad(loss, (q, k, v))
    eager = torch.autograd.grad(f(q, k, v), (q, k, v))
    for a, b in zip(compiled, eager):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_opcheck_with_autograd():
    hdim, dtype = HDIMS[0], DTYPES[0]
    q, k, v = (torch.randn(2, 100, 2, hdim, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
    torch.library.opcheck(torch.ops.flash_attn_cuda.fwd.default, (q, k, v, hdim ** -0.5, True))
    torch.library.opcheck(torch.ops.flash_attn_cuda.fwd.default, (q, k, v, hdim ** -0.5, False, True))
