"""flash-attn's packed entry points (flash_attn_cuda.packed), head dims that are not a multiple
of 8 (flash_attn_cuda._pad), window_size as a tensor and ALiBi with softcap, without a GPU: the
shapes on fake CUDA tensors (as torch.compile traces them), and the autograd wiring of the packed
backward on CPU tensors with the kernels replaced by stand-ins that record what they are given."""
import inspect
import types

import pytest
import torch

import flash_attn_cuda
from flash_attn_cuda import _pad, packed
from flash_attn_cuda._validate import check_window_size

needs_extension = pytest.mark.extension
HDIM = (flash_attn_cuda.compiled_head_dims() or (64,))[0]
DTYPE = (flash_attn_cuda.compiled_dtypes() or (torch.bfloat16,))[0]

OPTIONS = ["dropout_p", "softmax_scale", "causal", "window_size", "softcap", "alibi_slopes", "deterministic",
           "return_attn_probs"]
# flash-attn 2.8's flash_attn_{,varlen_}{qkv,kv}packed_func positional parameters
SIGNATURES = {
    "attention_qkvpacked": ["qkv"] + OPTIONS,
    "attention_kvpacked": ["q", "kv"] + OPTIONS,
    "attention_varlen_qkvpacked": ["qkv", "cu_seqlens", "max_seqlen"] + OPTIONS,
    "attention_varlen_kvpacked": ["q", "kv", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k"] + OPTIONS,
}


def t(*shape, dtype=DTYPE, device="cuda"):
    return torch.empty(*shape, dtype=dtype, device=device)


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_flash_attn_names_and_order(name):
    params = inspect.signature(getattr(flash_attn_cuda, name)).parameters
    assert [n for n, p in params.items() if p.kind == p.POSITIONAL_OR_KEYWORD] == SIGNATURES[name]
    assert params["return_lse"].kind == inspect.Parameter.KEYWORD_ONLY
    assert name in flash_attn_cuda.__all__


def test_views_share_the_packed_storage():
    qkv = torch.randn(2, 5, 3, 4, 8)
    q, k, v = packed._split(qkv, None)
    assert [x.data_ptr() for x in (q, k, v)] == [qkv[:, :, i].data_ptr() for i in range(3)]
    assert all(x.untyped_storage().data_ptr() == qkv.untyped_storage().data_ptr() for x in (q, k, v))
    assert torch.equal(k, qkv[:, :, 1])
    q = torch.randn(2, 5, 4, 8)
    kv = torch.randn(2, 7, 2, 2, 8)
    assert packed._split(q, kv)[0] is q and torch.equal(packed._split(q, kv)[2], kv[:, :, 1])


def _stand_in_ops(calls):
    """fwd / fwd_varlen returning (q + 1, lse); bwd_into / bwd_varlen_into filling dq, dk, dv with
    1, 2, 3 and recording their (data pointer, storage pointer, shape). Keeping the tensors would
    keep the gradient referenced, and autograd would then copy it into .grad instead of taking it."""
    def fwd(q, k, v, *rest):
        return q + 1, torch.zeros(q.shape[0], q.shape[2], q.shape[1]), torch.zeros(0, dtype=torch.int64)

    def fwd_varlen(q, k, v, *rest):
        return q + 1, torch.zeros(q.shape[1], q.shape[0]), torch.zeros(0, dtype=torch.int64)

    def bwd_into(dout, q, k, v, out, lse, *rest):
        dq, dk, dv = [x for x in rest if isinstance(x, torch.Tensor) and x.dtype == q.dtype][:3]
        calls.append([(g.data_ptr(), g.untyped_storage().data_ptr(), tuple(g.shape)) for g in (dq, dk, dv)])
        for i, g in enumerate((dq, dk, dv)):
            g.fill_(i + 1)

    return types.SimpleNamespace(fwd=fwd, fwd_varlen=fwd_varlen, bwd_into=bwd_into, bwd_varlen_into=bwd_into)


OPTS = (0.125, False, False, -1, -1, 0.0, None, 0.0)  # ..., alibi_slopes, dropout_p


@pytest.mark.parametrize("varlen", [False, True])
def test_qkvpacked_backward_writes_one_packed_gradient(monkeypatch, varlen):
    calls = []
    monkeypatch.setattr(packed, "_ops", _stand_in_ops(calls))
    monkeypatch.setattr(packed, "HAS_BACKWARD", True)
    shape = (10, 3, 4, 8) if varlen else (2, 5, 3, 4, 8)
    qkv = torch.randn(*shape, requires_grad=True)
    cu = (torch.tensor([0, 4, 10], dtype=torch.int32),) * 2 + (6, 6) if varlen else None
    out, lse = packed._PackedAttention.apply(qkv, None, cu, OPTS)
    assert torch.equal(out, qkv.detach().select(-3, 0) + 1)
    out.sum().backward()
    (dq, dk, dv), = calls
    # the kernels wrote into views of the one gradient tensor that became qkv.grad: no concatenation
    assert [g[0] for g in (dq, dk, dv)] == [qkv.grad.select(-3, i).data_ptr() for i in range(3)]
    assert dq[1] == dk[1] == dv[1] == qkv.grad.untyped_storage().data_ptr()
    for i in range(3):
        assert torch.equal(qkv.grad.select(-3, i), torch.full(dq[2], i + 1.0))


def test_kvpacked_backward_gqa_gradients(monkeypatch):
    calls = []
    monkeypatch.setattr(packed, "_ops", _stand_in_ops(calls))
    monkeypatch.setattr(packed, "HAS_BACKWARD", True)
    q = torch.randn(2, 5, 4, 8, requires_grad=True)
    kv = torch.randn(2, 7, 2, 2, 8, requires_grad=True)   # 2 K/V heads for 4 query heads
    out, _ = packed._PackedAttention.apply(q, kv, None, OPTS)
    out.sum().backward()
    (dq, dk, dv), = calls
    assert dq[2] == q.shape and dk[2] == dv[2] == (2, 7, 2, 8)
    assert dq[0] == q.grad.data_ptr() and (dk[0], dv[0]) == (kv.grad[:, :, 0].data_ptr(), kv.grad[:, :, 1].data_ptr())
    assert torch.equal(q.grad, torch.ones_like(q)) and torch.equal(kv.grad[:, :, 1], torch.full(dv[2], 3.0))


def test_packed_backward_needs_a_backward_build(monkeypatch):
    monkeypatch.setattr(packed, "_ops", _stand_in_ops([]))
    monkeypatch.setattr(packed, "HAS_BACKWARD", False)
    qkv = torch.randn(1, 4, 3, 2, 8, requires_grad=True)
    out, _ = packed._PackedAttention.apply(qkv, None, None, OPTS)
    with pytest.raises(NotImplementedError, match="FLASH_ATTN_CUDA_BACKWARD=0"):
        out.sum().backward()


@needs_extension
def test_packed_shapes(fake):
    out, lse = flash_attn_cuda.attention_qkvpacked(t(2, 100, 3, 8, HDIM), causal=True, return_lse=True)
    assert out.shape == (2, 100, 8, HDIM) and lse.shape == (2, 8, 100)
    assert flash_attn_cuda.attention_kvpacked(t(2, 100, 8, HDIM), t(2, 37, 2, 2, HDIM)).shape == (2, 100, 8, HDIM)
    cu = torch.tensor([0, 30, 100], dtype=torch.int32, device="cuda")
    out = flash_attn_cuda.attention_varlen_qkvpacked(t(100, 3, 8, HDIM), cu, 70)
    assert out.shape == (100, 8, HDIM)
    out, lse = flash_attn_cuda.attention_varlen_kvpacked(t(100, 8, HDIM), t(100, 2, 4, HDIM), cu, cu, 70, 70,
                                                         return_lse=True)
    assert out.shape == (100, 8, HDIM) and lse.shape == (8, 100)


@needs_extension
@pytest.mark.parametrize("fn,args,message", [
    ("attention_qkvpacked", lambda: (t(2, 100, 2, 8, HDIM),), r"qkv must be 5-D \(batch, seqlen, 3, nheads"),
    ("attention_qkvpacked", lambda: (t(100, 3, 8, HDIM),), "qkv must be 5-D"),
    ("attention_kvpacked", lambda: (t(2, 10, 8, HDIM), t(2, 10, 3, 2, HDIM)), r"kv must be 5-D \(batch, seqlen, 2"),
    ("attention_kvpacked", lambda: (t(2, 10, 3, HDIM), t(2, 10, 2, 2, HDIM)), "multiple of nheads"),
    ("attention_varlen_qkvpacked", lambda: (t(2, 10, 3, 8, HDIM), torch.zeros(2, dtype=torch.int32, device="cuda"), 5),
     r"qkv must be 4-D \(total_tokens, 3"),
])
def test_packed_bad_layout_is_one_clear_error(fake, fn, args, message):
    with pytest.raises(ValueError, match=message):
        getattr(flash_attn_cuda, fn)(*args())


def test_padding_only_when_needed():
    assert not _pad.needs_pad(torch.empty(1, 2, 3, 64))
    assert _pad.needs_pad(torch.empty(1, 2, 3, 59), torch.empty(1, 2, 3, 59))
    assert not _pad.needs_pad(torch.empty(1, 2, 3, 59), torch.empty(1, 2, 3, 60))  # mismatch: the checks name it
    assert not _pad.needs_pad(torch.empty(1, 2, 3, 257)) and not _pad.needs_pad([1, 2])
    x = torch.randn(2, 3, 4, 59)
    padded = _pad.pad_last(x)
    assert padded.shape == (2, 3, 4, 64) and torch.equal(padded[..., :59], x) and not padded[..., 59:].any()
    assert _pad.default_scale(None, 59) == 59 ** -0.5 and _pad.default_scale(0.3, 59) == 0.3


@needs_extension
@pytest.mark.parametrize("d", [59, 111, 4])
def test_head_dims_not_a_multiple_of_8_are_padded(fake, d):
    if (d + 7) // 8 * 8 > max(flash_attn_cuda.compiled_head_dims()):
        pytest.skip(f"head dim {d} needs a compiled head dim >= {(d + 7) // 8 * 8}")
    q, k = t(2, 50, 4, d), t(2, 30, 2, d)
    out, lse = flash_attn_cuda.attention(q, k, k, return_lse=True)
    assert out.shape == q.shape and lse.shape == (2, 4, 50)
    assert flash_attn_cuda.attention_qkvpacked(t(2, 50, 3, 4, d)).shape == (2, 50, 4, d)
    cu = torch.tensor([0, 50], dtype=torch.int32, device="cuda")
    assert flash_attn_cuda.attention_varlen(q[0], q[0], q[0], cu, cu, 50, 50).shape == (50, 4, d)
    assert flash_attn_cuda.attention_varlen_kvpacked(q[0], t(50, 2, 2, d), cu, cu, 50, 50).shape == (50, 4, d)


def test_padding_keeps_the_unpadded_default_scale(monkeypatch):
    """The padded call must use 1/sqrt(d) of the caller's head dim, not of the padded one."""
    seen = {}

    def fake_attention(q, k, v, dropout_p, softmax_scale, *rest, return_lse=False):
        seen["scale"], seen["d"] = softmax_scale, q.shape[-1]
        return torch.zeros(q.shape)

    x = torch.randn(1, 3, 2, 59)
    monkeypatch.setattr(flash_attn_cuda, "require_extension", lambda: None)
    original = flash_attn_cuda.attention
    monkeypatch.setattr(flash_attn_cuda, "attention", fake_attention)
    out = original(x, x, x)
    assert seen == {"scale": 59 ** -0.5, "d": 64} and out.shape == x.shape


def test_window_size_as_a_tensor():
    assert check_window_size(torch.tensor([3, 5])) == (3, 5)
    assert check_window_size(torch.tensor([-1, 7], dtype=torch.int32), causal=True) == (-1, 0)
    with pytest.raises(TypeError, match="must hold integers"):
        check_window_size(torch.tensor([3.0, 5.0]))
    with pytest.raises(ValueError, match="two entries"):
        check_window_size(torch.tensor([3, 5, 1]))
    with pytest.raises(ValueError, match="1-D"):
        check_window_size(torch.tensor([[3, 5]]))


@needs_extension
def test_alibi_with_softcap_is_accepted(fake):
    q = t(2, 16, 4, HDIM)
    slopes = torch.ones(2, 4, device="cuda")
    assert flash_attn_cuda.attention(q, q, q, softcap=5.0, alibi_slopes=slopes).shape == q.shape
