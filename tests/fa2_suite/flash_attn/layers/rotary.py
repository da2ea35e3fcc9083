"""flash_attn.layers.rotary.apply_rotary_emb as the suite's KV-cache test uses it (the reference
side), on flash_attn_cuda.reference.apply_rotary_reference."""
from __future__ import annotations

import torch

from flash_attn_cuda.reference import apply_rotary_reference


def apply_rotary_emb(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0, cu_seqlens=None,
                     max_seqlen=None):
    """x (batch, seqlen, nheads, d); cos, sin (seqlen_ro, rotary_dim / 2); token s of sequence b
    uses row seqlen_offsets[b] + s (seqlen_offsets: int or (batch,) tensor)."""
    if cu_seqlens is not None or inplace:
        raise NotImplementedError("apply_rotary_emb stand-in: packed (cu_seqlens) and in-place forms not provided")
    positions = torch.arange(x.shape[1], device=x.device)[None, :]
    offsets = seqlen_offsets[:, None] if isinstance(seqlen_offsets, torch.Tensor) else seqlen_offsets
    return apply_rotary_reference(x, cos, sin, (positions + offsets).long(), interleaved)
