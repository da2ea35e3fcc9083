"""flash_attn_cuda as PyTorch SDPA's flash implementation (PyTorch >= 2.11's registry).

    import flash_attn_cuda, torch
    torch.nn.attention.activate_flash_attention_impl("flash_attn_cuda")   # never done on import
    ...  F.scaled_dot_product_attention(...) on the flash backend now runs these kernels
    torch.nn.attention.restore_flash_attention_impl()                       # PyTorch's own again

Activation overrides the CUDA kernels of aten::_scaled_dot_product_flash_attention, its backward,
aten::_flash_attention_forward (varlen/nested paths, windows, ALiBi), its backward and, where the
op exists, _flash_attention_forward_no_dropout_inplace, with a torch.library.Library("aten",
"IMPL") (as torch/nn/attention/_fa3.py does for FA3). PyTorch still decides which calls reach the
flash backend (its own checks: dtype, head dim, no arbitrary mask); autograd and torch.compile use
PyTorch's derivative formulas and meta functions, so the outputs here follow the meta layouts.

The schemas differ between PyTorch versions (2.11: fewer keyword arguments than 2.14): each impl
takes the positional arguments every version has and the keyword-only ones by name; a keyword this
module does not know, or a value the kernels cannot serve (return_debug_mask, seqused_k,
block_table, ALiBi with gradients), raises one RuntimeError naming it.
rng_state contract (PyTorch's own flash layout, the meta shapes): the forward returns rng_state
(2,) uint64 = (seed, offset) of its dropout Philox counters (our fwd op's int64 rng_state viewed as
uint64; zeros without dropout) and an unused () uint64 zero; the backward regenerates the mask from
rng_state (viewed back as int64), so a graph-captured pair stays consistent.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

NAME = "flash_attn_cuda"
_ops = torch.ops.flash_attn_cuda

# op name -> our impl; registered when the op exists in this PyTorch.
_OPS = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward",
        "_flash_attention_forward", "_flash_attention_backward", "_flash_attention_forward_no_dropout_inplace")
# Keyword-only arguments of the forward schemas that are hints or absent-by-default; any other
# keyword must be None / its default.
_HINTS = ("num_splits",)


def _unsupported(what: str) -> RuntimeError:
    return RuntimeError(f"flash_attn_cuda SDPA backend: {what} is not supported by flash_attn_cuda's kernels "
                        f"(torch.nn.attention.restore_flash_attention_impl() gives PyTorch's own flash kernels back)")


def _ready(t: torch.Tensor) -> torch.Tensor:
    """t as the kernels read it: last dim contiguous, 16-byte aligned offset and strides (a copy
    only when not)."""
    aligned = t.stride(-1) == 1 and t.storage_offset() % 8 == 0 and all(s % 8 == 0 for s in t.stride()[:-1])
    return t if aligned else t.contiguous()


def _check_common(query: torch.Tensor, dropout_p: float, return_debug_mask: bool = False) -> None:
    if not 0.0 <= dropout_p < 1.0:
        raise _unsupported(f"dropout_p={dropout_p} (must be in [0, 1))")
    if return_debug_mask:
        raise _unsupported("return_debug_mask=True")
    if query.dtype not in (torch.float16, torch.bfloat16):
        raise _unsupported(f"dtype {query.dtype}")


def _no_extra(kwargs: dict, op: str) -> None:
    for key, value in kwargs.items():
        if key not in _HINTS and value is not None:
            raise _unsupported(f"{op}(..., {key}=...)")


def _rng_outputs(rng_state: torch.Tensor, device: torch.device):
    """(rng_state (2,) uint64, unused () uint64) from our fwd op's int64 rng_state ((0,) without dropout)."""
    seed = rng_state.view(torch.uint64) if rng_state.numel() == 2 else torch.zeros((2,), dtype=torch.uint64,
                                                                                   device=device)
    return seed, torch.zeros((), dtype=torch.uint64, device=device)


def _rng_input(rng_state: Optional[torch.Tensor], dropout_p: float) -> Optional[torch.Tensor]:
    """The backward's rng_state (2,) uint64 as our bwd op takes it (int64), or None without dropout."""
    if dropout_p == 0.0:
        return None
    if rng_state is None or rng_state.numel() != 2:
        raise _unsupported("dropout_p > 0 without the forward's rng_state")
    return rng_state.contiguous().view(torch.int64)


def _window(left: Optional[int], right: Optional[int]):
    return (-1 if left is None else int(left)), (-1 if right is None else int(right))


def _deterministic() -> bool:
    return torch.are_deterministic_algorithms_enabled()


def _forward(query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, is_causal, scale, window_left, window_right,
             alibi_slopes, dropout_p=0.0):
    """(out, lse, rng_state) of the fwd / fwd_varlen op for BSHD (or packed THD) query/key/value."""
    q, k, v = _ready(query), _ready(key), _ready(value)
    softmax_scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    if alibi_slopes is not None and any(t.requires_grad for t in (query, key, value)):
        raise _unsupported("alibi_slopes on inputs that require grad (aten's flash backward schema carries no "
                           "slopes)")
    left, right = window_left, (0 if is_causal else window_right)
    if cum_seq_q is None:
        return _ops.fwd(q, k, v, softmax_scale, bool(is_causal), _deterministic(), left, right, 0.0, alibi_slopes,
                        float(dropout_p))
    return _ops.fwd_varlen(q, k, v, cum_seq_q, cum_seq_k, int(max_q), int(max_k), softmax_scale, bool(is_causal),
                           _deterministic(), left, right, 0.0, alibi_slopes, float(dropout_p))


def flash_attention_forward(query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
                            return_debug_mask, *, scale=None, window_size_left=None, window_size_right=None,
                            seqused_k=None, alibi_slopes=None, out=None, **kwargs):
    """aten::_flash_attention_forward: query (batch, seqlen_q, nheads, d) or packed (total_q, nheads, d)
    with cum_seq_q/k -> (output, logsumexp, rng_state, unused, debug_attn_mask)."""
    _check_common(query, dropout_p, return_debug_mask)
    if seqused_k is not None:
        raise _unsupported("seqused_k")
    _no_extra(kwargs, "_flash_attention_forward")
    left, right = _window(window_size_left, window_size_right)
    result, lse, rng_state = _forward(query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, is_causal, scale, left,
                                      right, alibi_slopes, dropout_p)
    if out is not None:
        out.copy_(result)
        result = out
    seed, offset = _rng_outputs(rng_state, query.device)
    return result, lse, seed, offset, torch.empty(0, dtype=query.dtype, device=query.device)


def flash_attention_forward_no_dropout_inplace(out, query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
                                               is_causal, return_debug_mask, **kwargs):
    """aten::_flash_attention_forward_no_dropout_inplace: writes out, returns logsumexp."""
    return flash_attention_forward(query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
                                   return_debug_mask, out=out, **kwargs)[1]


def flash_attention_backward(grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
                             dropout_p, is_causal, rng_state, unused, *, scale=None, window_size_left=None,
                             window_size_right=None, **kwargs):
    """aten::_flash_attention_backward -> (grad_query, grad_key, grad_value), layouts as the forward's."""
    _check_common(query, dropout_p)
    _no_extra(kwargs, "_flash_attention_backward")
    left, right = _window(window_size_left, window_size_right)
    right = 0 if is_causal else right
    q, k, v, o, do = (_ready(t) for t in (query, key, value, out, grad_out))
    softmax_scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    lse = logsumexp.contiguous()
    rng = _rng_input(rng_state, dropout_p)
    if cum_seq_q is None or cum_seq_q.numel() == 0:
        return _ops.bwd(do, q, k, v, o, lse, softmax_scale, bool(is_causal), _deterministic(), left, right, 0.0, None,
                        float(dropout_p), rng)
    return _ops.bwd_varlen(do, q, k, v, o, lse, cum_seq_q, cum_seq_k, int(max_q), int(max_k), softmax_scale,
                           bool(is_causal), _deterministic(), left, right, 0.0, None, float(dropout_p), rng)


def sdpa_flash_forward(query, key, value, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None):
    """aten::_scaled_dot_product_flash_attention: query (batch, nheads, seqlen_q, d), key/value
    (batch, nheads_k, seqlen_k, d) (nheads_k < nheads: enable_gqa) -> (output like query's layout,
    logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, rng_state, unused, debug_attn_mask)."""
    _check_common(query, dropout_p, return_debug_mask)
    out, lse, rng_state = _forward(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), None, None, None,
                                   None, is_causal, scale, -1, -1, None, dropout_p)
    out = out.transpose(1, 2)                       # (batch, nheads, seqlen_q, d) view of the BSHD result
    if out.stride() != query.stride():              # the meta function's layout: empty_like(query)
        out = torch.empty_like(query).copy_(out)
    seed, offset = _rng_outputs(rng_state, query.device)
    return (out, lse, None, None, query.shape[2], key.shape[2], seed, offset,
            torch.empty(0, dtype=query.dtype, device=query.device))


def sdpa_flash_backward(grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
                        is_causal, philox_seed, philox_offset, *, scale=None):
    """aten::_scaled_dot_product_flash_attention_backward: BHSD tensors -> BHSD gradients."""
    dq, dk, dv = flash_attention_backward(grad_out.transpose(1, 2), query.transpose(1, 2), key.transpose(1, 2),
                                          value.transpose(1, 2), out.transpose(1, 2), logsumexp, None, None, max_q,
                                          max_k, dropout_p, is_causal, philox_seed, philox_offset, scale=scale)
    return dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)


_IMPLS = {
    "_scaled_dot_product_flash_attention": sdpa_flash_forward,
    "_scaled_dot_product_flash_attention_backward": sdpa_flash_backward,
    "_flash_attention_forward": flash_attention_forward,
    "_flash_attention_backward": flash_attention_backward,
    "_flash_attention_forward_no_dropout_inplace": flash_attention_forward_no_dropout_inplace,
}


@dataclass
class Handle:
    """What activate returns to torch's registry; remove() drops the overrides (PyTorch's kernels
    are back)."""
    library: Optional[torch.library.Library]

    def remove(self) -> None:
        if self.library is not None:
            self.library._destroy()
            self.library = None


def registered_ops() -> list[str]:
    """The aten ops this PyTorch has among those overridden (the in-place one is newer)."""
    return [name for name in _OPS if hasattr(torch.ops.aten, name)]


def install() -> Handle:
    """The register_fn given to torch.nn.attention.register_flash_attention_impl: overrides the
    CUDA kernels now and returns the handle that undoes it. Needs the compiled extension."""
    from ._ops import require_extension
    require_extension()
    lib = torch.library.Library("aten", "IMPL", "CUDA")
    for name in registered_ops():
        lib.impl(name, _IMPLS[name], "CUDA")
    return Handle(lib)


def register() -> bool:
    """Registers NAME with PyTorch's flash-attention registry (not activated). False when this
    PyTorch has no registry (older than 2.11): install() still works on its own."""
    attention = torch.nn.attention
    if not hasattr(attention, "register_flash_attention_impl"):
        return False
    attention.register_flash_attention_impl(NAME, register_fn=install)
    return True
