"""SDPA with flash_attn_cuda activated as its flash implementation, on the GPU: the flash backend's
outputs are this package's (bit-identical to attention()) and meet FA2's rule against the float32
reference, forward and backward, under eager, autograd and torch.compile, with GQA
(enable_gqa=True), causal and scale; the varlen op (_flash_attention_forward with cum_seq)."""
import pytest
import torch
import torch.nn.functional as F
from fa2_checks import assert_fa2_close, assert_grads_fa2_close
from torch.nn.attention import SDPBackend, sdpa_kernel

import flash_attn_cuda
from flash_attn_cuda import attention, attention_varlen
from flash_attn_cuda.reference import attention_ref

pytestmark = pytest.mark.gpu

HDIM = (flash_attn_cuda.compiled_head_dims() or (64,))[0]
DTYPE = (flash_attn_cuda.compiled_dtypes() or (torch.bfloat16,))[0]
HAS_BACKWARD = flash_attn_cuda._ops.HAS_BACKWARD
registry = torch.nn.attention
if not hasattr(registry, "activate_flash_attention_impl"):
    pytest.skip("this PyTorch has no flash-attention registry (< 2.11)", allow_module_level=True)


@pytest.fixture
def ours():
    registry.activate_flash_attention_impl("flash_attn_cuda")
    try:
        yield
    finally:
        registry.restore_flash_attention_impl()


def _sdpa(q, k, v, **kw):
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, **kw)


def _bhsd(*shape):
    """(batch, seqlen, heads, d) storage seen as (batch, heads, seqlen, d), as attention layers make it."""
    return torch.randn(*shape, device="cuda", dtype=DTYPE).transpose(1, 2)


CASES = [dict(is_causal=False), dict(is_causal=True), dict(scale=0.3), dict(is_causal=True, enable_gqa=True)]


@pytest.mark.parametrize("kw", CASES, ids=str)
@pytest.mark.parametrize("seqlen", [1, 257, 1024])
def test_sdpa_runs_our_kernels(ours, kw, seqlen):
    torch.manual_seed(seqlen)
    kv_heads = 2 if kw.get("enable_gqa") else 8
    q, k, v = _bhsd(2, seqlen, 8, HDIM), _bhsd(2, seqlen, kv_heads, HDIM), _bhsd(2, seqlen, kv_heads, HDIM)
    out = _sdpa(q, k, v, **kw)
    mine = attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=kw.get("is_causal", False),
                     softmax_scale=kw.get("scale")).transpose(1, 2)
    assert torch.equal(out, mine), "SDPA's flash backend did not run flash_attn_cuda's kernels"
    ref = lambda a, b, c, dt: attention_ref(a.transpose(1, 2), b.transpose(1, 2), c.transpose(1, 2),  # noqa: E731
                                            kw.get("is_causal", False), kw.get("scale"),
                                            compute_dtype=dt)[0].transpose(1, 2)
    assert_fa2_close("out", out, ref(q, k, v, torch.float32), ref(q, k, v, None))
    if HAS_BACKWARD:
        assert_grads_fa2_close(lambda a, b, c: _sdpa(a, b, c, **kw), ref, (q, k, v), torch.randn_like(out))


def test_sdpa_under_compile(ours):
    torch.manual_seed(0)
    q, k, v = (_bhsd(2, 512, 4, HDIM).requires_grad_() for _ in range(3))

    def f(q, k, v):
        return _sdpa(q, k, v, is_causal=True)

    eager = f(q, k, v)
    compiled = torch.compile(f)(q, k, v)
    assert torch.equal(compiled, eager)
    if HAS_BACKWARD:
        g = torch.randn_like(eager)
        for a, b in zip(torch.autograd.grad(compiled, (q, k, v), g), torch.autograd.grad(eager, (q, k, v), g)):
            torch.testing.assert_close(a, b, rtol=0, atol=2e-2)   # dq is summed with atomics (run to run bits)


def test_varlen_op_runs_our_kernels(ours):
    torch.manual_seed(1)
    cu = torch.tensor([0, 100, 100, 357], dtype=torch.int32, device="cuda")
    q, k, v = (torch.randn(357, 4, HDIM, device="cuda", dtype=DTYPE) for _ in range(3))
    out = torch.ops.aten._flash_attention_forward(q, k, v, cu, cu, 257, 257, 0.0, True, False)[0]
    assert torch.equal(out, attention_varlen(q, k, v, cu, cu, 257, 257, causal=True))


def test_unservable_case_is_one_clear_error(ours):
    q = _bhsd(1, 64, 2, HDIM)
    with pytest.raises(RuntimeError, match="flash_attn_cuda SDPA backend: return_debug_mask"):
        torch.ops.aten._scaled_dot_product_flash_attention(q, q, q, 0.0, False, True)


def test_restore_gives_pytorchs_kernels_back():
    registry.activate_flash_attention_impl("flash_attn_cuda")
    registry.restore_flash_attention_impl()
    q = _bhsd(1, 64, 2, HDIM)
    _sdpa(q, q, q, dropout_p=0.5)   # PyTorch's own flash kernel serves dropout
