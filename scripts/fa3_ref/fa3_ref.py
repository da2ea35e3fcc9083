"""ctypes binding of libfa3ref.so (scripts/fa3_ref/build.sh): FlashAttention-3's sm90 forward, bf16,
head dims 64 / 128 / 256, causal or not, as a reference competitor for flash_attn_cuda.bench (impl
fa3_ref). The library is torch-free (static CUDA runtime); tensors are allocated here with torch.

    lib = load(".fa3/libfa3ref.so")
    out = forward(q, k, v, causal=True)        # (batch, seqlen, heads, d) bf16 CUDA, contiguous
"""
import ctypes
import os
from typing import Dict, Optional

import torch

_lib: Optional[ctypes.CDLL] = None
_num_sms: Dict[int, int] = {}


def load(path: str) -> ctypes.CDLL:
    """Load the library (once per path; the last loaded is forward's default)."""
    global _lib
    lib = ctypes.CDLL(os.path.abspath(path))
    i64, i32 = ctypes.c_int64, ctypes.c_int
    lib.fa3ref_fwd.argtypes = ([ctypes.c_void_p] * 6 + [i32] * 6 + [i64] * 12
                               + [ctypes.c_float, i32, i32, ctypes.c_void_p])
    lib.fa3ref_fwd.restype = i32
    lib.fa3ref_error_string.argtypes = [i32]
    lib.fa3ref_error_string.restype = ctypes.c_char_p
    _lib = lib
    return lib


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
            softmax_scale: Optional[float] = None, lib: Optional[ctypes.CDLL] = None) -> torch.Tensor:
    """FA3's forward on (batch, seqlen, heads, d) bf16 CUDA contiguous q, k, v (K/V heads may divide
    q's); causal is bottom-right aligned (flash-attn's). Returns out like q; raises on any error."""
    lib = lib or _lib
    if lib is None:
        raise RuntimeError("fa3_ref: call load(path) first")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dtype != torch.bfloat16 or not t.is_cuda or t.dim() != 4 or not t.is_contiguous() or t.device != q.device:
            raise ValueError(f"fa3_ref: {name} must be a contiguous 4-D bf16 CUDA tensor on q's device")
    batch, seqlen_q, nheads, d = q.shape
    seqlen_k, nheads_k = k.shape[1], k.shape[2]
    if k.shape != (batch, seqlen_k, nheads_k, d) or v.shape != k.shape:
        raise ValueError(f"fa3_ref: shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    scale = d ** -0.5 if softmax_scale is None else softmax_scale
    dev = q.device.index if q.device.index is not None else torch.cuda.current_device()
    if dev not in _num_sms:
        _num_sms[dev] = torch.cuda.get_device_properties(dev).multi_processor_count
    out = torch.empty_like(q)
    lse = torch.empty((batch, nheads, seqlen_q), device=q.device, dtype=torch.float32)
    # FA3's tile counter for the causal (dynamic persistent) scheduler; the library zeroes it.
    sem = torch.empty(1, device=q.device, dtype=torch.int32) if causal else None
    with torch.cuda.device(dev):
        rc = lib.fa3ref_fwd(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
                            sem.data_ptr() if sem is not None else None,
                            batch, seqlen_q, seqlen_k, nheads, nheads_k, d,
                            *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
                            scale, int(bool(causal)), _num_sms[dev], torch.cuda.current_stream(dev).cuda_stream)
    if rc != 0:
        raise RuntimeError(f"fa3_ref: {lib.fa3ref_error_string(rc).decode()} (code {rc})")
    return out
