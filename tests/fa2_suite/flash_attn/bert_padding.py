"""flash-attn's bert_padding helpers as its test suite uses them: a padded batch <-> the packed
varlen layout. Differentiable (indexing and out-of-place index_put)."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def index_first_axis(x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """x (n, ...) -> x[indices] (len(indices), ...)"""
    return x[indices]


def unpad_input(hidden_states: torch.Tensor, attention_mask: torch.Tensor, unused_mask=None):
    """hidden_states (batch, seqlen, ...), attention_mask (batch, seqlen) bool/int (1 = token;
    unused_mask: tokens kept in the packed tensor but not counted as used) ->
    (packed (total, ...), indices (total,) into the flattened batch, cu_seqlens int32 (batch + 1,),
    max_seqlen (int), used_seqlens int32 (batch,))."""
    kept = attention_mask + unused_mask if unused_mask is not None else attention_mask
    seqlens = kept.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(kept.flatten(), as_tuple=False).flatten()
    cu_seqlens = F.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    packed = index_first_axis(hidden_states.flatten(0, 1), indices)
    return packed, indices, cu_seqlens, int(seqlens.max().item()), attention_mask.sum(dim=-1, dtype=torch.int32)


def pad_input(hidden_states: torch.Tensor, indices: torch.Tensor, batch: int, seqlen: int) -> torch.Tensor:
    """packed (total, ...) -> (batch, seqlen, ...) with zeros where no token was kept."""
    out = hidden_states.new_zeros((batch * seqlen,) + tuple(hidden_states.shape[1:]))
    return out.index_put((indices,), hidden_states).reshape((batch, seqlen) + tuple(hidden_states.shape[1:]))
