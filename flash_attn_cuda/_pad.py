"""Head dims that are not a multiple of 8 (flash-attn takes them; the kernels load 16-byte
vectors): the inputs' last dimension is zero-padded to the next multiple of 8 here, in Python
only, and the output sliced back. Zero columns add nothing to q.k and give zero output columns,
so the result is exact; autograd slices the gradients back through the pad. Inputs whose head
dim is already a multiple of 8 never reach this module (no cost to the common path).
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from ._validate import MAX_HEAD_DIM, padded_head_dim


def needs_pad(*tensors: object) -> bool:
    """Whether these inputs (all tensors of one head dim d, 0 < d < MAX_HEAD_DIM, d % 8 != 0) are
    served by padding. Anything else goes to the regular checks, which name what is wrong."""
    if not all(isinstance(t, torch.Tensor) and t.dim() > 0 for t in tensors):
        return False
    dims = {t.shape[-1] for t in tensors}
    if len(dims) != 1:
        return False
    d = dims.pop()
    return 0 < d < MAX_HEAD_DIM and d % 8 != 0


def pad_last(t: torch.Tensor) -> torch.Tensor:
    """t (..., d) -> (..., padded_head_dim(d)), zero-filled: a new contiguous tensor (for a packed
    qkv (..., 3, nheads, d) its q/k/v views keep 16-byte aligned strides)."""
    d = t.shape[-1]
    return F.pad(t, (0, padded_head_dim(d) - d))


def unpad_result(result, d: int, return_lse: bool):
    """out (..., d_padded) -> (..., d), with the LSE (and return_attn_probs' probabilities) passed
    through unchanged."""
    if isinstance(result, tuple) and len(result) == 3:  # (out, lse, probs)
        out, lse, probs = result
        return out[..., :d], lse, probs
    if return_lse:
        out, lse = result
        return out[..., :d], lse
    return result[..., :d]


def default_scale(softmax_scale: Optional[float], d: int) -> Optional[float]:
    """flash-attn's default 1/sqrt(d) of the unpadded head dim (padding must not change it)."""
    return d ** -0.5 if softmax_scale is None else softmax_scale

