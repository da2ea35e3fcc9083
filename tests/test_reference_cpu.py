"""The blockwise FA2 model (flash_attn_cuda.reference.attention_blockwise) against naive
softmax attention, in float64 on the CPU: the algebra the kernel implements is exact."""
import pytest
import torch

from flash_attn_cuda.reference import attention_blockwise, attention_blockwise_backward, attention_ref, visible_mask

SEQLENS = [(1, 1), (7, 7), (64, 64), (113, 203), (203, 113), (255, 1), (1, 255), (100, 100)]


@pytest.mark.parametrize("seqlen_q,seqlen_k", SEQLENS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("nheads,nheads_k", [(2, 2), (4, 1)])
def test_blockwise_matches_naive_float64(seqlen_q, seqlen_k, causal, nheads, nheads_k):
    g = torch.Generator().manual_seed(seqlen_q * 1000 + seqlen_k)
    q = torch.randn(2, seqlen_q, nheads, 16, dtype=torch.float64, generator=g)
    k = torch.randn(2, seqlen_k, nheads_k, 16, dtype=torch.float64, generator=g)
    v = torch.randn(2, seqlen_k, nheads_k, 16, dtype=torch.float64, generator=g)
    out, lse = attention_blockwise(q, k, v, causal=causal, block_m=32, block_n=16)
    ref_out, ref_lse = attention_ref(q, k, v, causal=causal, compute_dtype=torch.float64)
    torch.testing.assert_close(out, ref_out, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(lse, ref_lse, rtol=1e-10, atol=1e-10)


def test_rows_without_keys_give_zero_and_minus_inf():
    # causal, seqlen_q > seqlen_k: the first seqlen_q - seqlen_k queries see nothing.
    q = torch.randn(1, 10, 1, 8, dtype=torch.float64)
    k = torch.randn(1, 4, 1, 8, dtype=torch.float64)
    v = torch.randn(1, 4, 1, 8, dtype=torch.float64)
    for fn in (attention_ref, attention_blockwise):
        out, lse = fn(q, k, v, causal=True) if fn is attention_blockwise else fn(q, k, v, True, None, torch.float64)
        assert torch.all(out[:, :6] == 0)
        assert torch.all(lse[:, :, :6] == float("-inf"))
        assert torch.isfinite(out).all() and torch.isfinite(lse[:, :, 6:]).all()


def test_large_scores_do_not_overflow():
    # exp of raw scores of ~1e4 would overflow; the running max keeps it finite.
    q = 100 * torch.randn(1, 50, 1, 8, dtype=torch.float64)
    k = 100 * torch.randn(1, 70, 1, 8, dtype=torch.float64)
    v = torch.randn(1, 70, 1, 8, dtype=torch.float64)
    out, lse = attention_blockwise(q, k, v, block_m=16, block_n=16)
    ref_out, ref_lse = attention_ref(q, k, v, compute_dtype=torch.float64)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(lse, ref_lse)


def test_visible_mask_is_bottom_right_aligned():
    m = visible_mask(2, 4, causal=True)
    assert m.tolist() == [[True, True, True, False], [True, True, True, True]]
    m = visible_mask(4, 2, causal=True)
    assert m.tolist() == [[False, False], [False, False], [True, False], [True, True]]


@pytest.mark.parametrize("seqlen_q,seqlen_k", SEQLENS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("nheads,nheads_k", [(2, 2), (4, 1)])
def test_blockwise_backward_matches_autograd_float64(seqlen_q, seqlen_k, causal, nheads, nheads_k):
    """The FA2 backward algebra (D pre-pass, P recomputed from LSE, dS = P (dP - D)) against
    autograd through naive attention, in float64."""
    g = torch.Generator().manual_seed(seqlen_q * 31 + seqlen_k)
    q = torch.randn(2, seqlen_q, nheads, 16, dtype=torch.float64, generator=g, requires_grad=True)
    k = torch.randn(2, seqlen_k, nheads_k, 16, dtype=torch.float64, generator=g, requires_grad=True)
    v = torch.randn(2, seqlen_k, nheads_k, 16, dtype=torch.float64, generator=g, requires_grad=True)
    dout = torch.randn(2, seqlen_q, nheads, 16, dtype=torch.float64, generator=g)
    out, lse = attention_ref(q, k, v, causal=causal, compute_dtype=torch.float64)
    dq_ref, dk_ref, dv_ref = torch.autograd.grad(out, (q, k, v), dout)
    dq, dk, dv = attention_blockwise_backward(q.detach(), k.detach(), v.detach(), out.detach(), lse.detach(),
                                              dout, causal=causal, block_m=32, block_n=16)
    torch.testing.assert_close(dq, dq_ref, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(dk, dk_ref, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(dv, dv_ref, rtol=1e-9, atol=1e-9)
