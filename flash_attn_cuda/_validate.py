"""Input checks for attention(): one clear exception naming what was expected and what came.

Works on real CUDA tensors and on fake/meta tensors (torch.compile tracing), so it touches
only shapes, dtypes, devices, strides and storage offsets, never data.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
MAX_HEAD_DIM = 256
MAX_GRID_DIM = 65535  # batch and nheads index CUDA grid dims y/z
MAX_SEQLEN = 1 << 30  # the kernels' int32 index arithmetic (flash::kMaxSeqlen)
MIN_CAPABILITY = (8, 0)


def _check_one(name: str, t: object) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"flash_attn_cuda: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != 4:
        raise ValueError(f"flash_attn_cuda: {name} must be 4-D (batch, seqlen, nheads, headdim), "
                         f"got shape {tuple(t.shape)}")
    if t.device.type != "cuda":
        raise ValueError(f"flash_attn_cuda: {name} must be a CUDA tensor, got device '{t.device}'")
    if t.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"flash_attn_cuda: {name} must be torch.float16 or torch.bfloat16, got {t.dtype}")
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"flash_attn_cuda: {name} must have a contiguous last dimension (stride 1), got "
                         f"strides {tuple(t.stride())}; call .contiguous()")
    return t


def _check_aligned(name: str, t: torch.Tensor) -> None:
    # 16-byte vector loads: offset and every outer stride must be multiples of 8 elements.
    if t.storage_offset() % 8 != 0 or any(s % 8 != 0 for s in t.stride()[:3]):
        raise ValueError(f"flash_attn_cuda: {name} must be 16-byte aligned (storage offset and batch/seq/head "
                         f"strides multiples of 8 elements), got offset {t.storage_offset()} and strides "
                         f"{tuple(t.stride())}; call .contiguous()")


def check_attention_inputs(q, k, v, compiled_head_dims: Sequence[int], compiled_dtypes: Sequence[torch.dtype],
                           check_device: bool = True, check_alignment: bool = True) -> int:
    """Validates q: (batch, seqlen_q, nheads, headdim), k/v: (batch, seqlen_k, nheads_k, headdim).

    check_device queries the GPU's compute capability (real tensors only). check_alignment reads
    storage offsets, which torch.compile cannot trace; while compiling, the op's C++ side checks
    alignment on the real tensors instead (RuntimeError, same message).

    Returns the compiled head dim that will run (the smallest compiled one >= headdim).
    Raises TypeError for wrong types/dtypes and ValueError for everything else.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_one(name, t)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"flash_attn_cuda: q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"flash_attn_cuda: q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    batch, seqlen_q, nheads, headdim = q.shape
    if k.shape[0] != batch or v.shape[0] != batch:
        raise ValueError(f"flash_attn_cuda: batch sizes differ: q {batch}, k {k.shape[0]}, v {v.shape[0]}")
    if k.shape[1] != v.shape[1]:
        raise ValueError(f"flash_attn_cuda: k and v must have the same seqlen, got {k.shape[1]} and {v.shape[1]}")
    if k.shape[2] != v.shape[2]:
        raise ValueError(f"flash_attn_cuda: k and v must have the same number of heads, got {k.shape[2]} "
                         f"and {v.shape[2]}")
    nheads_k = k.shape[2]
    if nheads_k == 0 or nheads % nheads_k != 0:
        raise ValueError(f"flash_attn_cuda: nheads of q ({nheads}) must be a multiple of nheads of k/v "
                         f"({nheads_k})")
    if k.shape[3] != headdim or v.shape[3] != headdim:
        raise ValueError(f"flash_attn_cuda: head dims differ: q {headdim}, k {k.shape[3]}, v {v.shape[3]}")
    if headdim > MAX_HEAD_DIM:
        raise ValueError(f"flash_attn_cuda: head dim must be <= {MAX_HEAD_DIM}, got {headdim}")
    if headdim == 0 or headdim % 8 != 0:
        raise ValueError(f"flash_attn_cuda: head dim must be a positive multiple of 8, got {headdim}")
    if seqlen_q > MAX_SEQLEN or k.shape[1] > MAX_SEQLEN:
        raise ValueError(f"flash_attn_cuda: sequence lengths must be <= {MAX_SEQLEN}, got {seqlen_q} and {k.shape[1]}")
    if batch > MAX_GRID_DIM or nheads > MAX_GRID_DIM:
        raise ValueError(f"flash_attn_cuda: batch ({batch}) and nheads ({nheads}) must be <= {MAX_GRID_DIM}")
    if q.dtype not in compiled_dtypes:
        raise ValueError(f"flash_attn_cuda: dtype {q.dtype} is not compiled into this build (compiled: "
                         f"{[str(d) for d in compiled_dtypes]}); rebuild with FLASH_ATTN_CUDA_DTYPES including it")
    runnable = [d for d in sorted(compiled_head_dims) if d >= headdim]
    if not runnable:
        raise ValueError(f"flash_attn_cuda: head dim {headdim} needs a compiled head dim >= {headdim}, but this "
                         f"build has only {sorted(compiled_head_dims)}; rebuild with FLASH_ATTN_CUDA_HDIMS "
                         f"including one")
    if check_alignment:
        for name, t in (("q", q), ("k", k), ("v", v)):
            _check_aligned(name, t)
    if check_device:
        capability = torch.cuda.get_device_capability(q.device)
        if capability < MIN_CAPABILITY:
            raise ValueError(f"flash_attn_cuda: needs a GPU of compute capability >= "
                             f"{MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]} (Ampere or newer), got "
                             f"{capability[0]}.{capability[1]} ({torch.cuda.get_device_name(q.device)})")
    return runnable[0]


FLT_MIN, FLT_MAX = 1.1754943508222875e-38, 3.4028234663852886e38


def check_softmax_scale(softmax_scale: float) -> float:
    """The kernels take the row max of raw scores, so the scale must be positive; they use it as
    a float32 (denormals flushed), so it must be a normal float32 (and scale * log2(e) too)."""
    if not isinstance(softmax_scale, (int, float)) or isinstance(softmax_scale, bool):
        raise TypeError(f"flash_attn_cuda: softmax_scale must be a float, got {type(softmax_scale).__name__}")
    if not (math.isfinite(softmax_scale) and FLT_MIN <= softmax_scale <= FLT_MAX / 2):
        raise ValueError(f"flash_attn_cuda: softmax_scale must be a positive normal float32, got {softmax_scale}")
    return float(softmax_scale)
