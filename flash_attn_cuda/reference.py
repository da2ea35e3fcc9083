"""Pure-PyTorch references (any device, any float dtype).

attention_ref        naive softmax(q k^T * scale) v with the package's masking semantics; the
                     ground truth the kernels are tested against.
attention_blockwise  the FA2 forward algorithm step by step (Q blocks outer, K/V blocks inner,
                     running max and sum, exp2 with the scale folded in, deferred normalisation,
                     skipped fully-masked blocks, LSE = m + log l): a readable model of
                     csrc/fwd_kernel.h, checked against attention_ref on the CPU.

Shapes: q (batch, seqlen_q, nheads, d), k/v (batch, seqlen_k, nheads_k, d) -> out like q,
lse (batch, nheads, seqlen_q) float32 (float64 when computing in float64).
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch


def visible_mask(seqlen_q: int, seqlen_k: int, causal: bool, device=None) -> torch.Tensor:
    """(seqlen_q, seqlen_k) bool, True where query i may see key j. Causal is bottom-right
    aligned as in flash-attn >= 2.1: j <= i + seqlen_k - seqlen_q."""
    i = torch.arange(seqlen_q, device=device)[:, None]
    j = torch.arange(seqlen_k, device=device)[None, :]
    if not causal:
        return torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    return j <= i + (seqlen_k - seqlen_q)


def _expand_kv(k: torch.Tensor, nheads: int) -> torch.Tensor:
    # (b, sk, hk, d) -> (b, sk, h, d): q head h reads K/V head h // (h / hk)
    return k.repeat_interleave(nheads // k.shape[2], dim=2)


def attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                  softmax_scale: Optional[float] = None,
                  compute_dtype: Optional[torch.dtype] = torch.float32) -> Tuple[torch.Tensor, torch.Tensor]:
    """Naive attention computed in compute_dtype (None: in the inputs' own dtype, which is how
    "PyTorch's error in the low precision" is measured). Returns (out in compute_dtype, lse)."""
    if compute_dtype is not None:
        q, k, v = q.to(compute_dtype), k.to(compute_dtype), v.to(compute_dtype)
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
    k, v = _expand_kv(k, q.shape[2]), _expand_kv(v, q.shape[2])
    scores = torch.einsum("bihd,bjhd->bhij", q, k) * scale                 # (b, h, sq, sk)
    mask = visible_mask(q.shape[1], k.shape[1], causal, q.device)           # (sq, sk)
    scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores.float() if scores.dtype in (torch.float16, torch.bfloat16) else scores, dim=-1)
    probs = torch.softmax(scores, dim=-1)
    probs = torch.nan_to_num(probs, nan=0.0)                                # rows with no visible key -> 0
    out = torch.einsum("bhij,bjhd->bihd", probs, v)                         # (b, sq, h, d)
    return out, lse


def attention_blockwise(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                        softmax_scale: Optional[float] = None, block_m: int = 64,
                        block_n: int = 32) -> Tuple[torch.Tensor, torch.Tensor]:
    """The FA2 forward, tile by tile, in the inputs' dtype (use float64 to check the algebra)."""
    batch, seqlen_q, nheads, d = q.shape
    seqlen_k = k.shape[1]
    scale = d ** -0.5 if softmax_scale is None else softmax_scale
    scale_log2 = scale * math.log2(math.e)
    k, v = _expand_kv(k, nheads), _expand_kv(v, nheads)
    out = torch.zeros_like(q)
    lse = torch.empty(batch, nheads, seqlen_q, dtype=q.dtype, device=q.device)
    shift = seqlen_k - seqlen_q
    for m0 in range(0, seqlen_q, block_m):                         # one thread block per Q tile
        m1 = min(m0 + block_m, seqlen_q)
        rows = torch.arange(m0, m1, device=q.device)[:, None]
        n_max = -(-seqlen_k // block_n)
        if causal:                                                 # skip K/V blocks right of the diagonal
            keys_end = (m1 - 1) + shift + 1
            n_max = 0 if keys_end <= 0 else min(n_max, -(-keys_end // block_n))
        qi = q[:, m0:m1].transpose(1, 2)                           # (b, h, bm, d)
        row_max = torch.full((batch, nheads, m1 - m0), float("-inf"), dtype=q.dtype, device=q.device)
        row_sum = torch.zeros_like(row_max)
        acc = torch.zeros(batch, nheads, m1 - m0, d, dtype=q.dtype, device=q.device)
        for n in reversed(range(n_max)):                           # last block first, like the kernel
            n0, n1 = n * block_n, min((n + 1) * block_n, seqlen_k)
            kj, vj = k[:, n0:n1].transpose(1, 2), v[:, n0:n1].transpose(1, 2)   # (b, h, bn, d)
            s = qi @ kj.transpose(-1, -2)                          # raw scores (b, h, bm, bn)
            cols = torch.arange(n0, n1, device=q.device)[None, :]
            if causal:
                s = s.masked_fill(cols > rows + shift, float("-inf"))
            m_new = torch.maximum(row_max, s.amax(-1))
            m_scaled = torch.where(m_new == float("-inf"), torch.zeros_like(m_new), m_new * scale_log2)
            correction = torch.exp2(row_max * scale_log2 - m_scaled)   # 0 for the first block
            p = torch.exp2(s * scale_log2 - m_scaled[..., None])   # unnormalised probabilities
            row_sum = row_sum * correction + p.sum(-1)
            acc = acc * correction[..., None] + p @ vj             # O rescaled, never normalised here
            row_max = m_new
        empty = row_sum == 0                                       # rows that saw no key
        inv = torch.where(empty, torch.zeros_like(row_sum), 1.0 / row_sum)
        out[:, m0:m1] = (acc * inv[..., None]).transpose(1, 2)     # one division per row, at the end
        lse[:, :, m0:m1] = torch.where(empty, torch.full_like(row_sum, float("-inf")),
                                       row_max * scale + torch.log(row_sum))
    return out, lse
