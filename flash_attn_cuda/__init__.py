"""flash_attn_cuda: FlashAttention-2 in CUTLASS/CuTe as a PyTorch extension.

    from flash_attn_cuda import attention
    out = attention(q, k, v, causal=True)   # q: (batch, seqlen_q, nheads, headdim)
"""
from __future__ import annotations

from typing import Optional, Tuple, Union

import torch
from torch._subclasses.fake_tensor import is_fake

from . import _pad
from ._ops import HAS_FEATURES, compiled_dtypes, compiled_head_dims, require_extension
from .kvcache import attention_with_kvcache
from ._validate import (check_alibi_slopes, check_attention_inputs, check_dropout_p, check_softcap,
                        check_softcap_scale, check_softmax_scale, check_varlen_inputs, check_window_size)

__version__ = "0.1.0"
__all__ = ["attention", "attention_varlen", "attention_qkvpacked", "attention_kvpacked", "attention_varlen_qkvpacked",
           "attention_varlen_kvpacked", "attention_with_kvcache", "compiled_head_dims", "compiled_dtypes",
           "__version__"]


# return_attn_probs (flash-attn's testing hook) materialises (batch, nheads, seqlen_q, seqlen_k) float32.
_ATTN_PROBS_MAX_ELEMENTS = 1 << 28


def _checked_options(q: torch.Tensor, batch: int, seqlen_k: int, dropout_p: float, softmax_scale: Optional[float],
                     causal: bool, window_size: Tuple[int, int], softcap: float, alibi_slopes: Optional[torch.Tensor],
                     return_attn_probs: bool, varlen: bool) -> Tuple[float, int, int, float, Optional[torch.Tensor], float]:
    """The options of attention() / attention_varlen() after the tensors, checked and normalised:
    (softmax_scale, window_left, window_right, softcap, alibi_slopes, dropout_p). q's heads are dim -2."""
    dropout_p = check_dropout_p(dropout_p)
    if not isinstance(return_attn_probs, bool):
        raise TypeError(f"flash_attn_cuda: return_attn_probs must be a bool, got {type(return_attn_probs).__name__}")
    softmax_scale = q.shape[-1] ** -0.5 if softmax_scale is None else check_softmax_scale(softmax_scale)
    window_left, window_right = check_window_size(window_size, causal)
    softcap = check_softcap(softcap)
    alibi_slopes = check_alibi_slopes(alibi_slopes, batch, q.shape[-2], q.device)
    check_softcap_scale(softcap, softmax_scale)
    if alibi_slopes is not None and alibi_slopes.requires_grad:
        raise ValueError("flash_attn_cuda: alibi_slopes gets no gradient; pass alibi_slopes.detach()")
    # A left edge at or past the last key is no edge (the plain kernel runs it).
    needs_features = (varlen or softcap != 0 or alibi_slopes is not None or 0 <= window_left < seqlen_k
                      or dropout_p > 0)
    if needs_features and not HAS_FEATURES:
        raise ValueError("flash_attn_cuda: window_size with a left edge, softcap, alibi_slopes, dropout_p and "
                         "attention_varlen need the feature kernels, which this build left out "
                         "(FLASH_ATTN_CUDA_FEATURES=0); rebuild without that flag")
    return softmax_scale, window_left, window_right, softcap, alibi_slopes, dropout_p


def _attn_probs(q: torch.Tensor, k: torch.Tensor, rng_state: torch.Tensor, dropout_p: float, softmax_scale: float,
                causal: bool, window: Tuple[int, int], softcap: float,
                alibi_slopes: Optional[torch.Tensor]) -> torch.Tensor:
    """return_attn_probs' tensor for dense q (batch, seqlen_q, nheads, d), k: the softmax
    probabilities (batch, nheads, seqlen_q, seqlen_k) float32 (a float32 reference computation from
    q and k), with the elements the kernels dropped negated (FA2's sign encoding of its S_dmask;
    the mask itself comes from the dropout_mask op, the kernels' own Philox function on this call's
    rng_state). Kept elements: probs >= 0 (elements with probability 0 carry no information)."""
    from .reference import attention_probs_ref
    batch, seqlen_q, nheads, _ = q.shape
    seqlen_k = k.shape[1]
    if batch * nheads * seqlen_q * seqlen_k > _ATTN_PROBS_MAX_ELEMENTS:
        raise ValueError("flash_attn_cuda: return_attn_probs is a testing hook for small shapes "
                         f"(batch * nheads * seqlen_q * seqlen_k <= {_ATTN_PROBS_MAX_ELEMENTS})")
    probs = attention_probs_ref(q, k, causal, softmax_scale, window_size=window, softcap=softcap,
                                alibi_slopes=alibi_slopes)
    if dropout_p == 0:
        return probs
    keep = torch.ops.flash_attn_cuda.dropout_mask(rng_state, batch, nheads, seqlen_q, seqlen_k, dropout_p)
    return torch.where(keep, probs, -probs)


def _attn_probs_varlen(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, rng_state, dropout_p,
                       *options) -> torch.Tensor:
    """_attn_probs for packed sequences: (batch, nheads, max_seqlen_q, max_seqlen_k), sequence b in
    [b, :, :len_q, :len_k] (rows and keys counted from its start, as the kernels' mask), zero elsewhere."""
    starts_q, starts_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    batch, nheads = len(starts_q) - 1, q.shape[1]
    probs = q.new_zeros((batch, nheads, max_seqlen_q, max_seqlen_k), dtype=torch.float32)
    for b in range(batch):
        qb = q[starts_q[b]:starts_q[b + 1]].unsqueeze(0)
        kb = k[starts_k[b]:starts_k[b + 1]].unsqueeze(0)
        if qb.shape[1] == 0 or kb.shape[1] == 0:
            continue
        *head, slopes = options
        if slopes is not None and slopes.dim() == 2:
            slopes = slopes[b:b + 1]
        probs[b:b + 1, :, :qb.shape[1], :kb.shape[1]] = _attn_probs(qb, kb, None, 0.0, *head, slopes)
    if dropout_p > 0:
        keep = torch.ops.flash_attn_cuda.dropout_mask(rng_state, batch, nheads, max_seqlen_q, max_seqlen_k, dropout_p)
        probs = torch.where(keep, probs, -probs)
    return probs


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
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
) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """Exact softmax attention, computed by the FlashAttention-2 kernels of this package.

    Args:
        q: (batch, seqlen_q, nheads, headdim), float16 or bfloat16, on a CUDA GPU (sm80+).
        k: (batch, seqlen_k, nheads_k, headdim), same dtype/device; nheads % nheads_k == 0
           (nheads_k < nheads is grouped-query attention: head h reads K/V head h // (nheads // nheads_k)).
        v: (batch, seqlen_k, nheads_k, headdim).
        dropout_p: attention dropout probability in [0, 1) (flash-attn's positional order: q, k, v,
            dropout_p, softmax_scale, causal, ...). Each element of the softmax probabilities P is
            dropped with probability p and the kept ones are scaled by 1 / (1 - p), forward and
            backward, as flash-attn 2 and SDPA do; the mask comes from Philox4x32-10 counters of
            PyTorch's CUDA default generator (torch.manual_seed reproduces it; each call advances
            the generator; CUDA-graph safe) and is regenerated in the backward, never stored. p is
            used at 8-bit resolution, as flash-attn 2: keep iff an 8-bit random number
            < t = round((1 - p) * 256), kept values scaled by 256 / t (unbiased; the keep rate t / 256
            is within 1/512 of 1 - p: reference.dropout_keep_rate). p > 511/512 (t = 0) raises.
            Pass 0.0 at inference (no flag follows module.eval()).
        softmax_scale: scale of q k^T before the softmax; default 1/sqrt(headdim).
        causal: mask keys after the query, aligned to the bottom-right corner of the score matrix
            (as flash-attn >= 2.1): query i sees keys j <= i + seqlen_k - seqlen_q. Queries that see
            no key get output 0 and LSE -inf.
        window_size: (left, right) sliding window (a tuple, or a two-element integer tensor as
            flash-attn takes it): query i sees keys j with
            i + seqlen_k - seqlen_q - left <= j <= i + seqlen_k - seqlen_q + right; -1 = unbounded
            on that side. causal=True sets right = 0. K/V blocks outside the window are skipped.
        softcap: > 0 replaces each scaled score s by softcap * tanh(s / softcap) (Gemma-2 style);
            0 = off.
        alibi_slopes: float32 (nheads,) or (batch, nheads): head h adds
            -slope * |i + seqlen_k - seqlen_q - j| to its scaled scores (after softcap, when both).
        deterministic: make the backward bit-reproducible (dq is otherwise summed with float32
            atomics in a run-dependent order): same bits on every run for the same GPU model,
            shapes and build. Costs extra float32 dq buffers (one per thread block of a (batch,
            head): about num_SMs / (batch * nheads) of them, at most one per 128 keys) and some
            speed. torch.use_deterministic_algorithms does not switch it on; pass it explicitly.
        return_attn_probs: flash-attn's testing hook: also return the attention probabilities
            (batch, nheads, seqlen_q, seqlen_k) float32, with the elements this call's dropout
            dropped negated (FA2's sign encoding): recomputed in float32 from q and k, the mask
            from the kernels' own Philox function (op dropout_mask). Small shapes only.
        return_lse: (keyword) also return the log-sum-exp of each row's scaled scores.

    headdim <= 256; one that is not a multiple of 8 is zero-padded to the next one here (a copy
    of q, k, v; exact; out and the gradients come back in the original head dim). Only the last
    dimension of each input must be contiguous (strided views of the others are fine).

    Returns:
        out: (batch, seqlen_q, nheads, headdim), the dtype of q; and if return_lse,
        lse: (batch, nheads, seqlen_q) float32. With return_attn_probs: (out, lse, probs) as
        flash-attn returns them.
    """
    require_extension()
    if _pad.needs_pad(q, k, v):
        d = q.shape[-1]
        return _pad.unpad_result(
            attention(_pad.pad_last(q), _pad.pad_last(k), _pad.pad_last(v), dropout_p,
                      _pad.default_scale(softmax_scale, d), causal, window_size, softcap, alibi_slopes, deterministic,
                      return_attn_probs, return_lse=return_lse), d, return_lse)
    # While torch.compile traces, storage offsets and the GPU are out of reach: the op's C++
    # side checks alignment and capability on the real tensors at run time.
    compiling = torch.compiler.is_compiling()
    check_attention_inputs(q, k, v, compiled_head_dims(), compiled_dtypes(),
                           check_device=not compiling and not is_fake(q), check_alignment=not compiling)
    softmax_scale, window_left, window_right, softcap, alibi_slopes, dropout_p = _checked_options(
        q, q.shape[0], k.shape[1], dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
        return_attn_probs, varlen=False)
    out, lse, rng_state = torch.ops.flash_attn_cuda.fwd(q, k, v, float(softmax_scale), bool(causal),
                                                        bool(deterministic), window_left, window_right, softcap,
                                                        alibi_slopes, dropout_p)
    if return_attn_probs:
        return out, lse, _attn_probs(q.detach(), k.detach(), rng_state, dropout_p, float(softmax_scale), bool(causal),
                                     (window_left, window_right), softcap, alibi_slopes)
    return (out, lse) if return_lse else out


def attention_varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
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
) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """attention() on a packed batch of variable-length sequences (flash-attn's
    flash_attn_varlen_func layout), forward and backward.

    Args:
        q: (total_q, nheads, headdim); k, v: (total_k, nheads_k, headdim).
        cu_seqlens_q, cu_seqlens_k: int32 (batch + 1,) prefix sums on q's device: sequence b is
            rows cu[b]:cu[b + 1] (length 0 allowed).
        max_seqlen_q, max_seqlen_k: Python ints >= the longest sequence (they size the grid).
        Other options as in attention(), in flash_attn_varlen_func's order; causal and windows
        align each sequence's bottom-right corner.

    Returns out (total_q, nheads, headdim) and, with return_lse, lse (nheads, total_q) float32;
    with return_attn_probs (out, lse, probs), probs (batch, nheads, max_seqlen_q, max_seqlen_k) as
    in attention(), sequence b in probs[b, :, :len_q, :len_k], rows and keys counted from its start.
    The cu_seqlens values are checked (one device-to-host copy) on the first call with a given
    unmodified pair of tensors, never while torch.compile traces.
    """
    require_extension()
    if _pad.needs_pad(q, k, v):  # head dims that are not a multiple of 8, as in attention()
        d = q.shape[-1]
        return _pad.unpad_result(
            attention_varlen(_pad.pad_last(q), _pad.pad_last(k), _pad.pad_last(v), cu_seqlens_q, cu_seqlens_k,
                             max_seqlen_q, max_seqlen_k, dropout_p, _pad.default_scale(softmax_scale, d), causal,
                             window_size, softcap, alibi_slopes, deterministic, return_attn_probs,
                             return_lse=return_lse), d, return_lse)
    compiling = torch.compiler.is_compiling()
    _, batch = check_varlen_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                   compiled_head_dims(), compiled_dtypes(),
                                   check_device=not compiling and not is_fake(q), check_alignment=not compiling,
                                   check_values=not compiling)
    softmax_scale, window_left, window_right, softcap, alibi_slopes, dropout_p = _checked_options(
        q, batch, int(max_seqlen_k), dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
        return_attn_probs, varlen=True)
    out, lse, rng_state = torch.ops.flash_attn_cuda.fwd_varlen(
        q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k), float(softmax_scale), bool(causal),
        bool(deterministic), window_left, window_right, softcap, alibi_slopes, dropout_p)
    if return_attn_probs:
        return out, lse, _attn_probs_varlen(q.detach(), k.detach(), cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q),
                                            int(max_seqlen_k), rng_state, dropout_p, float(softmax_scale),
                                            bool(causal), (window_left, window_right), softcap, alibi_slopes)
    return (out, lse) if return_lse else out


from .packed import (attention_kvpacked, attention_qkvpacked, attention_varlen_kvpacked,  # noqa: E402
                     attention_varlen_qkvpacked)

from . import sdpa  # noqa: E402

# "flash_attn_cuda" in PyTorch's SDPA flash registry (PyTorch >= 2.11); never activated here:
# torch.nn.attention.activate_flash_attention_impl("flash_attn_cuda") does that.
sdpa.register()
