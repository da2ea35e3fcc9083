"""attention_with_kvcache: flash-attn 2's flash_attn_with_kvcache, argument for argument
(incremental decoding over a KV cache, contiguous or paged).

flash-attn 2 semantics this module follows (Dao-AILab/flash-attention 0251105a; reference model:
flash_attn_cuda.reference.kvcache_reference):

- Append. k, v (batch, seqlen_new, nheads_k, d) are written IN PLACE into the caches at slots
  [cache_seqlens[b], cache_seqlens[b] + seqlen_new) of sequence b (through block_table when paged),
  before attending; they need cache_seqlens (flash_api.cpp:mha_fwd_kvcache "If key is supplied,
  seqlens_k must also be passed in"). Duplicate cache_batch_idx entries with k: any of the writers
  may win (flash_attn_interface.py:flash_attn_with_kvcache docstring).
- Keys. Sequence b attends to slots [cache_leftpad[b], end_b), end_b = cache_seqlens[b] + seqlen_new
  (the whole capacity without cache_seqlens). cache_leftpad shifts the start: block_info.h:BlockInfo
  has seqlen_k_cache = cache_seqlens - leftpad, actual_seqlen_k = seqlen_k_cache + seqlen_knew and
  k_offset moves the K pointer by leftpad rows; so cache_seqlens counts the padding (it is the end
  slot) and slots before leftpad are invisible (test_flash_attn.py:test_flash_attn_kvcache builds
  key_padding_mask = leftpad <= j < cache_seqlens + seqlen_new).
- Alignment. Causal / window / ALiBi are bottom-right aligned on the visible keys,
  seqlen_k = end_b - leftpad_b: query i sees key slot j iff
  i + end_b - seqlen_q - left <= j <= i + end_b - seqlen_q + right (and j >= leftpad_b); the ALiBi
  distance is |i + end_b - seqlen_q - j|. The leftpad shift cancels out, so slot coordinates work
  (test_flash_attn.py:construct_local_mask / attn_bias_from_alibi_slopes with key_leftpad).
  mha_fwd_kvcache turns a window side >= the capacity (its seqlen_k) into -1; we do the same.
  seqlen_q == 1 without ALiBi: flash-attn switches causal off, which changes nothing (the one
  query sees every key either way).
- Rotary (flash_fwd_kernel.h:compute_attn_1rowblock_splitkv, "row_offset_cossin"): positions are
  absolute cache slots, leftpad included. New key i uses row cache_seqlens[b] + i of cos/sin.
  Query i uses row cache_seqlens[b] + i if the attention is causal or local (a bounded window
  side, after the capacity rule above), else every query uses row cache_seqlens[b]
  ("If not causal, all the queries get the same the cos/sin"). rotary_dim = 2 * cos.shape[1]
  <= d and % 16 == 0; dims >= rotary_dim are untouched; interleaved=True pairs (2i, 2i + 1)
  (GPT-J), False pairs (i, i + rotary_dim / 2) (GPT-NeoX) (rotary.h, layers/rotary.py). The
  rotated key is rounded to the cache dtype when stored. Rotary needs k/v ("If rotary cos/sin
  are provided, new key / value ... must also be provided"); cos/sin dtype == q's, contiguous.
- cache_batch_idx: (batch,) int32, sequence b reads/writes cache row cache_batch_idx[b]
  (default b); paged caches refuse it ("Paged KVcache does not support cache_batch_idx") and
  cache_leftpad ("We don't support Paged KV and leftpad_k running at the same time yet").
- Paged: caches (num_pages, page_size, nheads_k, d), block_table (batch, max_pages_per_seq)
  int32, slot s in page block_table[b, s // page_size] at row s % page_size. flash-attn 2
  requires page_size % 256 == 0; we take any positive multiple of PAGE_SIZE_MULTIPLE.
- num_splits: 0 = heuristic, 1 = no split, n > 1 = n splits (<= 128, set_params_splitkv).
- Differences: flash-attn wants seqlen_ro >= the capacity always; we check the exact largest
  position when cache_seqlens is an int (so a shorter table is fine), and seqlen_ro >= capacity
  when it is a tensor (values unread). flash-attn refuses seqlen_q > capacity with k given
  (a check of seqlen_q where seqlen_knew seems meant); we check seqlen_new + cache_seqlens <=
  capacity instead. flash-attn accepts a cache batch smaller than batch (out-of-bounds reads);
  we refuse it.

No device-to-host copy on the call path (CUDA graphs): tensors are checked by metadata only, an
int cache_seqlens becomes a device tensor with torch.full.
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Tuple, Union

import torch
from torch._subclasses.fake_tensor import is_fake

from . import _validate
from ._ops import HAS_KVCACHE, compiled_dtypes, compiled_head_dims, require_extension

# The raw op, registered by the C++ extension; the mutation annotations (a!)/(b!) tell
# torch.compile that the caches are written in place.
FWD_KVCACHE_SCHEMA = (
    "fwd_kvcache(Tensor q, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor? k, Tensor? v, Tensor? rotary_cos, "
    "Tensor? rotary_sin, Tensor? cache_seqlens, Tensor? cache_batch_idx, Tensor? cache_leftpad, "
    "Tensor? block_table, float softmax_scale, bool causal, int window_left, int window_right, float softcap, "
    "bool rotary_interleaved, Tensor? alibi_slopes, int num_splits) -> (Tensor out, Tensor lse)")

# Page sizes: any positive multiple of PAGE_SIZE_MULTIPLE (so a 16-row tile of keys never straddles
# two pages); SUPPORTED_PAGE_SIZES are the sizes issue 10 asks for, which the tests cover.
PAGE_SIZE_MULTIPLE = 16
SUPPORTED_PAGE_SIZES = (16, 32, 64, 128, 256)
ROTARY_DIM_MULTIPLE = 16  # flash-attn 2: "Only rotary dimensions divisible by 16 are currently supported"
MAX_SPLITS = 128          # flash-attn 2's set_params_splitkv: "num_splits > 128 not supported"

_CONTIGUOUS_LAYOUT = "4-D (batch_cache, seqlen_cache, nheads_k, headdim)"
_PAGED_LAYOUT = "4-D (num_pages, page_size, nheads_k, headdim) with a block_table"


class KvcacheArgs(NamedTuple):
    """fwd_kvcache's arguments, checked and normalised (in the schema's order)."""
    q: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    k: Optional[torch.Tensor]
    v: Optional[torch.Tensor]
    rotary_cos: Optional[torch.Tensor]
    rotary_sin: Optional[torch.Tensor]
    cache_seqlens: Optional[torch.Tensor]
    cache_batch_idx: Optional[torch.Tensor]
    cache_leftpad: Optional[torch.Tensor]
    block_table: Optional[torch.Tensor]
    softmax_scale: float
    causal: bool
    window_left: int
    window_right: int
    softcap: float
    rotary_interleaved: bool
    alibi_slopes: Optional[torch.Tensor]
    num_splits: int


def _err(message: str) -> ValueError:
    return ValueError(f"flash_attn_cuda: {message}")


def page_size_supported(page_size: int) -> bool:
    """Whether paged caches with this many rows per page run: a positive multiple of 16."""
    return page_size > 0 and page_size % PAGE_SIZE_MULTIPLE == 0


def _check_tensors(q, k_cache, v_cache, k, v, paged: bool, check_alignment: bool) -> int:
    """q (batch, seqlen_q, nheads, d), caches, new k/v: types, dtypes, devices, shapes.
    Returns seqlen_new (0 without k, v)."""
    layout = _PAGED_LAYOUT if paged else _CONTIGUOUS_LAYOUT
    _validate._check_one("q", q, 4, "4-D (batch, seqlen_q, nheads, headdim)")
    _validate._check_one("k_cache", k_cache, 4, layout)
    _validate._check_one("v_cache", v_cache, 4, layout)
    if (k is None) != (v is None):
        raise _err(f"pass k and v together or neither, got k {_kind(k)} and v {_kind(v)}")
    new = () if k is None else (("k", k), ("v", v))
    for name, t in new:
        _validate._check_one(name, t, 4, "4-D (batch, seqlen_new, nheads_k, headdim)")
    named = (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)) + new
    if len({t.dtype for _, t in named}) != 1:
        raise TypeError("flash_attn_cuda: q, k_cache, v_cache (and k, v) must share a dtype, got "
                        + ", ".join(f"{n} {t.dtype}" for n, t in named))
    if len({t.device for _, t in named}) != 1:
        raise _err("q, k_cache, v_cache (and k, v) must be on one device, got "
                   + ", ".join(f"{n} {t.device}" for n, t in named))
    batch, _, nheads, headdim = q.shape
    nheads_k = k_cache.shape[2]
    if v_cache.shape != k_cache.shape:
        raise _err(f"k_cache and v_cache must have the same shape, got {tuple(k_cache.shape)} and "
                   f"{tuple(v_cache.shape)}")
    if k_cache.shape[3] != headdim:
        raise _err(f"head dims differ: q {headdim}, k_cache/v_cache {k_cache.shape[3]}")
    if nheads_k == 0 or nheads % nheads_k != 0:
        raise _err(f"nheads of q ({nheads}) must be a multiple of nheads of k_cache/v_cache ({nheads_k})")
    _validate.check_head_dim(headdim)
    for name, t in new:
        if t.shape[0] != batch or t.shape[2:] != k_cache.shape[2:] or t.shape[1] != k.shape[1]:
            raise _err(f"{name} must have shape (batch, seqlen_new, nheads_k, headdim) = ({batch}, {k.shape[1]}, "
                       f"{nheads_k}, {headdim}), got {tuple(t.shape)}")
    if batch > _validate.MAX_GRID_DIM or nheads > _validate.MAX_GRID_DIM:
        raise _err(f"batch ({batch}) and nheads ({nheads}) must be <= {_validate.MAX_GRID_DIM}")
    if check_alignment:
        for name, t in named:
            _validate._check_aligned(name, t)
    return 0 if k is None else k.shape[1]


def _kind(x: object) -> str:
    return "None" if x is None else type(x).__name__


def _check_paging(q, k_cache, block_table, cache_batch_idx, cache_leftpad) -> Tuple[Optional[torch.Tensor], int]:
    """block_table (batch, max_pages_per_seq) int32 for paged caches. Returns (block_table
    contiguous or None, capacity: the slots each sequence owns)."""
    batch = q.shape[0]
    if block_table is None:
        if cache_batch_idx is None and k_cache.shape[0] < batch:
            raise _err(f"k_cache/v_cache hold {k_cache.shape[0]} sequences, fewer than batch {batch}; pass "
                       f"cache_batch_idx to pick rows, or a cache of batch_cache >= {batch}")
        capacity = k_cache.shape[1]
    else:
        block_table = _validate.check_int32_tensor("block_table", block_table, (batch, None),
                                                   "(batch, max_pages_per_seq)", q.device)
        for name, given in (("cache_batch_idx", cache_batch_idx), ("cache_leftpad", cache_leftpad)):
            if given is not None:
                raise _err(f"a paged cache (block_table) does not take {name} (as flash-attn); got both")
        page_size = k_cache.shape[1]
        if not page_size_supported(page_size):
            raise _err(f"page_size (k_cache.shape[1]) must be a positive multiple of {PAGE_SIZE_MULTIPLE} "
                       f"(e.g. {', '.join(map(str, SUPPORTED_PAGE_SIZES))}), got {page_size}")
        if k_cache.shape[0] == 0:
            raise _err(f"a paged k_cache must hold at least one page, got shape {tuple(k_cache.shape)}")
        capacity = block_table.shape[1] * page_size
    if capacity > _validate.MAX_SEQLEN or q.shape[1] > _validate.MAX_SEQLEN:
        raise _err(f"sequence lengths must be <= {_validate.MAX_SEQLEN}, got seqlen_q {q.shape[1]} and cache "
                   f"capacity {capacity}")
    return block_table, capacity


def _check_cache_seqlens(cache_seqlens, q, seqlen_new: int, has_new: bool, capacity: int) -> Optional[torch.Tensor]:
    """cache_seqlens: None, an int, or an int32 (batch,) tensor on q's device -> None or a device
    tensor. An int is checked against the capacity and becomes torch.full (no host transfer)."""
    if cache_seqlens is None:
        if has_new:
            raise _err("k and v are appended at cache_seqlens: pass cache_seqlens (an int or an int32 (batch,) "
                       "tensor) with them")
        return None
    if isinstance(cache_seqlens, torch.Tensor):
        return _validate.check_int32_tensor("cache_seqlens", cache_seqlens, (q.shape[0],), "(batch,)", q.device)
    if not _validate._is_int(cache_seqlens):
        raise TypeError(f"flash_attn_cuda: cache_seqlens must be an int or an int32 torch.Tensor, got "
                        f"{type(cache_seqlens).__name__}")
    if not 0 <= cache_seqlens <= capacity - seqlen_new:
        raise _err(f"cache_seqlens + seqlen_new must fit the cache: 0 <= {cache_seqlens} and {cache_seqlens} + "
                   f"{seqlen_new} <= capacity {capacity}")
    return torch.full((q.shape[0],), cache_seqlens, dtype=torch.int32, device=q.device)


def _check_rotary(rotary_cos, rotary_sin, q, has_new: bool, needed_rows: int) -> None:
    """rotary_cos/sin: both or neither, only with new k/v; (seqlen_ro, rotary_dim / 2), q's dtype
    and device, contiguous; rotary_dim a positive multiple of 16 <= headdim; seqlen_ro >=
    needed_rows (the largest position used + 1, or the capacity when not known)."""
    if rotary_cos is None and rotary_sin is None:
        return
    if rotary_cos is None or rotary_sin is None:
        raise _err(f"pass rotary_cos and rotary_sin together or neither, got rotary_cos {_kind(rotary_cos)} and "
                   f"rotary_sin {_kind(rotary_sin)}")
    if not has_new:
        raise _err("rotary_cos/rotary_sin rotate the new k and q: they need k and v (as flash-attn)")
    for name, t in (("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"flash_attn_cuda: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != q.dtype:
            raise TypeError(f"flash_attn_cuda: {name} must have q's dtype {q.dtype}, got {t.dtype}")
        if t.dim() != 2 or t.shape != rotary_cos.shape:
            raise _err(f"rotary_cos and rotary_sin must be 2-D (seqlen_ro, rotary_dim / 2) of one shape, got "
                       f"{tuple(rotary_cos.shape)} and {tuple(rotary_sin.shape)}")
        if t.device != q.device:
            raise _err(f"{name} must be on q's device {q.device}, got {t.device}")
        if not t.is_contiguous():
            raise _err(f"{name} must be contiguous, got strides {tuple(t.stride())}; call .contiguous() once")
    rotary_dim, headdim = 2 * rotary_cos.shape[1], q.shape[3]
    if rotary_dim == 0 or rotary_dim % ROTARY_DIM_MULTIPLE != 0 or rotary_dim > headdim:
        raise _err(f"rotary_dim = 2 * rotary_cos.shape[1] must be a positive multiple of {ROTARY_DIM_MULTIPLE} "
                   f"<= headdim {headdim}, got {rotary_dim}")
    if rotary_cos.shape[0] < needed_rows:
        raise _err(f"rotary_cos/rotary_sin have {rotary_cos.shape[0]} rows (seqlen_ro), but positions up to "
                   f"{needed_rows - 1} are used; pass at least {needed_rows} rows")


def _optional_per_sequence(name: str, t: object, q: torch.Tensor) -> Optional[torch.Tensor]:
    # cache_batch_idx / cache_leftpad: None or int32 (batch,) on q's device (returned contiguous)
    return None if t is None else _validate.check_int32_tensor(name, t, (q.shape[0],), "(batch,)", q.device)


def _rotary_rows_needed(cache_seqlens, q, seqlen_new: int, capacity: int, q_per_row: bool) -> int:
    # Rows of cos/sin the call reads: exact for an int cache_seqlens, else the capacity (the
    # largest slot a valid call can write + 1, flash-attn's own rule).
    if not _validate._is_int(cache_seqlens):
        return capacity
    return cache_seqlens + max(seqlen_new, q.shape[1] if q_per_row else 1)


def _check_options(q, capacity: int, softmax_scale, causal, window_size, softcap, alibi_slopes,
                   num_splits) -> Tuple[float, int, int, float, Optional[torch.Tensor], int]:
    """Returns (softmax_scale, window_left, window_right, softcap, alibi_slopes, num_splits)
    normalised; the window as flash-attn's mha_fwd_kvcache: causal sets right = 0 and a side >=
    the capacity becomes -1."""
    softmax_scale = q.shape[-1] ** -0.5 if softmax_scale is None else _validate.check_softmax_scale(softmax_scale)
    left, right = (-1 if w >= capacity else w for w in _validate.check_window_size(window_size, bool(causal)))
    softcap = _validate.check_softcap(softcap)
    alibi_slopes = _validate.check_alibi_slopes(alibi_slopes, q.shape[0], q.shape[2], q.device)
    _validate.check_softcap_scale(softcap, softmax_scale)
    if not _validate._is_int(num_splits):
        raise TypeError(f"flash_attn_cuda: num_splits must be an int, got {type(num_splits).__name__}")
    if not 0 <= num_splits <= MAX_SPLITS:
        raise _err(f"num_splits must be 0 (heuristic), 1 (no split) or up to {MAX_SPLITS}, got {num_splits}")
    return softmax_scale, left, right, softcap, alibi_slopes, int(num_splits)


def check_kvcache_inputs(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None, cache_seqlens=None,
                         cache_batch_idx=None, cache_leftpad=None, block_table=None, softmax_scale=None,
                         causal=False, window_size=(-1, -1), softcap=0.0, rotary_interleaved=True,
                         alibi_slopes=None, num_splits=0, *, check_device: bool = True,
                         check_alignment: bool = True) -> KvcacheArgs:
    """Validates attention_with_kvcache's arguments (metadata only: no values are read, so it
    works on fake tensors and under CUDA graph capture) and returns fwd_kvcache's arguments.
    check_device queries the GPU's compute capability (real tensors only); check_alignment
    reads storage offsets (not while torch.compile traces). One TypeError (types, dtypes) or
    ValueError (everything else) naming what was expected and what came."""
    paged = block_table is not None
    seqlen_new = _check_tensors(q, k_cache, v_cache, k, v, paged, check_alignment)
    block_table, capacity = _check_paging(q, k_cache, block_table, cache_batch_idx, cache_leftpad)
    if seqlen_new > capacity:
        raise _err(f"k/v bring {seqlen_new} new rows, more than the cache holds ({capacity})")
    seqlens = _check_cache_seqlens(cache_seqlens, q, seqlen_new, k is not None, capacity)
    batch_idx = _optional_per_sequence("cache_batch_idx", cache_batch_idx, q)
    leftpad = _optional_per_sequence("cache_leftpad", cache_leftpad, q)
    softmax_scale, left, right, softcap, alibi_slopes, num_splits = _check_options(
        q, capacity, softmax_scale, causal, window_size, softcap, alibi_slopes, num_splits)
    q_per_row = left >= 0 or right >= 0       # causal or local: query i rotated at cache_seqlens + i
    _check_rotary(rotary_cos, rotary_sin, q, k is not None,
                  _rotary_rows_needed(cache_seqlens, q, seqlen_new, capacity, q_per_row))
    if check_device:
        _validate.check_capability(q.device)
    return KvcacheArgs(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, seqlens, batch_idx, leftpad, block_table,
                       float(softmax_scale), bool(causal), left, right, softcap, bool(rotary_interleaved),
                       alibi_slopes, num_splits)


def attention_with_kvcache(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k: Optional[torch.Tensor] = None,
    v: Optional[torch.Tensor] = None,
    rotary_cos: Optional[torch.Tensor] = None,
    rotary_sin: Optional[torch.Tensor] = None,
    cache_seqlens: Optional[Union[int, torch.Tensor]] = None,
    cache_batch_idx: Optional[torch.Tensor] = None,
    cache_leftpad: Optional[torch.Tensor] = None,
    block_table: Optional[torch.Tensor] = None,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_size: Tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    rotary_interleaved: bool = True,
    alibi_slopes: Optional[torch.Tensor] = None,
    num_splits: int = 0,
    return_softmax_lse: bool = False,
) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """Attention of q over a KV cache, appending new keys/values first (incremental decoding);
    flash-attn 2's flash_attn_with_kvcache, same arguments in the same order. Forward only.

    Args:
        q: (batch, seqlen_q, nheads, headdim), float16 or bfloat16, on a CUDA GPU (sm80+).
        k_cache, v_cache: (batch_cache, seqlen_cache, nheads_k, headdim), or paged
            (num_pages, page_size, nheads_k, headdim) with block_table; q's dtype and device,
            nheads % nheads_k == 0 (GQA/MQA). Written in place when k, v are given.
        k, v: (batch, seqlen_new, nheads_k, headdim) or None: appended to the caches at slots
            [cache_seqlens[b], cache_seqlens[b] + seqlen_new) before attending (needs cache_seqlens).
        rotary_cos, rotary_sin: (seqlen_ro, rotary_dim / 2), q's dtype, contiguous, or None;
            rotary_dim a multiple of 16 <= headdim. Only with k, v: new key i is rotated at
            position cache_seqlens + i; query i at cache_seqlens + i if causal or local (a window
            side), else every query at cache_seqlens. Dims past rotary_dim are untouched.
        cache_seqlens: int, or int32 (batch,) on q's device: the filled length of each sequence
            (its end slot, left padding included). None: the whole capacity.
        cache_batch_idx: int32 (batch,) or None: the cache row sequence b uses (default b).
        cache_leftpad: int32 (batch,) or None: slots before it are invisible (left padding).
        block_table: int32 (batch, max_pages_per_seq) or None: page indices (paged caches):
            slot s of sequence b is row s % page_size of page block_table[b, s // page_size].
            page_size: a positive multiple of 16. Not with cache_batch_idx or cache_leftpad.
        softmax_scale, causal, window_size, softcap, alibi_slopes: as attention(); the mask and
            ALiBi align query i with slot i + end - seqlen_q, end = cache_seqlens + seqlen_new.
        rotary_interleaved: True pairs dims (2i, 2i + 1) (GPT-J), False (i, i + rotary_dim / 2)
            (GPT-NeoX).
        num_splits: 0 = heuristic, 1 = no split of the keys, n = n splits (<= 128).
        return_softmax_lse: also return the log-sum-exp.

    The capacity is seqlen_cache, or max_pages_per_seq * page_size when paged; seqlen_new +
    cache_seqlens must fit it (checked when cache_seqlens is an int). Nothing is copied to the
    host, so the call can be captured in a CUDA graph.

    Returns:
        out: (batch, seqlen_q, nheads, headdim), q's dtype; and if return_softmax_lse,
        lse: (batch, nheads, seqlen_q) float32 (-inf for a query that sees no key; out is 0 there).
    """
    compiling = torch.compiler.is_compiling()
    args = check_kvcache_inputs(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                                cache_leftpad, block_table, softmax_scale, causal, window_size, softcap,
                                rotary_interleaved, alibi_slopes, num_splits,
                                check_device=not compiling and not is_fake(q), check_alignment=not compiling)
    require_extension()
    if not HAS_KVCACHE:
        raise ValueError("flash_attn_cuda: attention_with_kvcache needs the KV-cache kernels, which this build left "
                         "out (FLASH_ATTN_CUDA_KVCACHE=0); rebuild without that flag")
    _validate.check_compiled(q.dtype, q.shape[-1], compiled_head_dims(), compiled_dtypes())
    out, lse = torch.ops.flash_attn_cuda.fwd_kvcache(*args)
    return (out, lse) if return_softmax_lse else out


def fwd_kvcache_fake(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                     cache_leftpad, block_table, softmax_scale, causal, window_left, window_right, softcap,
                     rotary_interleaved, alibi_slopes, num_splits) -> Tuple[torch.Tensor, torch.Tensor]:
    """Fake (meta) implementation of fwd_kvcache for torch.compile (registered by _ops): out (batch, seqlen_q, nheads,
    headdim) contiguous in q's dtype, lse (batch, nheads, seqlen_q) float32; the caches' in-place
    update is declared by the schema."""
    batch, seqlen_q, nheads, _ = q.shape
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, nheads, seqlen_q), dtype=torch.float32, device=q.device)
    return out, lse


if HAS_KVCACHE:
    torch.library.register_fake("flash_attn_cuda::fwd_kvcache")(fwd_kvcache_fake)
