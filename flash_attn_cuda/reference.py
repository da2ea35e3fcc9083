"""Pure-PyTorch references (any device, any float dtype).

attention_ref         naive softmax(scores) v with the package's masking semantics; the ground
                      truth the kernels are tested against (differentiable: autograd gives the
                      reference gradients).
attention_varlen_ref  attention_ref per sequence of packed (total_tokens, nheads, d) tensors
                      delimited by int32 cumulative lengths (flash-attn's varlen layout).
attention_blockwise   the FA2 forward algorithm step by step (Q blocks outer, K/V blocks inner,
                      running max and sum, exp2 with the scale folded in, deferred normalisation,
                      skipped blocks, LSE = m + log l): a readable model of csrc/fwd_kernel.h,
                      checked against attention_ref on the CPU.
attention_blockwise_backward   the FA2 backward, tile by tile (model of csrc/bwd_kernel.h).
kv_block_range / q_block_range / block_needs_mask   the block-skipping arithmetic the kernels
                      share (csrc/mask.h), as pure functions.
kvcache_reference     flash_attn_with_kvcache (flash_attn_cuda.kvcache.attention_with_kvcache):
                      rotary, in-place append (on copies), paged / batch-indexed / left-padded
                      caches, then attention_ref per sequence; with apply_rotary_reference,
                      paged_gather_reference and split_kv_combine_reference (the split-KV merge).

Scores. With s = scale * q k^T (scale = softmax_scale, default 1/sqrt(d)), the score of query
i and key j is, in this order (flash-attn's order):
    s -> softcap * tanh(s / softcap)                        if softcap > 0
      -> + (-slope[b, h] * |i + seqlen_k - seqlen_q - j|)    if alibi_slopes is given
      -> -inf where key j is invisible to query i
and the output is softmax(scores) v; lse = logsumexp(scores) per row. Rows that see no key
give output 0 and lse -inf (and zero gradients).

Visibility (csrc/params.h). Key j is visible to query i (bottom-right aligned, flash-attn
>= 2.1) iff  i + seqlen_k - seqlen_q - left <= j <= i + seqlen_k - seqlen_q + right  for
window_size = (left, right), a negative side meaning unbounded. causal=True forces right = 0
and keeps left (flash-attn sets window right to 0 when causal): causal alone is (-1, 0).

Shapes: q (batch, seqlen_q, nheads, d), k/v (batch, seqlen_k, nheads_k, d) -> out like q,
lse (batch, nheads, seqlen_q) float32 (float64 when computing in float64). alibi_slopes:
(nheads,) or (batch, nheads); query head h uses slope h (GQA/MQA too).
"""
from __future__ import annotations

import math
from typing import List, NamedTuple, Optional, Sequence, Tuple, Union

import torch

Window = Tuple[int, int]


def effective_window(causal: bool, window_size: Window = (-1, -1)) -> Window:
    """The (left, right) window the kernels see: causal=True forces right = 0, left unchanged.
    Negative sides mean unbounded and are passed through as given."""
    left, right = window_size
    return (int(left), 0) if causal else (int(left), int(right))


def _visible(rows: torch.Tensor, cols: torch.Tensor, shift: int, window: Window) -> torch.Tensor:
    # rows (m, 1), cols (1, n) absolute indices -> (m, n) bool: the masking rule of csrc/params.h.
    left, right = window
    offset = cols - rows - shift                       # key position relative to the query's diagonal
    mask = torch.ones(offset.shape, dtype=torch.bool, device=offset.device)
    if right >= 0:
        mask &= offset <= right
    if left >= 0:
        mask &= offset >= -left
    return mask


def visible_mask(seqlen_q: int, seqlen_k: int, causal: bool = False, device=None, *,
                 window_size: Window = (-1, -1)) -> torch.Tensor:
    """(seqlen_q, seqlen_k) bool, True where query i may see key j:
    i + shift - left <= j <= i + shift + right with shift = seqlen_k - seqlen_q (bottom-right
    aligned as in flash-attn >= 2.1), a negative side unbounded; causal forces right = 0."""
    i = torch.arange(seqlen_q, device=device)[:, None]
    j = torch.arange(seqlen_k, device=device)[None, :]
    return _visible(i, j, seqlen_k - seqlen_q, effective_window(causal, window_size))


def alibi_bias(seqlen_q: int, seqlen_k: int, alibi_slopes: torch.Tensor, dtype: Optional[torch.dtype] = None,
               device=None) -> torch.Tensor:
    """-slope * |i + seqlen_k - seqlen_q - j|: (nheads, seqlen_q, seqlen_k) for slopes (nheads,),
    (batch, nheads, seqlen_q, seqlen_k) for slopes (batch, nheads). With causal, flash-attn's
    slope * (j - i - (seqlen_k - seqlen_q)) is the same number on every visible key."""
    i = torch.arange(seqlen_q, device=device)[:, None]
    j = torch.arange(seqlen_k, device=device)[None, :]
    distance = (i + (seqlen_k - seqlen_q) - j).abs()                          # (sq, sk)
    slopes = alibi_slopes if dtype is None else alibi_slopes.to(dtype)
    return -slopes[..., None, None] * distance.to(slopes.dtype)


def _expand_kv(k: torch.Tensor, nheads: int) -> torch.Tensor:
    # (b, sk, hk, d) -> (b, sk, h, d): q head h reads K/V head h // (h / hk)
    return k.repeat_interleave(nheads // k.shape[2], dim=2)


def _slopes_bh(alibi_slopes: Optional[torch.Tensor], batch: int, nheads: int,
               dtype: torch.dtype) -> Optional[torch.Tensor]:
    # (nheads,) or (batch, nheads) -> (batch, nheads) in dtype
    if alibi_slopes is None:
        return None
    return alibi_slopes.to(dtype).expand(batch, nheads)


def attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                  softmax_scale: Optional[float] = None,
                  compute_dtype: Optional[torch.dtype] = torch.float32, *,
                  window_size: Window = (-1, -1), softcap: float = 0.0,
                  alibi_slopes: Optional[torch.Tensor] = None,
                  key_mask: Optional[torch.Tensor] = None,
                  dropout_mask: Optional[torch.Tensor] = None,
                  dropout_p: float = 0.0) -> Tuple[torch.Tensor, torch.Tensor]:
    """Naive attention computed in compute_dtype (None: in the inputs' own dtype, which is how
    "PyTorch's error in the low precision" is measured). Scores, masking and shapes as in the
    module docstring. key_mask: bool (seqlen_k,) or (batch, seqlen_k); False hides that key from
    every query, on top of the window rule, which keeps its alignment (shift = seqlen_k - seqlen_q
    counts hidden keys too): left padding of a KV cache, or one split of the key axis.
    dropout_mask: bool (batch, nheads, seqlen_q, seqlen_k), True = kept: the probabilities are
    multiplied by dropout_mask * dropout_scale(dropout_p) (the kernels' 256 / t, within 0.6 % of
    1 / (1 - p) for p <= 0.5) before P V (the LSE is unchanged).
    Returns (out in compute_dtype, lse)."""
    if compute_dtype is not None:
        q, k, v = q.to(compute_dtype), k.to(compute_dtype), v.to(compute_dtype)
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
    k, v = _expand_kv(k, q.shape[2]), _expand_kv(v, q.shape[2])
    seqlen_q, seqlen_k = q.shape[1], k.shape[1]
    scores = torch.einsum("bihd,bjhd->bhij", q, k) * scale                 # (b, h, sq, sk)
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    if alibi_slopes is not None:
        scores = scores + alibi_bias(seqlen_q, seqlen_k, alibi_slopes, scores.dtype, q.device)
    mask = visible_mask(seqlen_q, seqlen_k, causal, q.device, window_size=window_size)   # (sq, sk)
    if key_mask is not None:
        mask = mask & key_mask[..., None, None, :] if key_mask.dim() == 2 else mask & key_mask  # (b, 1, sq, sk)
    scores = scores.masked_fill(~mask, float("-inf"))   # after every transform: no NaN gradients
    lse = torch.logsumexp(scores.float() if scores.dtype in (torch.float16, torch.bfloat16) else scores, dim=-1)
    probs = torch.softmax(scores, dim=-1)
    probs = torch.nan_to_num(probs, nan=0.0)                                # rows with no visible key -> 0
    if dropout_mask is not None:
        probs = probs * dropout_mask.to(probs.dtype) * dropout_scale(dropout_p)
    out = torch.einsum("bhij,bjhd->bihd", probs, v)                         # (b, sq, h, d)
    return out, lse


def attention_varlen_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                         cu_seqlens_k: torch.Tensor, causal: bool = False, softmax_scale: Optional[float] = None,
                         compute_dtype: Optional[torch.dtype] = torch.float32, *,
                         window_size: Window = (-1, -1), softcap: float = 0.0,
                         alibi_slopes: Optional[torch.Tensor] = None, dropout_mask: Optional[torch.Tensor] = None,
                         dropout_p: float = 0.0) -> Tuple[torch.Tensor, torch.Tensor]:
    """attention_ref on each sequence of a packed batch, results packed the same way.

    q: (total_q, nheads, d), k/v: (total_k, nheads_k, d); cu_seqlens_q/k: (batch + 1,) int
    prefix sums (sequence b is rows cu[b]:cu[b+1]; empty sequences allowed). alibi_slopes:
    (nheads,) or (batch, nheads). Masking and alibi use each sequence's own lengths.
    Returns out (total_q, nheads, d) in compute_dtype and lse (nheads, total_q) (flash-attn's
    varlen LSE layout); differentiable in q, k, v through autograd. dropout_mask: bool (batch,
    nheads, >= max seqlen_q, >= max seqlen_k), sequence b's mask in [b, :, :sq_b, :sk_b].
    """
    starts_q, starts_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    outs: List[torch.Tensor] = []
    lses: List[torch.Tensor] = []
    for b in range(len(starts_q) - 1):
        qb = q[starts_q[b]:starts_q[b + 1]].unsqueeze(0)                    # (1, sq_b, h, d)
        kb = k[starts_k[b]:starts_k[b + 1]].unsqueeze(0)                    # (1, sk_b, hk, d)
        vb = v[starts_k[b]:starts_k[b + 1]].unsqueeze(0)
        slopes = None
        if alibi_slopes is not None:
            slopes = alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b:b + 1]
        mask_b = None
        if dropout_mask is not None:
            mask_b = dropout_mask[b:b + 1, :, :qb.shape[1], :kb.shape[1]]
        out_b, lse_b = attention_ref(qb, kb, vb, causal, softmax_scale, compute_dtype,
                                     window_size=window_size, softcap=softcap, alibi_slopes=slopes,
                                     dropout_mask=mask_b, dropout_p=dropout_p)
        outs.append(out_b[0])                                               # (sq_b, h, d)
        lses.append(lse_b[0])                                               # (h, sq_b)
    if not outs:                                                            # batch == 0
        dtype = q.dtype if compute_dtype is None else compute_dtype
        lse_dtype = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
        return (q.new_zeros(q.shape, dtype=dtype),
                q.new_zeros((q.shape[1], q.shape[0]), dtype=lse_dtype))
    return torch.cat(outs, dim=0), torch.cat(lses, dim=1)


def attention_probs_ref(q: torch.Tensor, k: torch.Tensor, causal: bool = False,
                        softmax_scale: Optional[float] = None, *, window_size: Window = (-1, -1),
                        softcap: float = 0.0, alibi_slopes: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The softmax probabilities (batch, nheads, seqlen_q, seqlen_k) in float32 of attention_ref's
    scores (0 where a row sees no key)."""
    q, k = q.float(), k.float()
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
    k = _expand_kv(k, q.shape[2])
    seqlen_q, seqlen_k = q.shape[1], k.shape[1]
    scores = torch.einsum("bihd,bjhd->bhij", q, k) * scale
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    if alibi_slopes is not None:
        scores = scores + alibi_bias(seqlen_q, seqlen_k, alibi_slopes, scores.dtype, q.device)
    mask = visible_mask(seqlen_q, seqlen_k, causal, q.device, window_size=window_size)
    return torch.nan_to_num(torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1), nan=0.0)


# ---------------------------------------------------------------- DROPOUT (csrc/philox.h)
#
# Philox4x32-10 (Salmon et al., SC 2011) and the map from a score element (b, h, row, col) to its
# counter and 8-bit slot, as csrc/philox.h defines them; vectorised over int64 tensors (values kept
# in [0, 2^32)). tests/test_dropout_cpu.py checks it against known-answer vectors and the C++ header.

_MASK32 = 0xFFFFFFFF


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 of counters (c0..c3) under key (k0, k1): int64 tensors or ints of 32-bit values
    (broadcast). Returns the four output words (int64 tensors in [0, 2^32))."""
    c0, c1, c2, c3 = (torch.as_tensor(c, dtype=torch.int64) for c in (c0, c1, c2, c3))
    k0, k1 = torch.as_tensor(k0, dtype=torch.int64), torch.as_tensor(k1, dtype=torch.int64)
    for _ in range(10):
        hi0, lo0 = _mulhi(c0, 0xD2511F53), _mullo(c0, 0xD2511F53)
        hi1, lo1 = _mulhi(c2, 0xCD9E8D57), _mullo(c2, 0xCD9E8D57)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0, k1 = (k0 + 0x9E3779B9) & _MASK32, (k1 + 0xBB67AE85) & _MASK32
    return c0, c1, c2, c3


def _mullo(a: torch.Tensor, m: int) -> torch.Tensor:
    """Low 32 bits of a * m for 32-bit a and m, in int64 without overflow."""
    return ((a & 0xFFFF) * m + (((a >> 16) * (m & 0xFFFF)) << 16)) & _MASK32


def _mulhi(a: torch.Tensor, m: int) -> torch.Tensor:
    """High 32 bits of a * m for 32-bit a and m, in int64 without overflow (16-bit halves)."""
    a_lo, a_hi = a & 0xFFFF, a >> 16
    m_lo, m_hi = m & 0xFFFF, m >> 16
    mid = ((a_lo * m_lo) >> 16) + ((a_hi * m_lo) & 0xFFFF) + ((a_lo * m_hi) & 0xFFFF)
    return (a_hi * m_hi + ((a_hi * m_lo) >> 16) + ((a_lo * m_hi) >> 16) + (mid >> 16)) & _MASK32


def dropout_threshold(dropout_p: float) -> int:
    """The kernels' keep threshold t for 8-bit random numbers (keep iff byte < t): round((1 - p) * 256),
    in [0, 256] (0, p > 511/512, is refused by the kernels; 256, p < 1/512, keeps everything)."""
    return min(256, max(0, int(math.floor((1.0 - dropout_p) * 256.0 + 0.5))))


def dropout_keep_rate(dropout_p: float) -> float:
    """The keep probability the kernels have for dropout_p: t / 256 (within 1/512 of 1 - p)."""
    return dropout_threshold(dropout_p) / 256.0


def dropout_scale(dropout_p: float) -> float:
    """The factor the kernels apply to kept probabilities: 256 / t = 1 / keep rate (unbiased)."""
    return 1.0 / dropout_keep_rate(dropout_p)


def dropout_keep_mask(seed: int, offset: int, batch: int, nheads: int, seqlen_q: int, seqlen_k: int,
                      dropout_p: float, device=None) -> torch.Tensor:
    """bool (batch, nheads, seqlen_q, seqlen_k): True where the kernels keep a score element of the
    call whose rng_state is (seed, offset) (csrc/philox.h: one Philox call per (16 rows, 64 columns,
    lane, column-octet parity), one 8-bit number per element)."""
    b = torch.arange(batch, dtype=torch.int64, device=device).view(-1, 1, 1, 1)
    h = torch.arange(nheads, dtype=torch.int64, device=device).view(1, -1, 1, 1)
    row = torch.arange(seqlen_q, dtype=torch.int64, device=device).view(1, 1, -1, 1)
    col = torch.arange(seqlen_k, dtype=torch.int64, device=device).view(1, 1, 1, -1)
    offset &= (1 << 64) - 1
    base_lo = (offset & _MASK32) + b * nheads + h                          # offset + b * nheads + h ...
    base_hi = ((offset >> 32) + (base_lo >> 32)) & _MASK32                 # ... with its carry
    lane = (row % 8) * 4 + (col % 8) // 2
    c0 = (col // 64) * 2 + (col // 8) % 2
    c1 = (row // 16) * 32 + lane
    seed &= (1 << 64) - 1
    out = philox4x32_10(c0, c1, base_lo & _MASK32, base_hi, seed & _MASK32, seed >> 32)
    slot = ((row // 8) % 2) * 8 + ((col // 16) % 4) * 2 + col % 2
    word = torch.where(slot < 4, out[0], torch.where(slot < 8, out[1], torch.where(slot < 12, out[2], out[3])))
    u8 = (word >> (8 * (slot % 4))) & 0xFF
    return u8 < dropout_threshold(dropout_p)


# ---------------------------------------------------------------- BLOCK SKIPPING (csrc/mask.h)
#
# The visible keys of the rows of a Q block form one interval (each row's interval moves right
# by one per row), and so do the rows that see the keys of a K/V block: the ranges below are
# exact, not just conservative (tests/test_features_cpu.py checks every block against the
# dense mask). Arguments: block index, tile sizes, the sequence lengths and the effective
# window (effective_window(causal, window_size)); a negative side is unbounded.

def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def kv_block_range(m_block: int, block_m: int, block_n: int, seqlen_q: int, seqlen_k: int,
                   window_left: int, window_right: int) -> Tuple[int, int]:
    """K/V blocks [n_min, n_max) that hold a key visible to some row of Q block m_block
    (0 <= m_block < cdiv(seqlen_q, block_m)); n_max <= n_min: the block sees no key at all.
    Same arithmetic as csrc/mask.h KvBlockRange."""
    shift = seqlen_k - seqlen_q
    first_row = m_block * block_m
    last_row = min(seqlen_q, first_row + block_m) - 1
    n_max = _cdiv(seqlen_k, block_n)
    if window_right >= 0:                     # row i sees keys j <= i + shift + right
        keys_end = last_row + shift + window_right + 1                    # exclusive
        n_max = 0 if keys_end <= 0 else min(n_max, _cdiv(keys_end, block_n))
    n_min = 0
    if window_left >= 0:                      # row i sees keys j >= i + shift - left
        first_key = first_row + shift - window_left
        n_min = 0 if first_key <= 0 else first_key // block_n
    return n_min, n_max


def q_block_range(n_block: int, block_m: int, block_n: int, seqlen_q: int, seqlen_k: int,
                  window_left: int, window_right: int) -> Tuple[int, int]:
    """Q blocks [m_min, m_max) with a row that sees some key of K/V block n_block
    (0 <= n_block < cdiv(seqlen_k, block_n)); m_max <= m_min: no row sees it. The backward's
    K/V-block-outer loop visits exactly these."""
    shift = seqlen_k - seqlen_q
    first_key = n_block * block_n
    last_key = min(seqlen_k, first_key + block_n) - 1
    m_max = _cdiv(seqlen_q, block_m)
    if window_left >= 0:                      # key j is seen by rows i <= j - shift + left
        rows_end = last_key - shift + window_left + 1                     # exclusive
        m_max = 0 if rows_end <= 0 else min(m_max, _cdiv(rows_end, block_m))
    m_min = 0
    if window_right >= 0:                     # key j is seen by rows i >= j - shift - right
        first_row = first_key - shift - window_right
        m_min = 0 if first_row <= 0 else first_row // block_m
    return m_min, m_max


def block_needs_mask(m_block: int, n_block: int, block_m: int, block_n: int, seqlen_q: int, seqlen_k: int,
                     window_left: int, window_right: int) -> bool:
    """False only when every key of the (m_block, n_block) tile is in bounds and visible to every
    row of it, so the element mask can be skipped. Same test as csrc/mask.h needs_mask (rows
    past seqlen_q count as rows, which is conservative for the last Q block)."""
    shift = seqlen_k - seqlen_q
    first_row, last_row = m_block * block_m, m_block * block_m + block_m - 1
    first_col, last_col = n_block * block_n, n_block * block_n + block_n - 1
    return (last_col >= seqlen_k
            or (window_right >= 0 and last_col > first_row + shift + window_right)
            or (window_left >= 0 and first_col < last_row + shift - window_left))


# ---------------------------------------------------------------- BLOCKWISE FA2 MODELS
#
# Units. Like flash-attn, the tiles hold scores in a unit u that keeps the common case free of
# extra multiplies: without softcap the tile is the raw q k^T and u = scale; with softcap it is
# tanh(scale * q k^T / softcap) and u = softcap. The alibi bias is added as bias / u (the
# kernel divides the slope by u once), the running max is taken over the tile, and
# exp2(tile * u * log2(e) - max * u * log2(e)) is the unnormalised probability; LSE = max * u + log(sum).

def _tile_scores(qi: torch.Tensor, kj: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, shift: int,
                 scale: float, softcap: float,
                 slopes_u: Optional[torch.Tensor]) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """One (bm, bn) score tile in units of u, before masking, and tanh of the scaled scores
    (softcap only; the backward needs it). qi: (b, h, bm, d), kj: (b, h, bn, d),
    rows (bm, 1) / cols (1, bn) absolute indices, slopes_u: (b, h) slopes / u."""
    s = qi @ kj.transpose(-1, -2)                                     # raw q k^T (b, h, bm, bn)
    t = None
    if softcap > 0:
        t = torch.tanh(s * (scale / softcap))                         # (b, h, bm, bn)
        s = t
    if slopes_u is not None:
        s = s - slopes_u[..., None, None] * (rows + shift - cols).abs().to(s.dtype)
    return s, t


def attention_blockwise(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                        softmax_scale: Optional[float] = None, block_m: int = 64, block_n: int = 32, *,
                        window_size: Window = (-1, -1), softcap: float = 0.0,
                        alibi_slopes: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """The FA2 forward, tile by tile, in the inputs' dtype (use float64 to check the algebra).

    Per Q block: visit only K/V blocks kv_block_range(...) (last first, like the kernel), mask
    elements only in tiles block_needs_mask(...) says need it; softcap and alibi transform the
    tile before the running max (see "Units" above). A Q block with no visible key at all is
    not computed: output 0, lse -inf."""
    batch, seqlen_q, nheads, d = q.shape
    seqlen_k = k.shape[1]
    scale = d ** -0.5 if softmax_scale is None else softmax_scale
    unit = softcap if softcap > 0 else scale                       # the tile holds score / unit
    unit_log2 = unit * math.log2(math.e)
    window = effective_window(causal, window_size)
    slopes = _slopes_bh(alibi_slopes, batch, nheads, q.dtype)     # (b, h)
    slopes_u = None if slopes is None else slopes / unit
    k, v = _expand_kv(k, nheads), _expand_kv(v, nheads)
    out = torch.zeros_like(q)
    lse = torch.full((batch, nheads, seqlen_q), float("-inf"), dtype=q.dtype, device=q.device)
    shift = seqlen_k - seqlen_q
    for m_block in range(_cdiv(seqlen_q, block_m)):                # one thread block per Q tile
        m0, m1 = m_block * block_m, min((m_block + 1) * block_m, seqlen_q)
        rows = torch.arange(m0, m1, device=q.device)[:, None]
        n_min, n_max = kv_block_range(m_block, block_m, block_n, seqlen_q, seqlen_k, *window)
        if n_max <= n_min:                                         # sees nothing: 0 and -inf stay
            continue
        qi = q[:, m0:m1].transpose(1, 2)                           # (b, h, bm, d)
        row_max = torch.full((batch, nheads, m1 - m0), float("-inf"), dtype=q.dtype, device=q.device)
        row_sum = torch.zeros_like(row_max)
        acc = torch.zeros(batch, nheads, m1 - m0, d, dtype=q.dtype, device=q.device)
        for n in reversed(range(n_min, n_max)):                    # last block first, like the kernel
            n0, n1 = n * block_n, min((n + 1) * block_n, seqlen_k)
            kj, vj = k[:, n0:n1].transpose(1, 2), v[:, n0:n1].transpose(1, 2)   # (b, h, bn, d)
            cols = torch.arange(n0, n1, device=q.device)[None, :]
            s, _ = _tile_scores(qi, kj, rows, cols, shift, scale, softcap, slopes_u)  # (b, h, bm, bn)
            if block_needs_mask(m_block, n, block_m, block_n, seqlen_q, seqlen_k, *window):
                s = s.masked_fill(~_visible(rows, cols, shift, window), float("-inf"))
            m_new = torch.maximum(row_max, s.amax(-1))
            m_scaled = torch.where(m_new == float("-inf"), torch.zeros_like(m_new), m_new * unit_log2)
            correction = torch.exp2(row_max * unit_log2 - m_scaled)    # 0 for the first block
            p = torch.exp2(s * unit_log2 - m_scaled[..., None])    # unnormalised probabilities
            row_sum = row_sum * correction + p.sum(-1)
            acc = acc * correction[..., None] + p @ vj             # O rescaled, never normalised here
            row_max = m_new
        empty = row_sum == 0                                       # rows that saw no key
        inv = torch.where(empty, torch.zeros_like(row_sum), 1.0 / row_sum)
        out[:, m0:m1] = (acc * inv[..., None]).transpose(1, 2)     # one division per row, at the end
        lse[:, :, m0:m1] = torch.where(empty, torch.full_like(row_sum, float("-inf")),
                                       row_max * unit + torch.log(row_sum))
    return out, lse


def attention_blockwise_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                                 lse: torch.Tensor, dout: torch.Tensor, causal: bool = False,
                                 softmax_scale: Optional[float] = None, block_m: int = 64,
                                 block_n: int = 32, *, window_size: Window = (-1, -1), softcap: float = 0.0,
                                 alibi_slopes: Optional[torch.Tensor] = None
                                 ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The FA2 backward, tile by tile (the model the backward kernels follow).

    Pre-pass D = rowsum(dO * O). K/V blocks outer (one thread block each, dK/dV kept on chip),
    Q blocks q_block_range(...) inner: the score tile is recomputed as in the forward (softcap,
    alibi, mask), P = exp(tile * u - LSE) from the forward's LSE (no N x N buffer),
    dV += P^T dO, dP = dO V^T, dS = P * (dP - D) (the gradient of the final score).
    Softcap: the final score is softcap * tanh(x / softcap) + bias with x = scale * q k^T, whose
    derivative in x is 1 - tanh^2(x / softcap), so dS is multiplied by (1 - t^2), t the tile's
    tanh (kept from the recomputation); alibi adds a constant, nothing to the chain. Then
    dK += scale * dS^T Q, dQ += scale * dS K (accumulated across K/V blocks). GQA: dK/dV summed
    over each group. Shapes as attention_ref; lse: (batch, nheads, seqlen_q). Returns dq, dk, dv.
    """
    batch, seqlen_q, nheads, d = q.shape
    seqlen_k, nheads_k = k.shape[1], k.shape[2]
    scale = d ** -0.5 if softmax_scale is None else softmax_scale
    unit = softcap if softcap > 0 else scale
    window = effective_window(causal, window_size)
    slopes = _slopes_bh(alibi_slopes, batch, nheads, q.dtype)
    slopes_u = None if slopes is None else slopes / unit
    kx, vx = _expand_kv(k, nheads), _expand_kv(v, nheads)                       # (b, sk, h, d)
    delta = (dout * out).sum(-1).transpose(1, 2)                               # D: (b, h, sq)
    dq = torch.zeros_like(q)
    dk = torch.zeros_like(kx)
    dv = torch.zeros_like(vx)
    shift = seqlen_k - seqlen_q
    lse_safe = torch.where(lse == float("-inf"), torch.full_like(lse, float("inf")), lse)  # rows w/o keys: P = 0
    for n_block in range(_cdiv(seqlen_k, block_n)):                             # one thread block per K/V tile
        n0, n1 = n_block * block_n, min((n_block + 1) * block_n, seqlen_k)
        m_min, m_max = q_block_range(n_block, block_m, block_n, seqlen_q, seqlen_k, *window)
        if m_max <= m_min:                                                      # no row sees it: dK = dV = 0
            continue
        kj, vj = kx[:, n0:n1].transpose(1, 2), vx[:, n0:n1].transpose(1, 2)     # (b, h, bn, d)
        cols = torch.arange(n0, n1, device=q.device)[None, :]
        dk_j = torch.zeros_like(kj)
        dv_j = torch.zeros_like(vj)
        for m_block in range(m_min, m_max):
            m0, m1 = m_block * block_m, min((m_block + 1) * block_m, seqlen_q)
            rows = torch.arange(m0, m1, device=q.device)[:, None]
            qi = q[:, m0:m1].transpose(1, 2)                                    # (b, h, bm, d)
            doi = dout[:, m0:m1].transpose(1, 2)                                # (b, h, bm, d)
            s, t = _tile_scores(qi, kj, rows, cols, shift, scale, softcap, slopes_u)   # (b, h, bm, bn)
            p = torch.exp(s * unit - lse_safe[:, :, m0:m1, None])
            if block_needs_mask(m_block, n_block, block_m, block_n, seqlen_q, seqlen_k, *window):
                p = p.masked_fill(~_visible(rows, cols, shift, window), 0.0)
            dv_j += p.transpose(-1, -2) @ doi
            dp = doi @ vj.transpose(-1, -2)
            ds = p * (dp - delta[:, :, m0:m1, None])                            # d loss / d final score
            if t is not None:
                ds = ds * (1 - t * t)                                           # through the softcap
            dk_j += scale * ds.transpose(-1, -2) @ qi
            dq[:, m0:m1] += (scale * ds @ kj).transpose(1, 2)
        dk[:, n0:n1] = dk_j.transpose(1, 2)
        dv[:, n0:n1] = dv_j.transpose(1, 2)
    group = nheads // nheads_k
    dk = dk.view(batch, seqlen_k, nheads_k, group, d).sum(3)
    dv = dv.view(batch, seqlen_k, nheads_k, group, d).sum(3)
    return dq, dk, dv


# ---------------------------------------------------------------- KV CACHE (flash_attn_with_kvcache)
#
# flash-attn 2's semantics (flash_attn_cuda/kvcache.py cites the sources). Sequence b owns cache
# slots [0, capacity): capacity = seqlen_cache (row cache_batch_idx[b], default b), or
# max_pages_per_seq * page_size when paged (slot s = row s % page_size of page
# block_table[b, s // page_size]). New k/v (seqlen_new rows) are first written to slots
# [cache_seqlens[b], cache_seqlens[b] + seqlen_new). Then sequence b's keys are slots
# [0, end), end = cache_seqlens[b] + seqlen_new (capacity without cache_seqlens), with slots
# < cache_leftpad[b] hidden; causal / window / ALiBi align query i with slot i + end - seqlen_q
# (attention_ref on slots [0, end) with a key_mask). Rotary positions are slot indices: new key
# i at cache_seqlens + i; query i at cache_seqlens + i when the attention is causal or local,
# else every query at cache_seqlens.

class KvcacheRef(NamedTuple):
    out: torch.Tensor       # (batch, seqlen_q, nheads, d) in compute_dtype
    lse: torch.Tensor       # (batch, nheads, seqlen_q)
    k_cache: torch.Tensor   # a copy of k_cache with the (rotated) new keys written in
    v_cache: torch.Tensor   # a copy of v_cache with the new values written in


def apply_rotary_reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
                           interleaved: bool) -> torch.Tensor:
    """Rotary embedding at explicit positions.

    x: (batch, seqlen, nheads, d); cos, sin: (seqlen_ro, rotary_dim / 2); positions: integer
    (batch, seqlen) (or broadcastable to it), the row of cos/sin each token uses. The first
    rotary_dim = 2 * cos.shape[1] dims of every head are rotated, the others kept: pair i is
    dims (2i, 2i + 1) when interleaved (GPT-J), else (i, i + rotary_dim / 2) (GPT-NeoX), and
    (x1, x2) -> (x1 cos[p, i] - x2 sin[p, i], x1 sin[p, i] + x2 cos[p, i]).
    Computed in at least float32, returned in x's dtype (the kernels round a rotated key the
    same way when they store it in the cache)."""
    dtype = torch.promote_types(x.dtype, torch.float32)
    half = cos.shape[-1]
    c = cos.to(dtype)[positions][..., None, :]                    # (batch, seqlen, 1, rotary_dim / 2)
    s = sin.to(dtype)[positions][..., None, :]
    xf = x.to(dtype)
    rot = xf[..., :2 * half]                                      # (batch, seqlen, nheads, rotary_dim)
    x1, x2 = (rot[..., 0::2], rot[..., 1::2]) if interleaved else rot.chunk(2, dim=-1)
    y1, y2 = x1 * c - x2 * s, x1 * s + x2 * c
    rot = torch.stack((y1, y2), dim=-1).flatten(-2) if interleaved else torch.cat((y1, y2), dim=-1)
    return torch.cat((rot, xf[..., 2 * half:]), dim=-1).to(x.dtype)


def kvcache_window(causal: bool, window_size: Window, capacity: int) -> Window:
    """The window flash_attn_with_kvcache applies: effective_window, then a side >= capacity
    (the cache's seqlen_k) becomes -1, unbounded (flash-attn's mha_fwd_kvcache does this)."""
    left, right = effective_window(causal, window_size)
    return (-1 if left >= capacity else left), (-1 if right >= capacity else right)


def rotary_q_per_row(window: Window) -> bool:
    """For a kvcache_window: whether query i is rotated at position cache_seqlens + i (causal or
    local attention: a bounded side) instead of every query at cache_seqlens."""
    return window[0] >= 0 or window[1] >= 0


def paged_gather_reference(cache: torch.Tensor, block_table: torch.Tensor, length: int) -> torch.Tensor:
    """Slots [0, length) of the sequence(s) a block table maps, in order.

    cache: (num_pages, page_size, nheads_k, d); block_table: integer (max_pages,) or
    (batch, max_pages); slot s is cache[block_table[..., s // page_size], s % page_size].
    Only the first ceil(length / page_size) entries are read. Returns (length, nheads_k, d) or
    (batch, length, nheads_k, d)."""
    pages = cache[block_table[..., :_cdiv(length, cache.shape[1])].long()]   # (..., pages, page_size, hk, d)
    return pages.flatten(-4, -3)[..., :length, :, :]


def split_kv_combine_reference(o_partials: torch.Tensor,
                               lse_partials: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Merges attention over disjoint key ranges (split-KV / flash-decoding).

    o_partials: (splits, ..., d), each normalised over its own keys; lse_partials: (splits, ...),
    -inf for a split that saw no key. Returns out (..., d) = sum_i exp(lse_i - lse) o_i and
    lse (...) = logsumexp_i lse_i; rows no split saw get out 0 and lse -inf."""
    lse = torch.logsumexp(lse_partials, dim=0)                                 # (...)
    finite = torch.where(lse == float("-inf"), torch.zeros_like(lse), lse)
    weights = torch.exp(lse_partials - finite)[..., None]                      # (splits, ..., 1)
    terms = torch.where(weights > 0, weights * o_partials, torch.zeros_like(o_partials))  # empty splits: 0
    return terms.sum(0), lse


def _per_sequence(value: Union[None, int, torch.Tensor, Sequence[int]], batch: int, default: int) -> List[int]:
    # None / int / (batch,) tensor -> batch Python ints
    if value is None:
        return [default] * batch
    if isinstance(value, int):
        return [value] * batch
    return [int(x) for x in (value.tolist() if isinstance(value, torch.Tensor) else value)]


def _cache_slots(cache: torch.Tensor, b: int, slots: torch.Tensor, cache_batch_idx: Optional[torch.Tensor],
                 block_table: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
    # (rows, offsets): where sequence b's slots (1-D long) live in cache's first two dims.
    if block_table is not None:
        page_size = cache.shape[1]
        return block_table[b].long()[slots // page_size], slots % page_size
    row = b if cache_batch_idx is None else int(cache_batch_idx[b])
    return torch.full_like(slots, row), slots


def _sequence_kv(cache: torch.Tensor, b: int, end: int, cache_batch_idx: Optional[torch.Tensor],
                 block_table: Optional[torch.Tensor]) -> torch.Tensor:
    # (end, nheads_k, d): slots [0, end) of sequence b.
    if block_table is not None:
        return paged_gather_reference(cache, block_table[b], end)
    return cache[b if cache_batch_idx is None else int(cache_batch_idx[b]), :end]


def kvcache_reference(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                      k: Optional[torch.Tensor] = None, v: Optional[torch.Tensor] = None,
                      rotary_cos: Optional[torch.Tensor] = None, rotary_sin: Optional[torch.Tensor] = None,
                      cache_seqlens: Union[None, int, torch.Tensor] = None,
                      cache_batch_idx: Optional[torch.Tensor] = None, cache_leftpad: Optional[torch.Tensor] = None,
                      block_table: Optional[torch.Tensor] = None, softmax_scale: Optional[float] = None,
                      causal: bool = False, window_size: Window = (-1, -1), softcap: float = 0.0,
                      rotary_interleaved: bool = True, alibi_slopes: Optional[torch.Tensor] = None,
                      num_splits: int = 0, return_softmax_lse: bool = False, *,
                      compute_dtype: Optional[torch.dtype] = torch.float32) -> KvcacheRef:
    """flash_attn_with_kvcache, naively (semantics in the comment above; shapes as
    flash_attn_cuda.kvcache.attention_with_kvcache). The caches are not modified: the append goes
    into copies, returned with the result. num_splits and return_softmax_lse are accepted for the
    call's sake (splitting does not change the mathematics; lse is always returned).

    q: (batch, seqlen_q, nheads, d); k_cache, v_cache: (batch_cache, seqlen_cache, nheads_k, d),
    or (num_pages, page_size, nheads_k, d) with block_table (batch, max_pages_per_seq);
    k, v: (batch, seqlen_new, nheads_k, d); rotary_cos/sin: (seqlen_ro, rotary_dim / 2);
    cache_seqlens: int or (batch,); cache_batch_idx, cache_leftpad: (batch,).
    Returns KvcacheRef(out (batch, seqlen_q, nheads, d) and lse (batch, nheads, seqlen_q) in
    compute_dtype, and the updated copies of k_cache and v_cache)."""
    batch, seqlen_q = q.shape[:2]
    capacity = k_cache.shape[1] * (1 if block_table is None else block_table.shape[1])
    window = kvcache_window(causal, window_size, capacity)
    starts = _per_sequence(cache_seqlens, batch, capacity)       # keys end here before the append
    leftpad = _per_sequence(cache_leftpad, batch, 0)
    k_cache, v_cache = k_cache.clone(), v_cache.clone()
    seqlen_new = 0 if k is None else k.shape[1]
    start = torch.tensor(starts, device=q.device).view(batch, 1)  # (batch, 1)
    if rotary_cos is not None:
        if k is None:
            raise ValueError("kvcache_reference: rotary_cos/sin apply only with new k and v (as flash-attn)")
        k = apply_rotary_reference(k, rotary_cos, rotary_sin, start + torch.arange(seqlen_new, device=q.device),
                                   rotary_interleaved)
        rows = torch.arange(seqlen_q, device=q.device)             # causal / local: query i at start + i
        if not rotary_q_per_row(window):
            rows = torch.zeros_like(rows)                           # otherwise every query at start
        q = apply_rotary_reference(q, rotary_cos, rotary_sin, start + rows, rotary_interleaved)
    for b in range(batch if k is not None else 0):                 # the append, in batch order
        where = _cache_slots(k_cache, b, starts[b] + torch.arange(seqlen_new, device=q.device),
                             cache_batch_idx, block_table)
        k_cache[where], v_cache[where] = k[b].to(k_cache.dtype), v[b].to(v_cache.dtype)
    outs, lses = [], []
    for b in range(batch):
        end = starts[b] + seqlen_new
        kb = _sequence_kv(k_cache, b, end, cache_batch_idx, block_table)[None]   # (1, end, hk, d)
        vb = _sequence_kv(v_cache, b, end, cache_batch_idx, block_table)[None]
        slopes = alibi_slopes if alibi_slopes is None or alibi_slopes.dim() == 1 else alibi_slopes[b:b + 1]
        out_b, lse_b = attention_ref(q[b:b + 1], kb, vb, False, softmax_scale, compute_dtype, window_size=window,
                                     softcap=softcap, alibi_slopes=slopes,
                                     key_mask=torch.arange(end, device=q.device) >= leftpad[b])
        outs.append(out_b)
        lses.append(lse_b)
    if batch == 0:
        return KvcacheRef(*attention_ref(q, k_cache[:0, :0], v_cache[:0, :0], compute_dtype=compute_dtype),
                          k_cache, v_cache)
    return KvcacheRef(torch.cat(outs), torch.cat(lses), k_cache, v_cache)
