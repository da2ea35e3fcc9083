"""flash-attn's packed entry points: q, k, v as one (..., 3, nheads, d) tensor or k, v as one
(..., 2, nheads_k, d) tensor (flash_attn_qkvpacked_func, flash_attn_kvpacked_func and their
varlen twins, same argument names and order).

Zero-copy both ways: the kernels read q, k, v as strided views of the packed tensor, and the
backward writes dq, dk, dv straight into views of one packed gradient (ops bwd_into /
bwd_varlen_into), so autograd never concatenates three gradients. With GQA (kvpacked, fewer K/V
heads) the per-query-head dk/dv are summed into the packed gradient's views.
"""
from __future__ import annotations

from typing import Optional, Tuple, Union

import torch
from torch._subclasses.fake_tensor import is_fake

from . import _pad
from ._ops import HAS_BACKWARD, compiled_dtypes, compiled_head_dims, require_extension
from ._validate import check_attention_inputs, check_varlen_inputs

_ops = torch.ops.flash_attn_cuda

Result = Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]


def _split(qkv_or_q: torch.Tensor, kv: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Views q, k, v of a packed qkv (kv None; dim -3 of size 3) or of q and a packed kv (dim -3 of
    size 2). No copies."""
    if kv is None:
        return qkv_or_q.select(-3, 0), qkv_or_q.select(-3, 1), qkv_or_q.select(-3, 2)
    return qkv_or_q, kv.select(-3, 0), kv.select(-3, 1)


def _check_packed(name: str, t: object, count: int, ndim: int) -> None:
    """t: a tensor (..., count, nheads, d) with ndim dims (5: dense, 4: varlen); the rest of the
    checks run on its views."""
    layout = ("(batch, seqlen, " if ndim == 5 else "(total_tokens, ") + f"{count}, nheads, headdim)"
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"flash_attn_cuda: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != ndim or t.shape[-3] != count:
        raise ValueError(f"flash_attn_cuda: {name} must be {ndim}-D {layout}, got shape {tuple(t.shape)}")


class _PackedAttention(torch.autograd.Function):
    """Forward of fwd / fwd_varlen on views of the packed inputs; backward into one packed gradient
    per packed input. cu: None (dense) or (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k);
    options: (softmax_scale, causal, deterministic, window_left, window_right, softcap, alibi_slopes,
    dropout_p). The forward's rng_state (dropout's seed and offset) is saved for the backward."""

    @staticmethod
    def forward(ctx, qkv_or_q, kv, cu, options):
        q, k, v = _split(qkv_or_q, kv)
        if cu is None:
            out, lse, rng_state = _ops.fwd(q, k, v, *options)
        else:
            out, lse, rng_state = _ops.fwd_varlen(q, k, v, *cu, *options)
        ctx.mark_non_differentiable(lse)
        ctx.save_for_backward(qkv_or_q, kv, out, lse, rng_state, *((cu[0], cu[1]) if cu is not None else ()))
        ctx.max_seqlens = None if cu is None else (cu[2], cu[3])
        ctx.options = options
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        if not HAS_BACKWARD:
            raise NotImplementedError("flash_attn_cuda: this build has no backward pass (FLASH_ATTN_CUDA_BACKWARD=0); "
                                      "rebuild without that flag to train with it")
        qkv_or_q, kv, out, lse, rng_state, *cu_seqlens = ctx.saved_tensors
        rng = rng_state if ctx.options[-1] > 0 else None  # options end in dropout_p
        q, k, v = _split(qkv_or_q, kv)
        d_first = torch.empty_like(qkv_or_q)                     # dqkv, or dq
        d_kv = None if kv is None else torch.empty_like(kv)
        dq, dk, dv = _split(d_first, d_kv)
        dout = dout.contiguous()
        if ctx.max_seqlens is None:
            _ops.bwd_into(dout, q, k, v, out, lse, dq, dk, dv, *ctx.options, rng)
        else:
            _ops.bwd_varlen_into(dout, q, k, v, out, lse, *cu_seqlens, dq, dk, dv, *ctx.max_seqlens, *ctx.options,
                                 rng)
        return d_first, d_kv, None, None


def _run(qkv_or_q, kv, cu, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
         return_attn_probs, return_lse) -> Result:
    """Checks the views, then runs _PackedAttention. cu as there, with cu_seqlens unchecked."""
    from . import _checked_options  # the options' checks shared with attention()
    require_extension()
    compiling = torch.compiler.is_compiling()
    q, k, v = _split(qkv_or_q, kv)
    checks = dict(check_device=not compiling and not is_fake(q), check_alignment=not compiling)
    if cu is None:
        check_attention_inputs(q, k, v, compiled_head_dims(), compiled_dtypes(), **checks)
        batch, seqlen_k = q.shape[0], k.shape[1]
    else:
        _, batch = check_varlen_inputs(q, k, v, *cu, compiled_head_dims(), compiled_dtypes(), **checks,
                                       check_values=not compiling)
        seqlen_k = int(cu[3])
    scale, left, right, softcap, alibi_slopes, dropout_p = _checked_options(
        q, batch, seqlen_k, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, return_attn_probs,
        varlen=cu is not None)
    if return_attn_probs:
        raise ValueError("flash_attn_cuda: return_attn_probs (the dropout testing hook) is served by attention() "
                         "and attention_varlen(); call those on the unpacked views")
    options = (float(scale), bool(causal), bool(deterministic), left, right, softcap, alibi_slopes, dropout_p)
    cu = None if cu is None else (cu[0], cu[1], int(cu[2]), int(cu[3]))
    out, lse = _PackedAttention.apply(qkv_or_q, kv, cu, options)
    return (out, lse) if return_lse else out


def _run_padded(qkv_or_q, kv, *args, return_lse: bool) -> Result:
    """_run, with head dims that are not a multiple of 8 zero-padded (flash_attn_cuda._pad)."""
    tensors = (qkv_or_q,) if kv is None else (qkv_or_q, kv)
    if not _pad.needs_pad(*tensors):
        return _run(qkv_or_q, kv, *args, return_lse=return_lse)
    d = qkv_or_q.shape[-1]
    cu, dropout_p, softmax_scale, *rest = args
    padded = [_pad.pad_last(t) for t in tensors]
    result = _run(padded[0], padded[1] if kv is not None else None, cu, dropout_p,
                  _pad.default_scale(softmax_scale, d), *rest, return_lse=return_lse)
    return _pad.unpad_result(result, d, return_lse)


def attention_qkvpacked(
    qkv: torch.Tensor,
    dropout_p: float = 0.0,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_size: Tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: Optional[torch.Tensor] = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
    *,
    return_lse: bool = False,
) -> Result:
    """attention() with q, k, v packed in one tensor (flash-attn's flash_attn_qkvpacked_func).

    qkv: (batch, seqlen, 3, nheads, headdim); q, k, v are read as views of it and the gradient
    is one tensor like qkv (no concatenation). Options and result as attention()."""
    _check_packed("qkv", qkv, 3, 5)
    return _run_padded(qkv, None, None, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                       deterministic, return_attn_probs, return_lse=return_lse)


def attention_kvpacked(
    q: torch.Tensor,
    kv: torch.Tensor,
    dropout_p: float = 0.0,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_size: Tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: Optional[torch.Tensor] = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
    *,
    return_lse: bool = False,
) -> Result:
    """attention() with k, v packed in one tensor (flash-attn's flash_attn_kvpacked_func).

    q: (batch, seqlen_q, nheads, headdim); kv: (batch, seqlen_k, 2, nheads_k, headdim), nheads a
    multiple of nheads_k (GQA). The gradient of kv is one tensor like kv. Options as attention()."""
    _check_packed("kv", kv, 2, 5)
    return _run_padded(q, kv, None, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                       deterministic, return_attn_probs, return_lse=return_lse)


def attention_varlen_qkvpacked(
    qkv: torch.Tensor,
    cu_seqlens: torch.Tensor,
    max_seqlen: int,
    dropout_p: float = 0.0,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_size: Tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: Optional[torch.Tensor] = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
    *,
    return_lse: bool = False,
) -> Result:
    """attention_varlen() with q, k, v packed in one tensor (flash_attn_varlen_qkvpacked_func).

    qkv: (total_tokens, 3, nheads, headdim); cu_seqlens: int32 (batch + 1,) serves q and k/v;
    max_seqlen bounds every sequence. Options and result as attention_varlen()."""
    _check_packed("qkv", qkv, 3, 4)
    cu = (cu_seqlens, cu_seqlens, max_seqlen, max_seqlen)
    return _run_padded(qkv, None, cu, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                       deterministic, return_attn_probs, return_lse=return_lse)


def attention_varlen_kvpacked(
    q: torch.Tensor,
    kv: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    dropout_p: float = 0.0,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_size: Tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: Optional[torch.Tensor] = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
    *,
    return_lse: bool = False,
) -> Result:
    """attention_varlen() with k, v packed in one tensor (flash_attn_varlen_kvpacked_func).

    q: (total_q, nheads, headdim); kv: (total_k, 2, nheads_k, headdim). Options and result as
    attention_varlen()."""
    _check_packed("kv", kv, 2, 4)
    cu = (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    return _run_padded(q, kv, cu, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                       deterministic, return_attn_probs, return_lse=return_lse)
