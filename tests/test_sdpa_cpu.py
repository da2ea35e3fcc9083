"""The SDPA flash implementation (flash_attn_cuda.sdpa) without a GPU: registration, activation and
restore through PyTorch's registry (the dispatcher's table shows whose CUDA kernel is active), the
aten schemas against the impls' signatures, and the impls' argument handling with the kernels
replaced by CPU stand-ins."""
import inspect
import types

import pytest
import torch

import flash_attn_cuda
from flash_attn_cuda import sdpa

BF16 = torch.bfloat16

attention_registry = pytest.importorskip("torch.nn.attention")
if not hasattr(attention_registry, "register_flash_attention_impl"):
    pytest.skip("this PyTorch has no flash-attention registry (< 2.11)", allow_module_level=True)


def _cuda_kernel_is_ours(op: str) -> bool:
    active = [line for line in torch._C._dispatch_dump(f"aten::{op}").splitlines() if line.startswith("CUDA:")]
    assert len(active) == 1
    return "RegisterCUDA" not in active[0]


def test_registered_on_import_never_activated():
    assert sdpa.NAME in attention_registry.list_flash_attention_impls()
    assert attention_registry.current_flash_attention_impl() != sdpa.NAME
    assert not any(_cuda_kernel_is_ours(op) for op in sdpa.registered_ops())


def test_activate_and_restore(monkeypatch):
    monkeypatch.setattr(flash_attn_cuda._ops, "require_extension", lambda: None)
    assert "_scaled_dot_product_flash_attention" in sdpa.registered_ops()
    try:
        attention_registry.activate_flash_attention_impl(sdpa.NAME)
        assert attention_registry.current_flash_attention_impl() == sdpa.NAME
        assert all(_cuda_kernel_is_ours(op) for op in sdpa.registered_ops())
    finally:
        attention_registry.restore_flash_attention_impl()
    assert attention_registry.current_flash_attention_impl() is None
    assert not any(_cuda_kernel_is_ours(op) for op in sdpa.registered_ops())


def test_activation_without_extension_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(flash_attn_cuda._ops, "HAS_EXTENSION", False)
    with pytest.raises(RuntimeError, match="flash_attn_cuda._C is not built"):
        attention_registry.activate_flash_attention_impl(sdpa.NAME)
    assert attention_registry.current_flash_attention_impl() is None
    assert not any(_cuda_kernel_is_ours(op) for op in sdpa.registered_ops())


@pytest.mark.parametrize("op", sdpa.registered_ops())
def test_impls_take_this_pytorchs_schema(op):
    """Every positional argument of the aten schema in order; every keyword-only one by name or
    through **kwargs (then refused unless None: _no_extra)."""
    schema = getattr(torch.ops.aten, op).default._schema
    params = inspect.signature(sdpa._IMPLS[op]).parameters
    positional = [n for n, p in params.items() if p.kind == p.POSITIONAL_OR_KEYWORD]
    schema_positional = [a.name for a in schema.arguments if not a.kwarg_only]
    assert positional[:len(schema_positional)] == schema_positional
    assert all(params[n].default is not inspect.Parameter.empty for n in positional[len(schema_positional):])
    has_var_kw = any(p.kind == p.VAR_KEYWORD for p in params.values())
    for a in schema.arguments:
        if a.kwarg_only:
            assert a.name in params or has_var_kw, f"{op}: keyword {a.name}"


def _stand_ins(calls):
    def rng_state(dropout_p):  # the fwd ops' third output: int64 (2,) (seed, offset) with dropout, else (0,)
        return torch.tensor([7, 8] if dropout_p > 0 else [], dtype=torch.int64)

    def fwd(q, k, v, scale, causal, deterministic, left, right, softcap, alibi, dropout_p=0.0):
        calls.append(("fwd", q.shape, k.shape, scale, causal, left, right, alibi))
        return q.contiguous() * 2, torch.zeros(q.shape[0], q.shape[2], q.shape[1]), rng_state(dropout_p)

    def fwd_varlen(q, k, v, cu_q, cu_k, max_q, max_k, scale, causal, deterministic, left, right, softcap, alibi,
                   dropout_p=0.0):
        calls.append(("fwd_varlen", max_q, max_k, left, right))
        return q * 2, torch.zeros(q.shape[1], q.shape[0]), rng_state(dropout_p)

    def bwd(dout, q, k, v, out, lse, scale, causal, deterministic, left, right, softcap, alibi, dropout_p=0.0,
            rng=None):
        calls.append(("bwd", dout.shape, scale, causal, left, right, dropout_p,
                      None if rng is None else (rng.dtype, rng.tolist())))
        return dout.contiguous(), k.contiguous() + 1, v.contiguous() + 2

    return types.SimpleNamespace(fwd=fwd, fwd_varlen=fwd_varlen, bwd=bwd)


def test_sdpa_forward_layouts_and_placeholders(monkeypatch):
    calls = []
    monkeypatch.setattr(sdpa, "_ops", _stand_ins(calls))
    # q from a (batch, seqlen, nheads, d) projection seen as (batch, nheads, seqlen, d): no copy back
    q = torch.randn(2, 10, 4, 8, dtype=BF16).transpose(1, 2)
    k = torch.randn(2, 12, 2, 8, dtype=BF16).transpose(1, 2)          # GQA: 2 K/V heads
    out, lse, cu_q, cu_k, max_q, max_k, seed, offset, debug = sdpa.sdpa_flash_forward(q, k, k, 0.0, True)
    assert torch.equal(out, q * 2) and out.stride() == q.stride()
    assert lse.shape == (2, 4, 10) and (cu_q, cu_k, max_q, max_k) == (None, None, 10, 12)
    assert (seed.shape, seed.dtype, offset.shape, offset.dtype) == ((2,), torch.uint64, (), torch.uint64)
    assert debug.numel() == 0
    assert calls[0][1:3] == ((2, 10, 4, 8), (2, 12, 2, 8)) and calls[0][3] == 8 ** -0.5 and calls[0][5:7] == (-1, 0)
    # a contiguous (batch, nheads, seqlen, d) query: the output takes its layout (meta: empty_like(query))
    q = torch.randn(2, 4, 10, 8, dtype=BF16)
    out = sdpa.sdpa_flash_forward(q, q, q, scale=0.3)[0]
    assert torch.equal(out, q * 2) and out.stride() == q.stride() and calls[-1][3] == 0.3


def test_sdpa_backward_transposes(monkeypatch):
    calls = []
    monkeypatch.setattr(sdpa, "_ops", _stand_ins(calls))
    q = torch.randn(2, 4, 10, 8, dtype=BF16)
    k = torch.randn(2, 2, 12, 8, dtype=BF16)
    g = torch.randn(2, 4, 10, 8, dtype=BF16)
    dq, dk, dv = sdpa.sdpa_flash_backward(g, q, k, k, q, torch.zeros(2, 4, 10), None, None, 10, 12, 0.0, False,
                                          None, None, scale=0.5)
    assert torch.equal(dq, g) and torch.equal(dk, k + 1) and torch.equal(dv, k + 2)
    assert calls == [("bwd", (2, 10, 4, 8), 0.5, False, -1, -1, 0.0, None)]


def test_sdpa_dropout_rng_state_contract(monkeypatch):
    """Dropout: the forward's rng_state output is our fwd op's int64 (seed, offset) as (2,) uint64
    (PyTorch's flash layout), and the backward hands it back to our bwd op as int64."""
    calls = []
    monkeypatch.setattr(sdpa, "_ops", _stand_ins(calls))
    q = torch.randn(2, 4, 10, 8, dtype=BF16)
    result = sdpa.sdpa_flash_forward(q, q, q, 0.3)
    rng_state, unused = result[6], result[7]
    assert rng_state.dtype == torch.uint64 and rng_state.shape == (2,) and unused.shape == ()
    assert rng_state.view(torch.int64).tolist() == [7, 8]
    sdpa.sdpa_flash_backward(q, q, q, q, q, torch.zeros(2, 4, 10), None, None, 10, 10, 0.3, False, rng_state,
                             unused)
    assert calls[-1][-2:] == (0.3, (torch.int64, [7, 8]))
    no_dropout = sdpa.sdpa_flash_forward(q, q, q, 0.0)
    assert no_dropout[6].dtype == torch.uint64 and no_dropout[6].shape == (2,)
    with pytest.raises(RuntimeError, match="without the forward's rng_state"):
        sdpa.sdpa_flash_backward(q, q, q, q, q, torch.zeros(2, 4, 10), None, None, 10, 10, 0.3, False, None, None)


def test_flash_attention_forward_varlen_and_window(monkeypatch):
    calls = []
    monkeypatch.setattr(sdpa, "_ops", _stand_ins(calls))
    q = torch.randn(30, 4, 8, dtype=BF16)
    cu = torch.tensor([0, 10, 30], dtype=torch.int32)
    out, lse, *_ = sdpa.flash_attention_forward(q, q, q, cu, cu, 20, 20, 0.0, False, False, window_size_left=5,
                                                window_size_right=3, num_splits=2)
    assert torch.equal(out, q * 2) and lse.shape == (4, 30) and calls[-1] == ("fwd_varlen", 20, 20, 5, 3)
    target = torch.empty_like(q)
    lse = sdpa.flash_attention_forward_no_dropout_inplace(target, q, q, q, cu, cu, 20, 20, 0.0, True, False)
    assert torch.equal(target, q * 2) and calls[-1][-2:] == (-1, 0)


@pytest.mark.parametrize("call,message", [
    (lambda q: sdpa.sdpa_flash_forward(q, q, q, 1.0), r"dropout_p=1.0 \(must be in \[0, 1\)\)"),
    (lambda q: sdpa.sdpa_flash_forward(q, q, q, 0.0, False, True), "return_debug_mask"),
    (lambda q: sdpa.sdpa_flash_forward(q.float(), q.float(), q.float()), "dtype torch.float32"),
    (lambda q: sdpa.flash_attention_forward(q, q, q, None, None, 4, 4, 0.0, False, False,
                                            seqused_k=torch.zeros(2, dtype=torch.int32)), "seqused_k"),
    (lambda q: sdpa.flash_attention_forward(q, q, q, None, None, 4, 4, 0.0, False, False,
                                            block_table=torch.zeros(2, 1, dtype=torch.int32)), "block_table"),
    (lambda q: sdpa.flash_attention_forward(q.requires_grad_(), q, q, None, None, 4, 4, 0.0, False, False,
                                            alibi_slopes=torch.ones(4)), "alibi_slopes on inputs that require"),
])
def test_unsupported_cases_are_one_clear_error(monkeypatch, call, message):
    monkeypatch.setattr(sdpa, "_ops", _stand_ins([]))
    q = torch.randn(2, 4, 4, 8, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match=f"flash_attn_cuda SDPA backend: .*{message}.*restore_flash_attention_impl"):
        call(q)
