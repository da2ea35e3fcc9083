"""Input checks for attention() and attention_varlen(): one clear exception naming what was
expected and what came.

Works on real CUDA tensors and on fake/meta tensors (torch.compile tracing), so it touches
only shapes, dtypes, devices, strides and storage offsets, never data -- except the varlen
value checks (cu_seqlens contents, max_seqlen bounds), which read cu_seqlens and therefore run
only on real tensors outside torch.compile (see check_varlen_inputs).
"""
from __future__ import annotations

import math
import weakref
from typing import Optional, Sequence, Tuple, Union

import torch
from torch._subclasses.fake_tensor import is_fake

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
MAX_HEAD_DIM = 256
MAX_GRID_DIM = 65535  # batch and nheads index CUDA grid dims y/z
MAX_SEQLEN = 1 << 30  # the kernels' int32 index arithmetic (flash::kMaxSeqlen)
MIN_CAPABILITY = (8, 0)
DROPOUT_P_MAX = 511 / 512  # above it round((1 - p) * 256) = 0: the 8-bit keep threshold keeps nothing (csrc/philox.h)
INT32_MAX = (1 << 31) - 1  # cu_seqlens are int32: packed token counts must fit

_LAYOUTS = {4: "4-D (batch, seqlen, nheads, headdim)", 3: "3-D (total_tokens, nheads, headdim)"}


def _check_one(name: str, t: object, ndim: int = 4, layout: Optional[str] = None) -> torch.Tensor:
    # layout: the expected layout in words, for the message (default: _LAYOUTS[ndim]).
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"flash_attn_cuda: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != ndim:
        raise ValueError(f"flash_attn_cuda: {name} must be {layout or _LAYOUTS[ndim]}, got shape {tuple(t.shape)}")
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
    outer = "batch/seq/head" if t.dim() == 4 else "token/head"
    if t.storage_offset() % 8 != 0 or any(s % 8 != 0 for s in t.stride()[:-1]):
        raise ValueError(f"flash_attn_cuda: {name} must be 16-byte aligned (storage offset and {outer} "
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
    return _check_qkv(q, k, v, 4, compiled_head_dims, compiled_dtypes, check_device, check_alignment)


def _check_qkv(q, k, v, ndim: int, compiled_head_dims: Sequence[int], compiled_dtypes: Sequence[torch.dtype],
               check_device: bool, check_alignment: bool) -> int:
    # ndim 4: (batch, seqlen, nheads, headdim); ndim 3: packed (total_tokens, nheads, headdim).
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_one(name, t, ndim)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"flash_attn_cuda: q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"flash_attn_cuda: q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    nheads, headdim = q.shape[-2], q.shape[-1]
    if ndim == 4:
        batch = q.shape[0]
        if k.shape[0] != batch or v.shape[0] != batch:
            raise ValueError(f"flash_attn_cuda: batch sizes differ: q {batch}, k {k.shape[0]}, v {v.shape[0]}")
        if k.shape[1] != v.shape[1]:
            raise ValueError(f"flash_attn_cuda: k and v must have the same seqlen, got {k.shape[1]} and "
                             f"{v.shape[1]}")
    elif k.shape[0] != v.shape[0]:
        raise ValueError(f"flash_attn_cuda: k and v must have the same number of tokens, got {k.shape[0]} and "
                         f"{v.shape[0]}")
    nheads_k = k.shape[-2]
    if v.shape[-2] != nheads_k:
        raise ValueError(f"flash_attn_cuda: k and v must have the same number of heads, got {nheads_k} "
                         f"and {v.shape[-2]}")
    if nheads_k == 0 or nheads % nheads_k != 0:
        raise ValueError(f"flash_attn_cuda: nheads of q ({nheads}) must be a multiple of nheads of k/v "
                         f"({nheads_k})")
    if k.shape[-1] != headdim or v.shape[-1] != headdim:
        raise ValueError(f"flash_attn_cuda: head dims differ: q {headdim}, k {k.shape[-1]}, v {v.shape[-1]}")
    check_head_dim(headdim)
    if ndim == 4:
        if q.shape[1] > MAX_SEQLEN or k.shape[1] > MAX_SEQLEN:
            raise ValueError(f"flash_attn_cuda: sequence lengths must be <= {MAX_SEQLEN}, got {q.shape[1]} and "
                             f"{k.shape[1]}")
        if q.shape[0] > MAX_GRID_DIM or nheads > MAX_GRID_DIM:
            raise ValueError(f"flash_attn_cuda: batch ({q.shape[0]}) and nheads ({nheads}) must be <= "
                             f"{MAX_GRID_DIM}")
    else:
        if q.shape[0] > INT32_MAX or k.shape[0] > INT32_MAX:
            raise ValueError(f"flash_attn_cuda: total tokens must be <= {INT32_MAX} (int32 cu_seqlens), got "
                             f"{q.shape[0]} and {k.shape[0]}")
        if nheads > MAX_GRID_DIM:
            raise ValueError(f"flash_attn_cuda: nheads ({nheads}) must be <= {MAX_GRID_DIM}")
    runnable = check_compiled(q.dtype, headdim, compiled_head_dims, compiled_dtypes)
    if check_alignment:
        for name, t in (("q", q), ("k", k), ("v", v)):
            _check_aligned(name, t)
    if check_device:
        check_capability(q.device)
    return runnable


def padded_head_dim(headdim: int) -> int:
    """The head dim the kernels run for headdim: headdim rounded up to a multiple of 8 (the
    kernels' 16-byte loads); the Python layer zero-pads the inputs' last dimension to it (see
    flash_attn_cuda._pad) and slices the output and gradients back."""
    return (headdim + 7) // 8 * 8


def check_head_dim(headdim: int) -> None:
    """A head dim the kernels take: a positive multiple of 8, at most MAX_HEAD_DIM."""
    if headdim > MAX_HEAD_DIM:
        raise ValueError(f"flash_attn_cuda: head dim must be <= {MAX_HEAD_DIM}, got {headdim}")
    if headdim == 0 or headdim % 8 != 0:
        raise ValueError(f"flash_attn_cuda: head dim must be a positive multiple of 8, got {headdim}")


def check_compiled(dtype: torch.dtype, headdim: int, compiled_head_dims: Sequence[int],
                   compiled_dtypes: Sequence[torch.dtype]) -> int:
    """That this build holds kernels for dtype and headdim. Returns the compiled head dim that
    will run (the smallest compiled one >= headdim)."""
    if dtype not in compiled_dtypes:
        raise ValueError(f"flash_attn_cuda: dtype {dtype} is not compiled into this build (compiled: "
                         f"{[str(d) for d in compiled_dtypes]}); rebuild with FLASH_ATTN_CUDA_DTYPES including it")
    runnable = [d for d in sorted(compiled_head_dims) if d >= headdim]
    if not runnable:
        raise ValueError(f"flash_attn_cuda: head dim {headdim} needs a compiled head dim >= {headdim}, but this "
                         f"build has only {sorted(compiled_head_dims)}; rebuild with FLASH_ATTN_CUDA_HDIMS "
                         f"including one")
    return runnable[0]


def check_capability(device: torch.device) -> None:
    """The GPU of device is sm80 or newer (queries the driver: real tensors only)."""
    capability = torch.cuda.get_device_capability(device)
    if capability < MIN_CAPABILITY:
        raise ValueError(f"flash_attn_cuda: needs a GPU of compute capability >= "
                         f"{MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]} (Ampere or newer), got "
                         f"{capability[0]}.{capability[1]} ({torch.cuda.get_device_name(device)})")


FLT_MIN, FLT_MAX = 1.1754943508222875e-38, 3.4028234663852886e38


def check_softmax_scale(softmax_scale: float) -> float:
    """The kernels take the row max of raw scores, so the scale must be positive; they use it as
    a float32 (denormals flushed), so it must be a normal float32 (and scale * log2(e) too)."""
    if not isinstance(softmax_scale, (int, float)) or isinstance(softmax_scale, bool):
        raise TypeError(f"flash_attn_cuda: softmax_scale must be a float, got {type(softmax_scale).__name__}")
    if not (math.isfinite(softmax_scale) and FLT_MIN <= softmax_scale <= FLT_MAX / 2):
        raise ValueError(f"flash_attn_cuda: softmax_scale must be a positive normal float32, got {softmax_scale}")
    return float(softmax_scale)


# ---------------------------------------------------------------- feature arguments
#
# Each returns the value the op should receive, normalised, or raises one TypeError (wrong
# type/dtype) or ValueError (wrong value) naming the argument, what was expected and what came.

def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def check_flag(name: str, value: object) -> bool:
    """A plain bool (e.g. deterministic, causal): refuses truthy stand-ins such as 0/1 or tensors,
    whose meaning would be a guess."""
    if not isinstance(value, bool):
        raise TypeError(f"flash_attn_cuda: {name} must be a bool, got {type(value).__name__}")
    return value


def check_window_size(window_size: object, causal: bool = False) -> Tuple[int, int]:
    """window_size = (left, right): two ints >= -1, -1 meaning unbounded on that side, as a tuple,
    a list or (as flash-attn takes it) a two-element integer tensor (its values are read: a
    device-to-host copy for a CUDA tensor). Key j is visible to query i iff
    i + sk - sq - left <= j <= i + sk - sq + right (csrc/params.h).

    Returns the effective (left, right) the kernels take:
      - causal=True forces right = 0 and keeps left (as flash-attn does): causal with
        window_size=(-1, -1) is plain causal, with (w, anything) a causal sliding window of w.
      - a side >= MAX_SEQLEN becomes -1: every sequence is <= MAX_SEQLEN long and a side >=
        seqlen - 1 already sees every key, so this changes nothing but keeps the kernels' int32
        index arithmetic from overflowing.
    Sides between the sequence lengths and MAX_SEQLEN are passed as given (the literal rule
    above); flash-attn instead turns a side >= seqlen_k into -1, which differs from the literal
    rule only for right >= seqlen_k when seqlen_q > seqlen_k + 1.
    """
    if isinstance(window_size, torch.Tensor):
        if window_size.dtype.is_floating_point or window_size.dtype.is_complex or window_size.dtype == torch.bool:
            raise TypeError(f"flash_attn_cuda: a window_size tensor must hold integers, got {window_size.dtype}")
        if window_size.dim() != 1:
            raise ValueError(f"flash_attn_cuda: a window_size tensor must be 1-D (left, right), got shape "
                             f"{tuple(window_size.shape)}")
        window_size = tuple(int(w) for w in window_size.tolist())
    if not isinstance(window_size, (tuple, list)):
        raise TypeError(f"flash_attn_cuda: window_size must be a tuple (left, right) of ints, got "
                        f"{type(window_size).__name__}")
    if len(window_size) != 2:
        raise ValueError(f"flash_attn_cuda: window_size must have two entries (left, right), got "
                         f"{len(window_size)}: {tuple(window_size)}")
    for side, w in zip(("left", "right"), window_size):
        if not _is_int(w):
            raise TypeError(f"flash_attn_cuda: window_size {side} must be an int, got {type(w).__name__}")
        if w < -1:
            raise ValueError(f"flash_attn_cuda: window_size {side} must be >= -1 (-1 = unbounded), got {w}")
    left, right = (-1 if w >= MAX_SEQLEN else int(w) for w in window_size)
    return (left, 0) if causal else (left, right)


def check_softcap(softcap: object) -> float:
    """softcap: 0 (off) or a positive float; scaled scores s become softcap * tanh(s / softcap).
    The kernels use it as a float32 and divide by it, so a positive value must be a normal
    float32 (no denormals, no inf)."""
    if not isinstance(softcap, (int, float)) or isinstance(softcap, bool):
        raise TypeError(f"flash_attn_cuda: softcap must be a float, got {type(softcap).__name__}")
    if softcap != 0 and not (math.isfinite(softcap) and FLT_MIN <= softcap <= FLT_MAX):
        raise ValueError(f"flash_attn_cuda: softcap must be 0 (off) or a positive finite normal float32, "
                         f"got {softcap}")
    return float(softcap)


def check_dropout_p(dropout_p: object) -> float:
    """dropout_p: a float in [0, 1) (each attention probability dropped with that probability and
    the kept ones scaled by 1 / (1 - p), at the kernels' 8-bit resolution: reference.dropout_threshold);
    0 = off. p above 511/512 keeps nothing at that resolution and raises."""
    if not isinstance(dropout_p, (int, float)) or isinstance(dropout_p, bool):
        raise TypeError(f"flash_attn_cuda: dropout_p must be a float, got {type(dropout_p).__name__}")
    if not (0.0 <= dropout_p < 1.0):  # also NaN
        raise ValueError(f"flash_attn_cuda: dropout_p must be in [0, 1), got {dropout_p}")
    if dropout_p > DROPOUT_P_MAX:
        raise ValueError(f"flash_attn_cuda: dropout_p {dropout_p} keeps no element at the kernels' 8-bit "
                         f"resolution (round((1 - p) * 256) = 0); the largest is {DROPOUT_P_MAX}")
    return float(dropout_p)


def check_softcap_scale(softcap: float, softmax_scale: float) -> None:
    """A checked softcap in range for softmax_scale (the kernels take softmax_scale / softcap, tanh's
    argument scale, and 2 softcap log2(e) as float32). ALiBi combines with any softcap (flash-attn's
    order: the bias is added to the capped score)."""
    if softcap != 0 and not (softmax_scale / softcap >= FLT_MIN and 2 * softcap * math.log2(math.e) <= FLT_MAX):
        raise ValueError(f"flash_attn_cuda: softcap {softcap} is out of range for softmax_scale {softmax_scale} "
                         "(softmax_scale / softcap must be a normal float32 and softcap below about 1e38)")


def check_alibi_slopes(alibi_slopes: object, batch: int, nheads: int, device: torch.device) -> Optional[torch.Tensor]:
    """alibi_slopes: None, or a contiguous float32 tensor of shape (nheads,) or (batch, nheads) on
    q's device; query head h of sequence b adds -slopes[b, h] * |i + sk - sq - j| to its scaled
    scores. Shape, dtype, device and contiguity only (values are not read)."""
    if alibi_slopes is None:
        return None
    if not isinstance(alibi_slopes, torch.Tensor):
        raise TypeError(f"flash_attn_cuda: alibi_slopes must be a torch.Tensor or None, got "
                        f"{type(alibi_slopes).__name__}")
    if alibi_slopes.dtype != torch.float32:
        raise TypeError(f"flash_attn_cuda: alibi_slopes must be torch.float32, got {alibi_slopes.dtype}")
    if alibi_slopes.device != device:
        raise ValueError(f"flash_attn_cuda: alibi_slopes must be on q's device {device}, got {alibi_slopes.device}")
    if tuple(alibi_slopes.shape) not in ((nheads,), (batch, nheads)):
        raise ValueError(f"flash_attn_cuda: alibi_slopes must have shape (nheads,) = ({nheads},) or "
                         f"(batch, nheads) = ({batch}, {nheads}), got {tuple(alibi_slopes.shape)}")
    if not alibi_slopes.is_contiguous():
        raise ValueError(f"flash_attn_cuda: alibi_slopes must be contiguous, got strides "
                         f"{tuple(alibi_slopes.stride())}; call .contiguous()")
    return alibi_slopes


def check_cu_seqlens(name: str, cu_seqlens: object, device: torch.device) -> int:
    """cu_seqlens_q / cu_seqlens_k: 1-D contiguous int32 tensor (batch + 1,) on q's device.
    Returns batch. Metadata only; check_cu_seqlens_values checks the contents."""
    if not isinstance(cu_seqlens, torch.Tensor):
        raise TypeError(f"flash_attn_cuda: {name} must be a torch.Tensor, got {type(cu_seqlens).__name__}")
    if cu_seqlens.dtype != torch.int32:
        raise TypeError(f"flash_attn_cuda: {name} must be torch.int32, got {cu_seqlens.dtype}")
    if cu_seqlens.dim() != 1 or cu_seqlens.shape[0] < 1:
        raise ValueError(f"flash_attn_cuda: {name} must be 1-D of length batch + 1 >= 1, got shape "
                         f"{tuple(cu_seqlens.shape)}")
    if cu_seqlens.device != device:
        raise ValueError(f"flash_attn_cuda: {name} must be on q's device {device}, got {cu_seqlens.device}")
    if not cu_seqlens.is_contiguous():
        raise ValueError(f"flash_attn_cuda: {name} must be contiguous, got stride {tuple(cu_seqlens.stride())}")
    return cu_seqlens.shape[0] - 1


def check_int32_tensor(name: str, t: object, shape: Tuple[Optional[int], ...], layout: str,
                       device: torch.device) -> torch.Tensor:
    """An int32 index tensor (cache_seqlens, cache_batch_idx, cache_leftpad, block_table) of the
    given shape (None: any size; layout names the dims for the message, e.g. "(batch,)") on q's
    device. Returned contiguous: a copy on the device when it was not (no device-to-host
    transfer, so CUDA graphs can capture it). Metadata only; the values are not read."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"flash_attn_cuda: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.int32:
        raise TypeError(f"flash_attn_cuda: {name} must be torch.int32, got {t.dtype}")
    if t.dim() != len(shape) or any(want is not None and got != want for got, want in zip(t.shape, shape)):
        expected = "(" + ", ".join("*" if n is None else str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"
        raise ValueError(f"flash_attn_cuda: {name} must have shape {layout} = {expected}, got {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"flash_attn_cuda: {name} must be on q's device {device}, got {t.device} (a tensor on "
                         f"another device would need a copy on every call)")
    return t.contiguous()


def check_max_seqlen(name: str, max_seqlen: object) -> int:
    """max_seqlen_q / max_seqlen_k: a plain int in [0, MAX_SEQLEN] (it sizes the grid; a tensor
    would need a device sync). A SymInt (torch.compile with dynamic shapes) passes unchecked."""
    if isinstance(max_seqlen, torch.SymInt):
        return max_seqlen
    if not _is_int(max_seqlen):
        raise TypeError(f"flash_attn_cuda: {name} must be a Python int, got {type(max_seqlen).__name__}")
    if not 0 <= max_seqlen <= MAX_SEQLEN:
        raise ValueError(f"flash_attn_cuda: {name} must be in [0, {MAX_SEQLEN}], got {max_seqlen}")
    return int(max_seqlen)


def values_readable(t: torch.Tensor) -> bool:
    """Whether t's values can be read here: not while torch.compile traces, not on fake or meta
    tensors, not while a CUDA graph is being captured (a device-to-host copy would break it)."""
    if torch.compiler.is_compiling() or is_fake(t) or t.device.type == "meta":
        return False
    return not (t.is_cuda and torch.cuda.is_current_stream_capturing())


def check_cu_seqlens_values(name: str, cu_seqlens: Union[torch.Tensor, Sequence[int]], total: int,
                            max_seqlen: Optional[int] = None, max_name: str = "max_seqlen") -> None:
    """Contents of a validated cu_seqlens (a tensor, or its values as a list): starts at 0,
    non-decreasing, ends at total (the packed tensor's token count); every length
    cu[b+1] - cu[b] <= max_seqlen (when given). Reading a CUDA tensor's values is a
    device-to-host copy, which synchronises with the stream."""
    values = cu_seqlens.tolist() if isinstance(cu_seqlens, torch.Tensor) else list(cu_seqlens)
    if values[0] != 0:
        raise ValueError(f"flash_attn_cuda: {name} must start at 0, got {name}[0] = {values[0]}")
    lengths = [b - a for a, b in zip(values[:-1], values[1:])]
    for b, length in enumerate(lengths):
        if length < 0:
            raise ValueError(f"flash_attn_cuda: {name} must be non-decreasing, got {name}[{b}] = {values[b]} > "
                             f"{name}[{b + 1}] = {values[b + 1]}")
    if values[-1] != total:
        raise ValueError(f"flash_attn_cuda: {name}[-1] must equal the packed tensor's total tokens {total}, "
                         f"got {values[-1]}")
    longest = max(lengths, default=0)
    if max_seqlen is not None and not isinstance(max_seqlen, torch.SymInt) and longest > max_seqlen:
        raise ValueError(f"flash_attn_cuda: {max_name} must be >= the longest sequence in {name} ({longest}), "
                         f"got {max_seqlen}")


class _CheckedCuSeqlens:
    """cu_seqlens pairs whose values passed check_cu_seqlens_values, so that the layers of one
    model step, which share the same unmodified tensors, pay the device-to-host copy (a stream
    sync) once instead of once per call.

    One entry per pair of tensor objects (by id), holding weak references to them, so a dead
    tensor's reused id never matches (the reference must still point at the very object), and
    what the check depended on: each tensor's version counter (bumped by every in-place write
    through PyTorch), data pointer, and the sizes checked against. A new state of a pair replaces
    its entry; the table holds at most MAX_ENTRIES pairs. Writes that bypass the version counter
    (tensor.data[...] = x, DLPack or raw-pointer writers) are not seen: the kernels then clamp
    every sequence into the packed tensors (csrc/seq_info.h), so such values give wrong results,
    never out-of-bounds memory accesses. Inference tensors have no version counter: checked on
    every call."""

    MAX_ENTRIES = 64

    def __init__(self) -> None:
        self._entries: dict = {}  # (id(cu_q), id(cu_k)) -> (weakref q, weakref k, state)

    @staticmethod
    def _state(cu_q: torch.Tensor, cu_k: torch.Tensor, sizes: tuple) -> Optional[tuple]:
        try:
            return (cu_q._version, cu_k._version, cu_q.data_ptr(), cu_k.data_ptr()) + sizes
        except RuntimeError:  # inference tensors do not track versions
            return None

    def checked(self, cu_q: torch.Tensor, cu_k: torch.Tensor, sizes: tuple) -> bool:
        entry = self._entries.get((id(cu_q), id(cu_k)))
        if entry is None or entry[0]() is not cu_q or entry[1]() is not cu_k:
            return False
        state = self._state(cu_q, cu_k, sizes)
        return state is not None and state == entry[2]

    def add(self, cu_q: torch.Tensor, cu_k: torch.Tensor, sizes: tuple) -> None:
        state = self._state(cu_q, cu_k, sizes)
        if state is None:
            return
        if len(self._entries) >= self.MAX_ENTRIES:
            self._entries = {key: e for key, e in self._entries.items() if e[0]() is not None and e[1]() is not None}
            if len(self._entries) >= self.MAX_ENTRIES:
                self._entries.clear()
        self._entries[(id(cu_q), id(cu_k))] = (weakref.ref(cu_q), weakref.ref(cu_k), state)


_checked_cu_seqlens = _CheckedCuSeqlens()


def check_varlen_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                        compiled_head_dims: Sequence[int], compiled_dtypes: Sequence[torch.dtype],
                        check_device: bool = True, check_alignment: bool = True,
                        check_values: bool = True) -> Tuple[int, int]:
    """Validates the packed (varlen) layout, as flash-attn's flash_attn_varlen_func takes it:
    q: (total_q, nheads, headdim), k/v: (total_k, nheads_k, headdim); cu_seqlens_q/k: int32
    (batch + 1,) prefix sums (sequence b is rows cu[b]:cu[b+1], length 0 allowed);
    max_seqlen_q/k: Python ints >= the longest sequence.

    check_device / check_alignment as in check_attention_inputs. check_values reads cu_seqlens
    (one device-to-host copy, which synchronises) to check their contents and the max_seqlen
    bounds, once per unmodified pair of tensors (_CheckedCuSeqlens: the layers of a model step
    share them); it is skipped regardless while torch.compile traces and on fake/meta tensors,
    where the values do not exist. Everything else is checked always.

    Returns (compiled head dim that will run, batch). TypeError for types/dtypes, ValueError else.
    """
    runnable = _check_qkv(q, k, v, 3, compiled_head_dims, compiled_dtypes, check_device, check_alignment)
    batch = check_cu_seqlens("cu_seqlens_q", cu_seqlens_q, q.device)
    batch_k = check_cu_seqlens("cu_seqlens_k", cu_seqlens_k, q.device)
    if batch_k != batch:
        raise ValueError(f"flash_attn_cuda: cu_seqlens_q and cu_seqlens_k must have the same length batch + 1, "
                         f"got {batch + 1} and {batch_k + 1}")
    if batch > MAX_GRID_DIM:
        raise ValueError(f"flash_attn_cuda: batch ({batch}) must be <= {MAX_GRID_DIM}")
    max_seqlen_q = check_max_seqlen("max_seqlen_q", max_seqlen_q)
    max_seqlen_k = check_max_seqlen("max_seqlen_k", max_seqlen_k)
    if check_values and values_readable(cu_seqlens_q) and values_readable(cu_seqlens_k):
        sizes = (q.shape[0], k.shape[0], max_seqlen_q, max_seqlen_k)
        if not _checked_cu_seqlens.checked(cu_seqlens_q, cu_seqlens_k, sizes):
            values_q, values_k = torch.stack((cu_seqlens_q, cu_seqlens_k)).tolist()   # one device-to-host copy
            check_cu_seqlens_values("cu_seqlens_q", values_q, q.shape[0], max_seqlen_q, "max_seqlen_q")
            check_cu_seqlens_values("cu_seqlens_k", values_k, k.shape[0], max_seqlen_k, "max_seqlen_k")
            _checked_cu_seqlens.add(cu_seqlens_q, cu_seqlens_k, sizes)
    return runnable, batch
