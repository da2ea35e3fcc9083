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


def attention_blockwise_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                                 lse: torch.Tensor, dout: torch.Tensor, causal: bool = False,
                                 softmax_scale: Optional[float] = None, block_m: int = 64,
                                 block_n: int = 32) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The FA2 backward, tile by tile (the model the backward kernels will follow).

    Pre-pass D = rowsum(dO * O). K/V blocks outer (one thread block each, dK/dV kept on chip),
    Q blocks inner: S = Q K^T, P = exp(S * scale - LSE) recomputed from the forward's LSE (no
    N x N buffer), dV += P^T dO, dP = dO V^T, dS = P * (dP - D), dK += scale * dS^T Q,
    dQ += scale * dS K (accumulated across K/V blocks). GQA: dK/dV summed over each group.
    Shapes as attention_ref; lse: (batch, nheads, seqlen_q). Returns dq, dk, dv.
    """
    batch, seqlen_q, nheads, d = q.shape
    seqlen_k, nheads_k = k.shape[1], k.shape[2]
    scale = d ** -0.5 if softmax_scale is None else softmax_scale
    kx, vx = _expand_kv(k, nheads), _expand_kv(v, nheads)                       # (b, sk, h, d)
    delta = (dout * out).sum(-1).transpose(1, 2)                               # D: (b, h, sq)
    dq = torch.zeros_like(q)
    dk = torch.zeros_like(kx)
    dv = torch.zeros_like(vx)
    shift = seqlen_k - seqlen_q
    lse_safe = torch.where(lse == float("-inf"), torch.full_like(lse, float("inf")), lse)  # rows w/o keys: P = 0
    for n0 in range(0, seqlen_k, block_n):                                      # one thread block per K/V tile
        n1 = min(n0 + block_n, seqlen_k)
        kj, vj = kx[:, n0:n1].transpose(1, 2), vx[:, n0:n1].transpose(1, 2)     # (b, h, bn, d)
        cols = torch.arange(n0, n1, device=q.device)[None, :]
        m_start = 0
        if causal:                                                              # Q tiles above the diagonal see nothing
            m_start = max(0, (n0 - shift) // block_m * block_m)
        dk_j = torch.zeros_like(kj)
        dv_j = torch.zeros_like(vj)
        for m0 in range(m_start, seqlen_q, block_m):
            m1 = min(m0 + block_m, seqlen_q)
            qi = q[:, m0:m1].transpose(1, 2)                                    # (b, h, bm, d)
            doi = dout[:, m0:m1].transpose(1, 2)                                # (b, h, bm, d)
            s = qi @ kj.transpose(-1, -2)                                       # (b, h, bm, bn)
            p = torch.exp(s * scale - lse_safe[:, :, m0:m1, None])
            if causal:
                rows = torch.arange(m0, m1, device=q.device)[:, None]
                p = p.masked_fill(cols > rows + shift, 0.0)
            dv_j += p.transpose(-1, -2) @ doi
            dp = doi @ vj.transpose(-1, -2)
            ds = p * (dp - delta[:, :, m0:m1, None])
            dk_j += scale * ds.transpose(-1, -2) @ qi
            dq[:, m0:m1] += (scale * ds @ kj).transpose(1, 2)
        dk[:, n0:n1] = dk_j.transpose(1, 2)
        dv[:, n0:n1] = dv_j.transpose(1, 2)
    group = nheads // nheads_k
    dk = dk.view(batch, seqlen_k, nheads_k, group, d).sum(3)
    dv = dv.view(batch, seqlen_k, nheads_k, group, d).sum(3)
    return dq, dk, dv
