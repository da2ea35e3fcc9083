"""Loads the compiled kernels and wires the raw ops into torch.library: fake (meta) impls for
torch.compile (their autograd is registered in C++, csrc/binding_autograd.cpp). Without the compiled extension (a fresh clone) the
package still imports: nothing is registered, and attention() raises require_extension()'s error."""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import NamedTuple, Optional

import torch

_C: Optional[ModuleType] = None
_C_IMPORT_ERROR: Optional[ImportError] = None
try:
    _C = importlib.import_module(f"{__package__}._C")  # registers torch.ops.flash_attn_cuda.*
except ImportError as e:
    _C_IMPORT_ERROR = e
HAS_EXTENSION: bool = _C is not None

_ops = torch.ops.flash_attn_cuda


def require_extension() -> None:
    """Raise one RuntimeError saying how to build the extension when flash_attn_cuda._C did not load."""
    if not HAS_EXTENSION:
        raise RuntimeError(
            f"flash_attn_cuda: the compiled extension flash_attn_cuda._C is not built or failed to load "
            f"({type(_C_IMPORT_ERROR).__name__}: {_C_IMPORT_ERROR}). Build it in the checkout with `make install` "
            "(= `pip install --no-build-isolation --no-deps -e .`; needs a CUDA toolkit, see README)")


# Read once at import: fixed for the life of the library, and plain Python values keep
# torch.compile from tracing into these ops. Empty / False without the extension.
_COMPILED_HEAD_DIMS: tuple[int, ...] = tuple(_ops.compiled_head_dims()) if HAS_EXTENSION else ()
_COMPILED_DTYPES: tuple[torch.dtype, ...] = (tuple(getattr(torch, name) for name in _ops.compiled_dtypes())
                                              if HAS_EXTENSION else ())


def compiled_head_dims() -> tuple[int, ...]:
    """Head dims this build compiled kernels for (FLASH_ATTN_CUDA_HDIMS); () without the extension."""
    return _COMPILED_HEAD_DIMS


def compiled_dtypes() -> tuple[torch.dtype, ...]:
    """Element types this build compiled kernels for (FLASH_ATTN_CUDA_DTYPES); () without the extension."""
    return _COMPILED_DTYPES


def _rng_state_like(q, dropout_p):
    # int64 (2,) (seed, offset) with dropout, (0,) without (binding.cpp make_rng_state)
    return torch.empty((2 if dropout_p > 0 else 0,), dtype=torch.int64, device=q.device)


def _fwd_fake(q, k, v, softmax_scale, causal, deterministic=False, window_left=-1, window_right=-1, softcap=0.0,
              alibi_slopes=None, dropout_p=0.0):
    # out: (batch, seqlen_q, nheads, headdim) contiguous like the kernel's; lse: (batch, nheads, seqlen_q) fp32
    batch, seqlen_q, nheads, _ = q.shape
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, nheads, seqlen_q), dtype=torch.float32, device=q.device)
    return out, lse, _rng_state_like(q, dropout_p)


# Builds with FLASH_ATTN_CUDA_BACKWARD=0 (forward only, faster to compile) have no backward op.
HAS_BACKWARD: bool = HAS_EXTENSION and bool(_ops.has_backward())
# Builds with FLASH_ATTN_CUDA_FEATURES=0 have no window/softcap/ALiBi/varlen kernels (fwd_launch.h).
HAS_FEATURES: bool = HAS_EXTENSION and bool(_ops.has_features())
# Builds with FLASH_ATTN_CUDA_KVCACHE=0 have no KV-cache (decode) op (binding_kvcache.cpp).
HAS_KVCACHE: bool = HAS_EXTENSION and hasattr(_ops, "fwd_kvcache")
# Head dims of the sm90 (Hopper, sm_90a) forward family: builds with 90a in FLASH_ATTN_CUDA_ARCHS
# compile it for 64/128/256 (those built); it runs on compute capability 9.0 GPUs, picked per call.
_SM90_HEAD_DIMS: tuple[int, ...] = tuple(_ops.sm90_head_dims()) if HAS_EXTENSION else ()
HAS_SM90: bool = bool(_SM90_HEAD_DIMS)
# Whether FLASH_ATTN_CUDA_FAMILY=auto (or unset) picks the sm90 family (csrc/params.h, kSm90ByDefault);
# when False, sm90 runs only with FLASH_ATTN_CUDA_FAMILY=sm90.
SM90_BY_DEFAULT: bool = HAS_EXTENSION and bool(_ops.sm90_by_default())


def sm90_head_dims() -> tuple[int, ...]:
    """Head dims the sm90 forward family compiled (every compiled dtype); () without it."""
    return _SM90_HEAD_DIMS


def last_fwd_family() -> str:
    """What served this thread's last forward call: "sm80", "sm90", "decode" (the KV-cache kernel,
    for decode-like shapes), "none" (empty inputs, no kernel), "" before any. For tests and benchmarks."""
    require_extension()
    return _ops.last_fwd_family()


class Tile(NamedTuple):
    """An sm80-family tile as the dispatch launched it (csrc/smem_budget.h KernelTile)."""
    block_m: int
    block_n: int
    warps: int
    q_stages: int     # backward: Q/dO buffers (the forward reports 1)
    smem_bytes: int   # dynamic shared memory per thread block
    budget_kb: int    # the tile table's row: 227 (default), 163 (A100) or 99 (sm86/sm89)


def _tile(values) -> Tile | None:
    return Tile(*values) if len(values) == 6 else None


def last_fwd_tile() -> Tile | None:
    """The sm80-family tile this thread's last forward call launched; None when no sm80-family
    kernel ran (the sm90 family, the decode kernel, empty inputs). For tests and benchmarks."""
    require_extension()
    return _tile(_ops.last_fwd_tile())


def last_bwd_tile() -> Tile | None:
    """The tile this thread's last backward call launched; None when it launched none (empty inputs)."""
    require_extension()
    return _tile(_ops.last_bwd_tile())


def last_bwd_family() -> str:
    """The family of the last backward's main kernel (any thread: autograd runs backwards on its own):
    "sm80", "sm90" (the Hopper backward, FLASH_ATTN_CUDA_FAMILY=sm90), "none" (empty inputs), "" before
    any; None without the backward compiled."""
    require_extension()
    return _ops.last_bwd_family() if hasattr(_ops, "last_bwd_family") else None


def smem_tiles_compiled() -> bool:
    """Whether this build has the small-memory tiles (the 163 / 99 KB rows; FLASH_ATTN_CUDA_SMEM_TILES at
    build time): without them FLASH_ATTN_CUDA_SMEM_BUDGET below a tile's needs is refused."""
    require_extension()
    return bool(_ops.smem_tiles_compiled())


def smem_budget_setting() -> int:
    """FLASH_ATTN_CUDA_SMEM_BUDGET as the calls read it (KB; 0 when unset): a cap on the shared memory
    per block the tile tables may plan for, to run the A100 (163) / sm86-sm89 (99) tiles on any GPU.
    Raises RuntimeError on a value that is not a positive integer, as the calls would."""
    require_extension()
    return int(_ops.smem_budget_setting())


def family_setting() -> str:
    """FLASH_ATTN_CUDA_FAMILY as the forward reads it on each call: "auto" (unset), "sm80" or "sm90";
    raises RuntimeError on any other value, as the forward would."""
    require_extension()
    return _ops.fwd_family_setting()


def _bwd_fake(dout, q, k, v, out, lse, softmax_scale, causal, deterministic=False, window_left=-1,
              window_right=-1, softcap=0.0, alibi_slopes=None, dropout_p=0.0, rng_state=None):
    # dq like q, dk/dv like k/v (contiguous)
    return (torch.empty(q.shape, dtype=q.dtype, device=q.device),
            torch.empty(k.shape, dtype=k.dtype, device=k.device),
            torch.empty(v.shape, dtype=v.dtype, device=v.device))


def _fwd_varlen_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                     deterministic=False, window_left=-1, window_right=-1, softcap=0.0, alibi_slopes=None,
                     dropout_p=0.0):
    # out: (total_q, nheads, headdim) like q; lse: (nheads, total_q) fp32
    total_q, nheads, _ = q.shape
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((nheads, total_q), dtype=torch.float32, device=q.device)
    return out, lse, _rng_state_like(q, dropout_p)


def _bwd_varlen_fake(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                     softmax_scale, causal, deterministic=False, window_left=-1, window_right=-1, softcap=0.0,
                     alibi_slopes=None, dropout_p=0.0, rng_state=None):
    # dq like q, dk/dv like k/v (contiguous, packed)
    return (torch.empty(q.shape, dtype=q.dtype, device=q.device),
            torch.empty(k.shape, dtype=k.dtype, device=k.device),
            torch.empty(v.shape, dtype=v.dtype, device=v.device))


def _bwd_into_fake(*args, **kwargs):
    return None


def _dropout_mask_fake(rng_state, batch, nheads, seqlen_q, seqlen_k, dropout_p):
    return torch.empty((batch, nheads, seqlen_q, seqlen_k), dtype=torch.bool, device=rng_state.device)


# The ops exist only when the extension loaded: register their fake impls then. Their autograd is C++
# (csrc/binding_autograd.cpp: the backward calls op bwd / bwd_varlen, through these fakes when traced).
if HAS_EXTENSION:
    torch.library.register_fake("flash_attn_cuda::fwd", _fwd_fake)
    torch.library.register_fake("flash_attn_cuda::fwd_varlen", _fwd_varlen_fake)
    torch.library.register_fake("flash_attn_cuda::dropout_mask", _dropout_mask_fake)
    if HAS_BACKWARD:
        torch.library.register_fake("flash_attn_cuda::bwd", _bwd_fake)
        torch.library.register_fake("flash_attn_cuda::bwd_varlen", _bwd_varlen_fake)
        # The backwards into caller-given gradients (packed.py) write their dq/dk/dv args only.
        torch.library.register_fake("flash_attn_cuda::bwd_into", _bwd_into_fake)
        torch.library.register_fake("flash_attn_cuda::bwd_varlen_into", _bwd_into_fake)
