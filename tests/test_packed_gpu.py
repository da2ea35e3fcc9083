"""Packed entry points and padded head dims on the GPU. The packed functions run the same kernels
as attention() / attention_varlen() on views, so with deterministic=True their outputs and
gradients must be bit-identical to the unpacked calls; padded head dims (59, 111: not a multiple
of 8) are checked against the float32 reference with FA2's rule."""
import pytest
import torch
from fa2_checks import assert_fa2_close, assert_grads_fa2_close, poison

import flash_attn_cuda
from flash_attn_cuda import (attention, attention_kvpacked, attention_qkvpacked, attention_varlen,
                             attention_varlen_kvpacked, attention_varlen_qkvpacked)
from flash_attn_cuda.reference import attention_ref, attention_varlen_ref

pytestmark = pytest.mark.gpu

HDIMS = flash_attn_cuda.compiled_head_dims() or (64,)
DTYPES = flash_attn_cuda.compiled_dtypes() or (torch.bfloat16,)
HAS_BACKWARD = flash_attn_cuda._ops.HAS_BACKWARD
OPTIONS = [dict(), dict(causal=True), dict(window_size=(40, 8), softcap=20.0)]


def _grads(out, inputs, dout):
    return torch.autograd.grad(out, inputs, dout) if HAS_BACKWARD else ()


def _assert_same(a, b, what):
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        assert torch.equal(x, y), f"{what}[{i}] differs from the unpacked call"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_qkvpacked_equals_unpacked(options, dtype):
    torch.manual_seed(0)
    d = HDIMS[0]
    qkv = torch.randn(2, 300, 3, 4, d, device="cuda", dtype=dtype, requires_grad=True)
    poison(((2, 300, 4, d), dtype))
    out = attention_qkvpacked(qkv, deterministic=True, **options)
    q, k, v = (qkv.detach()[:, :, i].clone().requires_grad_() for i in range(3))
    ref = attention(q, k, v, deterministic=True, **options)
    assert torch.equal(out, ref)
    dout = torch.randn_like(out)
    (dqkv,) = _grads(out, (qkv,), dout) or (None,)
    if HAS_BACKWARD:
        assert dqkv.shape == qkv.shape
        _assert_same([dqkv[:, :, i] for i in range(3)], _grads(ref, (q, k, v), dout), "dqkv")


@pytest.mark.parametrize("nheads_k", [4, 2, 1], ids=lambda h: f"kheads{h}")
@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_kvpacked_equals_unpacked(options, nheads_k):
    torch.manual_seed(1)
    d, dtype = HDIMS[0], DTYPES[0]
    q = torch.randn(2, 200, 4, d, device="cuda", dtype=dtype, requires_grad=True)
    kv = torch.randn(2, 333, 2, nheads_k, d, device="cuda", dtype=dtype, requires_grad=True)
    out = attention_kvpacked(q, kv, deterministic=True, **options)
    k, v = (kv.detach()[:, :, i].clone().requires_grad_() for i in range(2))
    q2 = q.detach().clone().requires_grad_()
    ref = attention(q2, k, v, deterministic=True, **options)
    assert torch.equal(out, ref)
    if HAS_BACKWARD:
        dout = torch.randn_like(out)
        dq, dkv = _grads(out, (q, kv), dout)
        _assert_same([dq, dkv[:, :, 0], dkv[:, :, 1]], _grads(ref, (q2, k, v), dout), "dq/dkv")


def _cu(lengths):
    return torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32, device="cuda")


@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_varlen_packed_equal_unpacked(options):
    torch.manual_seed(2)
    d, dtype = HDIMS[0], DTYPES[0]
    lengths = [5, 0, 130, 77]
    cu, total, longest = _cu(lengths), sum(lengths), max(lengths)
    qkv = torch.randn(total, 3, 4, d, device="cuda", dtype=dtype, requires_grad=True)
    out = attention_varlen_qkvpacked(qkv, cu, longest, deterministic=True, **options)
    q, k, v = (qkv.detach()[:, i].clone().requires_grad_() for i in range(3))
    ref = attention_varlen(q, k, v, cu, cu, longest, longest, deterministic=True, **options)
    assert torch.equal(out, ref)
    if HAS_BACKWARD:
        dout = torch.randn_like(out)
        (dqkv,) = _grads(out, (qkv,), dout)
        _assert_same([dqkv[:, i] for i in range(3)], _grads(ref, (q, k, v), dout), "dqkv")
    lengths_k = [9, 3, 100, 77]
    cu_k = _cu(lengths_k)
    kv = torch.randn(sum(lengths_k), 2, 2, d, device="cuda", dtype=dtype, requires_grad=True)
    q1 = q.detach().clone().requires_grad_()
    out = attention_varlen_kvpacked(q1, kv, cu, cu_k, longest, max(lengths_k), deterministic=True, **options)
    k, v = (kv.detach()[:, i].clone().requires_grad_() for i in range(2))
    q2 = q.detach().clone().requires_grad_()
    ref = attention_varlen(q2, k, v, cu, cu_k, longest, max(lengths_k), deterministic=True, **options)
    assert torch.equal(out, ref)
    if HAS_BACKWARD:
        dout = torch.randn_like(out)
        dq, dkv = _grads(out, (q1, kv), dout)
        _assert_same([dq, dkv[:, 0], dkv[:, 1]], _grads(ref, (q2, k, v), dout), "dq/dkv")


def _padded_dims():
    return [d for d in (59, 111, 4) if (d + 7) // 8 * 8 <= max(HDIMS)]


@pytest.mark.parametrize("d", _padded_dims())
@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_padded_head_dim_vs_reference(options, d):
    torch.manual_seed(d)
    dtype = DTYPES[0]
    q = torch.randn(2, 150, 4, d, device="cuda", dtype=dtype)
    k = torch.randn(2, 190, 2, d, device="cuda", dtype=dtype)
    v = torch.randn(2, 190, 2, d, device="cuda", dtype=dtype)
    ref_kwargs = dict(causal=options.get("causal", False), window_size=options.get("window_size", (-1, -1)),
                      softcap=options.get("softcap", 0.0))
    out = attention(q, k, v, **options)
    assert out.shape == q.shape
    assert_fa2_close("out", out, attention_ref(q, k, v, **ref_kwargs)[0],
                     attention_ref(q, k, v, compute_dtype=None, **ref_kwargs)[0])
    if HAS_BACKWARD:
        assert_grads_fa2_close(lambda a, b, c: attention(a, b, c, **options),
                               lambda a, b, c, dt: attention_ref(a, b, c, compute_dtype=dt, **ref_kwargs)[0],
                               (q, k, v), torch.randn_like(q))
    cu = _cu([150, 150])
    qv, kv_ = q.reshape(300, 4, d), torch.randn(300, 2, d, device="cuda", dtype=dtype)
    out = attention_varlen(qv, kv_, kv_, cu, cu, 150, 150, **options)
    ref = attention_varlen_ref(qv, kv_, kv_, cu, cu, **ref_kwargs)[0]
    lowp = attention_varlen_ref(qv, kv_, kv_, cu, cu, compute_dtype=None, **ref_kwargs)[0]
    assert_fa2_close("varlen out", out, ref, lowp)


@pytest.mark.parametrize("d", _padded_dims())
def test_padded_qkvpacked_gradient_layout(d):
    torch.manual_seed(3)
    qkv = torch.randn(2, 100, 3, 4, d, device="cuda", dtype=DTYPES[0], requires_grad=True)
    out = attention_qkvpacked(qkv, causal=True, deterministic=True)
    q, k, v = (qkv.detach()[:, :, i].clone().requires_grad_() for i in range(3))
    ref = attention(q, k, v, causal=True, deterministic=True)
    assert out.shape == (2, 100, 4, d) and torch.equal(out, ref)
    if HAS_BACKWARD:
        dout = torch.randn_like(out)
        (dqkv,) = _grads(out, (qkv,), dout)
        _assert_same([dqkv[:, :, i] for i in range(3)], _grads(ref, (q, k, v), dout), "dqkv")


def test_packed_under_compile():
    torch.manual_seed(4)
    qkv = torch.randn(2, 128, 3, 4, HDIMS[0], device="cuda", dtype=DTYPES[0], requires_grad=True)

    def f(x):
        return attention_qkvpacked(x, causal=True, deterministic=True)

    out = torch.compile(f)(qkv)
    ref = f(qkv)
    assert torch.equal(out, ref)
    if HAS_BACKWARD:
        dout = torch.randn_like(out)
        assert torch.equal(_grads(out, (qkv,), dout)[0], _grads(ref, (qkv,), dout)[0])
