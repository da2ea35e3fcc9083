"""ctypes binding of libfa3ref.so (scripts/fa3_ref/build.sh): FlashAttention-3's sm90 forward and
backward, bf16, head dims 64 / 128 / 256, causal or not, as a reference competitor for
flash_attn_cuda.bench (impl fa3_ref). The library is torch-free (static CUDA runtime); tensors are
allocated here with torch.

    lib = load(".fa3/libfa3ref.so")
    out = forward(q, k, v, causal=True)        # (batch, seqlen, heads, d) bf16 CUDA, contiguous
    out = attention(q, k, v, causal=True)      # the same, differentiable (FA3's backward)
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
    lib.fa3ref_fwd.argtypes = ([ctypes.c_void_p] * 6 + [i32] * 6 + [ctypes.POINTER(i64)]
                               + [ctypes.c_float, i32, i32, ctypes.c_void_p])
    lib.fa3ref_fwd.restype = i32
    if hasattr(lib, "fa3ref_bwd"):  # a library built with BWD=0 has the forward only
        lib.fa3ref_bwd.argtypes = ([ctypes.c_void_p] * 15 + [i32] * 6 + [ctypes.POINTER(i64)]
                                   + [ctypes.c_float, i32, i32, ctypes.c_void_p])
        lib.fa3ref_bwd.restype = i32
        lib.fa3ref_bwd_blocks.argtypes = [i32, i32, ctypes.POINTER(i32), ctypes.POINTER(i32)]
        lib.fa3ref_bwd_blocks.restype = i32
    lib.fa3ref_error_string.argtypes = [i32]
    lib.fa3ref_error_string.restype = ctypes.c_char_p
    _lib = lib
    return lib


def _checked(name: str, *tensors: torch.Tensor) -> None:
    q = tensors[0]
    for t in tensors:
        if t.dtype != torch.bfloat16 or not t.is_cuda or t.dim() != 4 or not t.is_contiguous() or t.device != q.device:
            raise ValueError(f"fa3_ref: {name} takes contiguous 4-D bf16 CUDA tensors on one device")


def _raise(lib: ctypes.CDLL, rc: int) -> None:
    if rc != 0:
        raise RuntimeError(f"fa3_ref: {lib.fa3ref_error_string(rc).decode()} (code {rc})")


def _strides(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor):
    """The entry points' strides argument: batch, row and head strides of q, k, v, out (12 int64)."""
    return (ctypes.c_int64 * 12)(*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3])


def _device(q: torch.Tensor) -> int:
    dev = q.device.index if q.device.index is not None else torch.cuda.current_device()
    if dev not in _num_sms:
        _num_sms[dev] = torch.cuda.get_device_properties(dev).multi_processor_count
    return dev


def forward_with_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                     softmax_scale: Optional[float] = None, lib: Optional[ctypes.CDLL] = None):
    """FA3's forward on (batch, seqlen, heads, d) bf16 CUDA contiguous q, k, v (K/V heads may divide
    q's); causal is bottom-right aligned (flash-attn's). Returns (out like q, lse (batch, heads,
    seqlen_q) float32); raises on any error."""
    lib = lib or _lib
    if lib is None:
        raise RuntimeError("fa3_ref: call load(path) first")
    _checked("forward", q, k, v)
    batch, seqlen_q, nheads, d = q.shape
    seqlen_k, nheads_k = k.shape[1], k.shape[2]
    if k.shape != (batch, seqlen_k, nheads_k, d) or v.shape != k.shape:
        raise ValueError(f"fa3_ref: shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    scale = d ** -0.5 if softmax_scale is None else softmax_scale
    dev = _device(q)
    out = torch.empty_like(q)
    lse = torch.empty((batch, nheads, seqlen_q), device=q.device, dtype=torch.float32)
    # FA3's tile counter for the causal (dynamic persistent) scheduler; the library zeroes it.
    sem = torch.empty(1, device=q.device, dtype=torch.int32) if causal else None
    with torch.cuda.device(dev):
        rc = lib.fa3ref_fwd(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
                            sem.data_ptr() if sem is not None else None,
                            batch, seqlen_q, seqlen_k, nheads, nheads_k, d, _strides(q, k, v, out),
                            scale, int(bool(causal)), _num_sms[dev], torch.cuda.current_stream(dev).cuda_stream)
    _raise(lib, rc)
    return out, lse


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
            softmax_scale: Optional[float] = None, lib: Optional[ctypes.CDLL] = None) -> torch.Tensor:
    """FA3's forward (forward_with_lse) without the LSE."""
    return forward_with_lse(q, k, v, causal, softmax_scale, lib)[0]


def backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
             lse: torch.Tensor, causal: bool, softmax_scale: Optional[float] = None,
             lib: Optional[ctypes.CDLL] = None):
    """FA3's backward (non-deterministic) of forward_with_lse's (out, lse): (dq, dk, dv), shaped like
    q, k, v. Allocates FA3's workspaces as hopper/flash_api.cpp mha_bwd does."""
    lib = lib or _lib
    if lib is None or not hasattr(lib, "fa3ref_bwd"):
        raise RuntimeError("fa3_ref: no backward in this library (scripts/fa3_ref/build.sh with BWD=1)")
    dout = dout.contiguous()
    _checked("backward", q, k, v, out, dout)
    batch, seqlen_q, nheads, d = q.shape
    seqlen_k, nheads_k = k.shape[1], k.shape[2]
    scale = d ** -0.5 if softmax_scale is None else softmax_scale
    dev = _device(q)
    block_m, block_n = ctypes.c_int(), ctypes.c_int()
    _raise(lib, lib.fa3ref_bwd_blocks(d, int(bool(causal)), ctypes.byref(block_m),
                                      ctypes.byref(block_n)))
    rq = -(-seqlen_q // block_m.value) * block_m.value
    rk = -(-seqlen_k // block_n.value) * block_n.value
    f32 = dict(device=q.device, dtype=torch.float32)
    softmax_d = torch.empty((batch, nheads, rq), **f32)
    lse_log2 = torch.empty((batch, nheads, rq), **f32)
    dq_accum = torch.empty((batch, nheads, rq * d), **f32)
    dq_sem = torch.empty((-(-seqlen_q // block_m.value), batch, nheads), device=q.device, dtype=torch.int32)
    gqa = nheads != nheads_k
    dk_accum = torch.zeros((batch, nheads_k, rk * d), **f32) if gqa else None
    dv_accum = torch.zeros((batch, nheads_k, rk * d), **f32) if gqa else None
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    ptr = lambda t: t.data_ptr() if t is not None else None  # noqa: E731
    with torch.cuda.device(dev):
        rc = lib.fa3ref_bwd(dout.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                            lse.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), softmax_d.data_ptr(),
                            lse_log2.data_ptr(), dq_accum.data_ptr(), dq_sem.data_ptr(), ptr(dk_accum),
                            ptr(dv_accum), batch, seqlen_q, seqlen_k, nheads, nheads_k, d, _strides(q, k, v, out),
                            scale, int(bool(causal)), _num_sms[dev], torch.cuda.current_stream(dev).cuda_stream)
    _raise(lib, rc)
    return dq, dk, dv


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal):
        out, lse = forward_with_lse(q, k, v, causal)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal = causal
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        return (*backward(dout, q, k, v, out, lse, ctx.causal), None)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """FA3's forward, differentiable through FA3's backward (the library's default scale)."""
    return _Attention.apply(q, k, v, causal)
