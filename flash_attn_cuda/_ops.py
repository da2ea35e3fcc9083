"""Loads the compiled kernels and wires the raw op into torch.library: fake (meta) impl for
torch.compile, and an autograd registration."""
from __future__ import annotations

import torch

try:
    from . import _C  # noqa: F401  (registers torch.ops.flash_attn_cuda.*)
except ImportError as e:  # pragma: no cover - exercised only on broken installs
    raise ImportError(
        "flash_attn_cuda: the compiled extension flash_attn_cuda._C is missing or failed to load "
        f"({e}). Build it with `pip install --no-build-isolation .` (see README)."
    ) from e

_ops = torch.ops.flash_attn_cuda


# Read once at import: fixed for the life of the library, and plain Python values keep
# torch.compile from tracing into these ops.
_COMPILED_HEAD_DIMS: tuple[int, ...] = tuple(_ops.compiled_head_dims())
_COMPILED_DTYPES: tuple[torch.dtype, ...] = tuple(getattr(torch, name) for name in _ops.compiled_dtypes())


def compiled_head_dims() -> tuple[int, ...]:
    """Head dims this build compiled kernels for (FLASH_ATTN_CUDA_HDIMS)."""
    return _COMPILED_HEAD_DIMS


def compiled_dtypes() -> tuple[torch.dtype, ...]:
    """Element types this build compiled kernels for (FLASH_ATTN_CUDA_DTYPES)."""
    return _COMPILED_DTYPES


@torch.library.register_fake("flash_attn_cuda::fwd")
def _fwd_fake(q, k, v, softmax_scale, causal, deterministic=False, window_left=-1, window_right=-1, softcap=0.0,
              alibi_slopes=None):
    # out: (batch, seqlen_q, nheads, headdim) contiguous like the kernel's; lse: (batch, nheads, seqlen_q) fp32
    batch, seqlen_q, nheads, _ = q.shape
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, nheads, seqlen_q), dtype=torch.float32, device=q.device)
    return out, lse


# Builds with FLASH_ATTN_CUDA_BACKWARD=0 (forward only, faster to compile) have no backward op.
HAS_BACKWARD: bool = bool(_ops.has_backward())
# Builds with FLASH_ATTN_CUDA_FEATURES=0 have no window/softcap/ALiBi/varlen kernels (fwd_launch.h).
HAS_FEATURES: bool = bool(_ops.has_features())


# fwd's arguments after q, k, v with their schema defaults (softmax_scale and causal have none).
_FWD_DEFAULTS = (None, None, False, -1, -1, 0.0, None)


def _save_for_backward(ctx, tensors, options) -> None:
    """tensors, then the alibi_slopes tensor (options' last) when given, saved for the backward;
    the other options kept on ctx.options."""
    *rest, alibi_slopes = options
    ctx.save_for_backward(*tensors, *(() if alibi_slopes is None else (alibi_slopes,)))
    ctx.options = tuple(rest)


def _fwd_setup_context(ctx, inputs, output):
    q, k, v = inputs[:3]
    out, lse = output
    ctx.mark_non_differentiable(lse)  # gradients flow through out only
    if HAS_BACKWARD:
        # softmax_scale, causal, deterministic, window_left, window_right, softcap, alibi_slopes
        # (defaults filled in)
        _save_for_backward(ctx, (q, k, v, out, lse), tuple(inputs[3:]) + _FWD_DEFAULTS[len(inputs) - 3:])


def _require_backward() -> None:
    if not HAS_BACKWARD:
        raise NotImplementedError(
            "flash_attn_cuda: this build has no backward pass (it was built with FLASH_ATTN_CUDA_BACKWARD=0); "
            "rebuild without that flag to train with it")


def _fwd_backward(ctx, grad_out, grad_lse):
    _require_backward()
    q, k, v, out, lse, *alibi_slopes = ctx.saved_tensors
    dq, dk, dv = _ops.bwd(grad_out.contiguous(), q, k, v, out, lse, *ctx.options,
                          alibi_slopes[0] if alibi_slopes else None)
    return (dq, dk, dv) + (None,) * len(_FWD_DEFAULTS)


torch.library.register_autograd("flash_attn_cuda::fwd", _fwd_backward, setup_context=_fwd_setup_context)

if HAS_BACKWARD:
    @torch.library.register_fake("flash_attn_cuda::bwd")
    def _bwd_fake(dout, q, k, v, out, lse, softmax_scale, causal, deterministic=False, window_left=-1,
                  window_right=-1, softcap=0.0, alibi_slopes=None):
        # dq like q, dk/dv like k/v (contiguous)
        return (torch.empty(q.shape, dtype=q.dtype, device=q.device),
                torch.empty(k.shape, dtype=k.dtype, device=k.device),
                torch.empty(v.shape, dtype=v.dtype, device=v.device))


@torch.library.register_fake("flash_attn_cuda::fwd_varlen")
def _fwd_varlen_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                     deterministic=False, window_left=-1, window_right=-1, softcap=0.0, alibi_slopes=None):
    # out: (total_q, nheads, headdim) like q; lse: (nheads, total_q) fp32
    total_q, nheads, _ = q.shape
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((nheads, total_q), dtype=torch.float32, device=q.device)
    return out, lse


def _fwd_varlen_setup_context(ctx, inputs, output):
    q, k, v, cu_seqlens_q, cu_seqlens_k = inputs[:5]
    out, lse = output
    ctx.mark_non_differentiable(lse)
    if HAS_BACKWARD:
        # max_seqlen_q, max_seqlen_k, then fwd's options (defaults filled in) as in _fwd_setup_context
        _save_for_backward(ctx, (q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k),
                           tuple(inputs[5:]) + _FWD_DEFAULTS[len(inputs) - 7:])


def _fwd_varlen_backward(ctx, grad_out, grad_lse):
    _require_backward()
    q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, *alibi_slopes = ctx.saved_tensors
    dq, dk, dv = _ops.bwd_varlen(grad_out.contiguous(), q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, *ctx.options,
                                 alibi_slopes[0] if alibi_slopes else None)
    return (dq, dk, dv) + (None,) * (4 + len(_FWD_DEFAULTS))


torch.library.register_autograd("flash_attn_cuda::fwd_varlen", _fwd_varlen_backward,
                                setup_context=_fwd_varlen_setup_context)

if HAS_BACKWARD:
    @torch.library.register_fake("flash_attn_cuda::bwd_varlen")
    def _bwd_varlen_fake(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                         softmax_scale, causal, deterministic=False, window_left=-1, window_right=-1, softcap=0.0,
                         alibi_slopes=None):
        # dq like q, dk/dv like k/v (contiguous, packed)
        return (torch.empty(q.shape, dtype=q.dtype, device=q.device),
                torch.empty(k.shape, dtype=k.dtype, device=k.device),
                torch.empty(v.shape, dtype=v.dtype, device=v.device))
