"""Benchmark flash_attn_cuda against PyTorch SDPA's backends in one run: forward, backward and
fwd+bwd TFLOP/s on a grid, or the peak memory of one fwd+bwd.

    python -m flash_attn_cuda.bench --out benchmarks/results   # FA2-paper grid, fwd and bwd (H200: h200_*)
    python -m flash_attn_cuda.bench --directions fwd --hdims 128 --seqlens 4096 --causal 1
    python -m flash_attn_cuda.bench --directions fwd --csv out.csv --plot out.png --md out.md
    python -m flash_attn_cuda.bench --memory --out benchmarks/results   # H200: h200_memory.md
    python -m flash_attn_cuda.bench --replot r_fwd.csv r_bwd.csv --out plots --prefix r  # no GPU

Grid (FA2 paper): batch * seqlen = 16k tokens, hidden = nheads * headdim = 2048, head dims
64/128/256, seqlen 512..16k, causal and not. Forward FLOPs = 4 * batch * seqlen^2 * nheads *
headdim (halved when causal); backward = 2.5x that, fwd+bwd = 3.5x. Times are medians over many
runs timed with CUDA events after warm-up; inputs rotate over several buffers when one set would
fit in L2. Impl order (--order): each grid point is measured twice, impls in the given order and
then reversed (A B B A), and each impl's two times averaged; the first impl of a point otherwise runs
on the clocks the previous point's heavy passes left (the H200 sits at its 700 W limit in fwd+bwd
and its clock recovers over seconds: benchmarks/NOTES.md, fourteenth session). --order ab measures
once, in the given order (half the time). Direction fwd times the forward alone (inputs without
grad). Direction bwd times, with q, k, v requiring grad and a random dout: the forward (fwd_ms),
the backward alone (bwd_ms: autograd.grad of a graph kept from one forward) and forward + backward
(fwdbwd_ms).

Files: --out DIR --prefix NAME writes DIR/NAME_fwd.csv, DIR/NAME_bwd.csv, DIR/NAME.md (run header
and one table per direction: forward, backward, fwd+bwd) and DIR/NAME_fwd.png, DIR/NAME_bwd.png,
DIR/NAME_fwdbwd.png, for the directions run. --csv/--md/--plot write the forward's files alone.
NAME defaults to the GPU's name as a slug (gpu_slug: 'NVIDIA H200' -> h200, 'NVIDIA A100-SXM4-80GB'
-> a100_sxm4_80gb), so a run on one GPU never overwrites another GPU's files; --memory appends
_memory to it, --replot (no GPU) uses 'results'.

--memory: instead of the grid, the peak GPU memory of one fwd+bwd of flash_attn_cuda and of
sdpa_flash (batch 1, 16 heads; seqlen 16384, head dim 128, non-causal unless the first value of
--seqlens/--hdims/--causal says otherwise), next to the essential bytes: q, k, v, dout, out,
dq, dk, dv and the float32 LSE (batch, nheads, seqlen). Printed, and written to DIR/NAME.md.

--replot CSV [CSV ...]: redraw the tables and plots of earlier CSVs (forward or backward, told
apart by their columns) into --md/--plot or --out/--prefix; no GPU needed.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import math
import os
import re
import shlex
import statistics
import sys
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

IMPLS = ("flash_attn_cuda", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "flash_attn_cuda_sm80",
         "flash_attn_cuda_sm90", "flash_attn_cuda_smem163", "flash_attn_cuda_smem99",
         "flash_attn_cuda_sm90_persistent", "flash_attn_cuda_sm90_one_tile", "flash_attn_cuda_deterministic",
         "fa3_ref")
# flash_attn_cuda_sm80 / _sm90: ours with the family forced (FLASH_ATTN_CUDA_FAMILY around each forward and
# backward call), to compare the families in one run; flash_attn_cuda runs the default (auto) pick.
# flash_attn_cuda_smem163 / _smem99: ours under FLASH_ATTN_CUDA_SMEM_BUDGET=163 / 99 around every timed
# call (forward and backward): the tiles A100 / sm86-sm89 run, timed on this GPU as a stand-in.
# flash_attn_cuda_sm90_persistent / _sm90_one_tile: the sm90 family with its persistent forward kernel (one
# CTA per SM, the default build's) / its one-CTA-per-tile kernel (FLASH_ATTN_CUDA_SM90_PERSISTENT_CTAS=sms / 0
# around each call; a build that left that kernel out (FLASH_ATTN_CUDA_SM90_PERSISTENT=0 / 1) raises; both
# builds with FLASH_ATTN_CUDA_SM90_PERSISTENT=both).
# Asked for by name (--impls); the default list leaves them out.
SMEM_IMPLS = {"flash_attn_cuda_smem163": "163", "flash_attn_cuda_smem99": "99"}  # impl -> budget (KB)
PERSISTENT_IMPLS = {"flash_attn_cuda_sm90_persistent": "sms",  # impl -> FLASH_ATTN_CUDA_SM90_PERSISTENT_CTAS
                    "flash_attn_cuda_sm90_one_tile": "0"}
# flash_attn_cuda_deterministic: ours (default family) with deterministic=True (bit-identical gradients).
OPT_IN_IMPLS = ("flash_attn_cuda_deterministic",)
# fa3_ref: FlashAttention-3's sm90 forward and backward (Dao-AILab/flash-attention hopper/, bf16, d 64/128/256)
# from the library scripts/fa3_ref/build.sh makes, named by $FLASH_ATTN_CUDA_BENCH_FA3_LIB; a reference
# competitor in our layout (a library built with BWD=0 is forward only: its bwd rows carry an error), checked
# once per (head dim, causal, direction) against the float32 reference before its first timed call.
EXTERNAL_IMPLS = ("fa3_ref",)
FA3_LIB_ENV = "FLASH_ATTN_CUDA_BENCH_FA3_LIB"
DEFAULT_IMPLS = tuple(i for i in IMPLS if i not in SMEM_IMPLS and i not in PERSISTENT_IMPLS and i not in OPT_IN_IMPLS
                      and i not in EXTERNAL_IMPLS)
DIRECTIONS = ("fwd", "bwd")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
SHAPE_COLUMNS = ["impl", "dtype", "hdim", "seqlen", "causal", "batch", "nheads"]
COLUMNS = {"fwd": SHAPE_COLUMNS + ["fwd_ms", "fwd_tflops"],
           "bwd": SHAPE_COLUMNS + ["fwd_ms", "fwdbwd_ms", "bwd_ms", "bwd_tflops", "fwdbwd_tflops"]}
# The TFLOP/s columns of each direction, and their names in tables and plot titles.
METRICS = {"fwd": ("fwd_tflops",), "bwd": ("bwd_tflops", "fwdbwd_tflops")}
METRIC_NAMES = {"fwd_tflops": "forward", "bwd_tflops": "backward", "fwdbwd_tflops": "fwd+bwd"}
# FLOPs of each pass as a multiple of the forward's (FA2 paper: the backward does 2.5x).
FLOP_FACTORS = {"fwd": 1.0, "bwd": 2.5, "fwdbwd": 3.5}
GRID_HDIMS, GRID_SEQLENS = "64,128,256", "512,1024,2048,4096,8192,16384"
MEMORY_IMPLS = ("flash_attn_cuda", "sdpa_flash")
MEMORY_BATCH, MEMORY_NHEADS, MEMORY_SEQLEN, MEMORY_HDIM = 1, 16, 16384, 128
MIB = 2 ** 20

Row = Dict[str, object]
Results = Dict[str, List[Row]]  # direction -> rows


def attention_flops(batch: int, seqlen: int, nheads: int, hdim: int, causal: bool,
                    direction: str = "fwd") -> float:
    """FLOPs of one pass of attention; direction: 'fwd', 'bwd' or 'fwdbwd'."""
    flops = FLOP_FACTORS[direction] * 4.0 * batch * seqlen * seqlen * nheads * hdim
    return flops / 2 if causal else flops


def time_cuda(fn: Callable[[int], object], n_inputs: int, warmup_ms: float = 50.0, rep_ms: float = 300.0,
              min_reps: int = 10, max_reps: int = 200) -> float:
    """Median milliseconds of fn(i), i cycling over n_inputs input sets, timed with CUDA events."""
    for i in range(3):
        fn(i % n_inputs)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn(0)
    end.record()
    end.synchronize()
    estimate = max(start.elapsed_time(end), 1e-3)
    for i in range(int(warmup_ms / estimate)):
        fn(i % n_inputs)
    reps = max(min_reps, min(max_reps, int(rep_ms / estimate)))
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for i, (s, e) in enumerate(events):
        s.record()
        fn(i % n_inputs)
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events)


# ---- what is timed -------------------------------------------------------------------------------

# Attention dropout probability of every timed call (--dropout): ours and SDPA's backends alike
# (sdpa_cudnn / sdpa_efficient take it too); 0 = none. Dropout draws from the CUDA generator per call.
DROPOUT_P = 0.0


def _sdpa_backend(name: str):
    from torch.nn.attention import SDPBackend
    return {"sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
            "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION}[name]


def sdpa_fn(impl: str, causal: bool, gqa: str = "", bias: Optional[torch.Tensor] = None
            ) -> Callable[..., torch.Tensor]:
    """impl's SDPA backend on (batch, nheads*, seqlen, d) q, k, v. gqa: '' (as many K/V heads as q
    heads), 'enable_gqa', or 'expand' (K/V heads repeated inside the call); bias: additive mask or None."""
    from torch.nn.attention import sdpa_kernel
    backend = _sdpa_backend(impl)
    extra = {"enable_gqa": True} if gqa == "enable_gqa" else {}  # torch < 2.5 has no enable_gqa

    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if gqa == "expand":
            group = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # (batch, nheads, seqlen, d)
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=causal, dropout_p=DROPOUT_P,
                                                  **extra)
    return run


def attention_fn(impl: str, causal: bool) -> Callable[..., torch.Tensor]:
    """impl's attention on (q, k, v) in its native layout: (batch, seqlen, nheads, d) for
    flash_attn_cuda, (batch, nheads, seqlen, d) for SDPA's backends."""
    if impl == "flash_attn_cuda":
        from flash_attn_cuda import attention
        return lambda q, k, v: attention(q, k, v, DROPOUT_P, causal=causal)
    if impl == "flash_attn_cuda_deterministic":
        from flash_attn_cuda import attention
        return lambda q, k, v: attention(q, k, v, DROPOUT_P, causal=causal, deterministic=True)
    if impl in PERSISTENT_IMPLS:
        return with_env("FLASH_ATTN_CUDA_SM90_PERSISTENT_CTAS", PERSISTENT_IMPLS[impl],
                        forced_family(FAMILY_IMPLS[impl], attention_fn("flash_attn_cuda", causal)))
    if impl in FAMILY_IMPLS:
        return forced_family(FAMILY_IMPLS[impl], attention_fn("flash_attn_cuda", causal))
    if impl in SMEM_IMPLS:  # the budget wraps every timed call (make_fwd / make_bwd): the backward too
        return attention_fn("flash_attn_cuda", causal)
    if impl == "fa3_ref":
        return fa3_ref_fn(causal)
    return sdpa_fn(impl, causal)


_FA3: Dict[str, object] = {}  # "module": scripts/fa3_ref/fa3_ref.py with the library loaded; "checked": set


def _fa3_module():
    """scripts/fa3_ref/fa3_ref.py, imported by path, with $FLASH_ATTN_CUDA_BENCH_FA3_LIB loaded (once)."""
    if "module" not in _FA3:
        lib = os.environ.get(FA3_LIB_ENV)
        if not lib or not os.path.isfile(lib):
            raise RuntimeError(f"fa3_ref needs {FA3_LIB_ENV}=path of libfa3ref.so (scripts/fa3_ref/build.sh); "
                               f"got {lib!r}")
        import importlib.util
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "fa3_ref",
                            "fa3_ref.py")
        spec = importlib.util.spec_from_file_location("fa3_ref", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.load(lib)
        _FA3.update(module=module, checked=set())
    return _FA3["module"]


def _fa3_check(module, hdim: int, causal: bool, grads: bool) -> None:
    """FA3's output (and with grads, its dq / dk / dv for a random dout) against the float32 reference on
    small shapes (ragged, seqlen_q != seqlen_k, GQA): max abs error <= CHECK_EPS * eps(bf16) * max
    |reference| (bench_decode's gate), else RuntimeError."""
    from .bench_decode import CHECK_EPS  # bench_decode imports this module: here, not at the top
    from .reference import attention_ref
    gen = torch.Generator(device="cuda").manual_seed(hdim + causal)
    for b, sq, sk, h, hk in ((2, 300, 300, 4, 4), (1, 200, 457, 4, 2), (1, 1, 129, 2, 2)):
        q, k, v = (torch.randn((b, s, n, hdim), device="cuda", dtype=torch.bfloat16, generator=gen)
                   for s, n in ((sq, h), (sk, hk), (sk, hk)))
        checks = [("out", module.forward(q, k, v, causal), attention_ref(q, k, v, causal)[0])]
        if grads:
            dout = torch.randn(q.shape, device="cuda", dtype=torch.bfloat16, generator=gen)
            qkv = [t.detach().requires_grad_() for t in (q, k, v)]
            ref_qkv = [t.detach().float().requires_grad_() for t in (q, k, v)]
            got = torch.autograd.grad(module.attention(*qkv, causal), qkv, dout)
            ref = torch.autograd.grad(attention_ref(*ref_qkv, causal)[0], ref_qkv, dout.float())
            checks += list(zip(("dq", "dk", "dv"), got, ref))
        for name, value, ref in checks:
            err = (value.float() - ref).abs().max().item()
            if not err <= CHECK_EPS * torch.finfo(torch.bfloat16).eps * ref.abs().max().item():
                raise RuntimeError(f"fa3_ref: {name} max abs error {err:.3g} vs the float32 reference "
                                   f"(hdim {hdim}, causal {causal}, b {b}, sq {sq}, sk {sk}, h {h}/{hk})")


def fa3_ref_fn(causal: bool) -> Callable[..., torch.Tensor]:
    """FA3 (fa3_ref) on (batch, seqlen, nheads, d) q, k, v: its forward, differentiable through its
    backward when an input requires grad; no dropout."""
    module = _fa3_module()
    checked = _FA3["checked"]

    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if DROPOUT_P:
            raise NotImplementedError("fa3_ref has no dropout")
        grads = q.requires_grad or k.requires_grad or v.requires_grad
        if (q.shape[-1], causal, grads) not in checked:
            _fa3_check(module, q.shape[-1], causal, grads)
            checked.add((q.shape[-1], causal, grads))
        return module.attention(q, k, v, causal) if grads else module.forward(q, k, v, causal)
    return run


FAMILY_IMPLS = {"flash_attn_cuda_sm80": "sm80", "flash_attn_cuda_sm90": "sm90",  # impl -> forced FLASH_ATTN_CUDA_FAMILY
                "flash_attn_cuda_sm90_persistent": "sm90", "flash_attn_cuda_sm90_one_tile": "sm90"}


def is_ours(impl: str) -> bool:
    return impl == "flash_attn_cuda" or impl in FAMILY_IMPLS or impl in SMEM_IMPLS or impl in OPT_IN_IMPLS


def with_env(name: str, value: str, fn: Callable) -> Callable:
    """fn with environment variable name=value while it runs (the binding reads its knobs on every call)."""
    def run(*args):
        old = os.environ.get(name)
        os.environ[name] = value
        try:
            return fn(*args)
        finally:
            if old is None:
                del os.environ[name]
            else:
                os.environ[name] = old
    return run


def forced_family(family: str, fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """fn with FLASH_ATTN_CUDA_FAMILY=family while it runs (the binding reads it on every forward call)."""
    return with_env("FLASH_ATTN_CUDA_FAMILY", family, fn)


def under_budget(impl: str, fn: Callable) -> Callable:
    """fn under impl's FLASH_ATTN_CUDA_SMEM_BUDGET (SMEM_IMPLS); fn itself for every other impl."""
    return with_env("FLASH_ATTN_CUDA_SMEM_BUDGET", SMEM_IMPLS[impl], fn) if impl in SMEM_IMPLS else fn


def to_native(impl: str, inputs: List[tuple]) -> List[tuple]:
    """Input sets of (batch, seqlen, nheads, d) tensors in impl's layout: as they are for
    flash_attn_cuda, contiguous (batch, nheads, seqlen, d) copies for SDPA (made here, untimed)."""
    if is_ours(impl) or impl in EXTERNAL_IMPLS:
        return inputs
    return [tuple(t.transpose(1, 2).contiguous() for t in ts) for ts in inputs]


def make_fwd(impl: str, inputs: List[tuple], causal: bool,
             attn: Optional[Callable[..., torch.Tensor]] = None) -> Callable[[int], object]:
    """A callable running one forward of impl on inputs[i] = (q, k, v), each (batch, seqlen, nheads, d);
    attn: what to run in impl's layout instead of attention_fn(impl, causal)."""
    attn, native = attn or attention_fn(impl, causal), to_native(impl, inputs)
    return under_budget(impl, lambda i: attn(*native[i]))


def make_bwd(impl: str, inputs: List[tuple], causal: bool,
             attn: Optional[Callable[..., torch.Tensor]] = None) -> Dict[str, Callable[[int], object]]:
    """Callables over inputs[i] = (q, k, v, dout), each (batch, seqlen, nheads, d), with q, k, v
    requiring grad: 'fwd' the forward, 'bwd' the backward alone (of a graph built here by one
    forward per set and kept), 'fwdbwd' forward + backward. Each returns what it computed.
    attn: as in make_fwd."""
    attn, native = attn or attention_fn(impl, causal), to_native(impl, inputs)
    leaves = [tuple(t.requires_grad_() for t in ts[:3]) for ts in native]
    douts = [ts[3] for ts in native]
    outs = [under_budget(impl, attn)(*qkv) for qkv in leaves]
    fns = {"fwd": lambda i: attn(*leaves[i]),
           "bwd": lambda i: torch.autograd.grad(outs[i], leaves[i], douts[i], retain_graph=True),
           "fwdbwd": lambda i: torch.autograd.grad(attn(*leaves[i]), leaves[i], douts[i])}
    # The family knob around the backward too (it reads FLASH_ATTN_CUDA_FAMILY when autograd calls it).
    family = FAMILY_IMPLS.get(impl)
    return {name: under_budget(impl, forced_family(family, fn) if family else fn) for name, fn in fns.items()}


def _check_backward(impl: str) -> None:
    """Raise (as a backend would) when impl has no backward in this build."""
    if impl == "fa3_ref" and not hasattr(_fa3_module()._lib, "fa3ref_bwd"):
        raise NotImplementedError(f"{impl}: this library is forward only (scripts/fa3_ref/build.sh BWD=0)")
    if is_ours(impl):
        from flash_attn_cuda._ops import HAS_BACKWARD, require_extension
        require_extension()
        if not HAS_BACKWARD:
            raise NotImplementedError("this flash_attn_cuda build has no backward "
                                      "(flash_attn_cuda._ops.HAS_BACKWARD is False; see FLASH_ATTN_CUDA_BACKWARD)")


# ---- one grid point ------------------------------------------------------------------------------

def grid_shape(seqlen: int, hdim: int, tokens: int, hidden: int) -> Tuple[int, int]:
    """(batch, nheads) of a grid point: batch * seqlen = tokens, nheads * hdim = hidden."""
    return max(1, tokens // seqlen), hidden // hdim


def n_input_sets(set_bytes: int) -> int:
    """How many input sets to rotate over: enough that they do not fit twice in L2, at most 8."""
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    return min(8, max(1, math.ceil(2 * l2 / set_bytes)))


def random_inputs(shape: Tuple[int, ...], dtype: torch.dtype, n_tensors: int, n_sets: int,
                  seed: int) -> List[tuple]:
    """n_sets tuples of n_tensors standard-normal CUDA tensors of this shape."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return [tuple(torch.randn(shape, device="cuda", dtype=dtype, generator=gen) for _ in range(n_tensors))
            for _ in range(n_sets)]


def point_row(direction: str, impl: str, dtype: torch.dtype, hdim: int, seqlen: int, causal: bool,
              batch: int, nheads: int) -> Row:
    """A row of direction's CSV columns, measurements empty."""
    row: Row = {"impl": impl, "dtype": str(dtype).replace("torch.", ""), "hdim": hdim, "seqlen": seqlen,
                "causal": causal, "batch": batch, "nheads": nheads}
    row.update({column: "" for column in COLUMNS[direction][len(SHAPE_COLUMNS):]})
    return row


def record(row: Row, name: str, ms: float) -> None:
    """Put pass `name` ('fwd', 'bwd', 'fwdbwd') taking ms into row: its _ms and, if row has one, _tflops."""
    row[f"{name}_ms"] = round(ms, 4)
    if f"{name}_tflops" in row:
        flops = attention_flops(row["batch"], row["seqlen"], row["nheads"], row["hdim"], row["causal"], name)
        row[f"{name}_tflops"] = round(flops / (ms * 1e-3) / 1e12, 1)


PASSES = ("fwd", "bwd", "fwdbwd")  # what a row can time: its {pass}_ms columns


def measure_fwd(row: Row, impl: str, inputs: List[tuple], causal: bool) -> None:
    """Time impl's forward over inputs (q, k, v sets) into row."""
    record(row, "fwd", time_cuda(make_fwd(impl, inputs, causal), len(inputs)))


def measure_bwd(row: Row, impl: str, inputs: List[tuple], causal: bool) -> None:
    """Time impl's forward, backward and fwd+bwd over inputs (q, k, v, dout sets) into row."""
    _check_backward(impl)
    fns = make_bwd(impl, inputs, causal)
    for name in PASSES:
        record(row, name, time_cuda(fns[name], len(inputs)))


MEASURE = {"fwd": measure_fwd, "bwd": measure_bwd}
N_TENSORS = {"fwd": 3, "bwd": 4}  # q, k, v (+ dout)


def _first_line(e: Exception) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:200]


def bench_point(direction: str, impl: str, dtype: torch.dtype, hdim: int, seqlen: int, causal: bool,
                tokens: int, hidden: int) -> Row:
    """direction's row for one grid point. When the backend fails (unsupported shape, OOM, no
    backward in this build) the row keeps what was measured and says why under 'error'."""
    batch, nheads = grid_shape(seqlen, hdim, tokens, hidden)
    row = point_row(direction, impl, dtype, hdim, seqlen, causal, batch, nheads)
    shape = (batch, seqlen, nheads, hdim)
    n_sets = n_input_sets(N_TENSORS[direction] * math.prod(shape) * dtype.itemsize)
    inputs = random_inputs(shape, dtype, N_TENSORS[direction], n_sets, seed=seqlen + hdim)
    try:
        MEASURE[direction](row, impl, inputs, causal)
    except (RuntimeError, ValueError) as e:  # NotImplementedError and OOM are RuntimeErrors
        row["error"] = _first_line(e)
    finally:
        del inputs
        torch.cuda.empty_cache()
    return row


# ---- peak memory ---------------------------------------------------------------------------------

def fwdbwd_peak_bytes(impl: str, shape: Tuple[int, int, int, int], dtype: torch.dtype, causal: bool) -> int:
    """Peak bytes allocated during one fwd+bwd of impl on q, k, v, dout of this (native) shape,
    the inputs included."""
    _check_backward(impl)
    q, k, v = (torch.randn(shape, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
    dout = torch.randn(shape, device="cuda", dtype=dtype)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()  # holds q, k, v, dout
    torch.cuda.reset_peak_memory_stats()
    out = attention_fn(impl, causal)(q, k, v)
    torch.autograd.grad(out, (q, k, v), dout)  # dq, dk, dv: allocated, so counted in the peak
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before + 4 * q.nelement() * q.element_size()


def measure_memory(impl: str, dtype: torch.dtype, hdim: int, seqlen: int, causal: bool) -> Row:
    """impl's peak bytes of one fwd+bwd at (MEMORY_BATCH, seqlen, MEMORY_NHEADS, hdim) next to the
    essential bytes: q, k, v, dout, out, dq, dk, dv and the float32 LSE (batch, nheads, seqlen)."""
    batch, nheads = MEMORY_BATCH, MEMORY_NHEADS
    shape = (batch, seqlen, nheads, hdim) if is_ours(impl) else (batch, nheads, seqlen, hdim)
    essential = 8 * math.prod(shape) * dtype.itemsize + 4 * batch * nheads * seqlen
    row: Row = {"impl": impl, "peak_bytes": "", "essential_bytes": essential}
    try:
        row["peak_bytes"] = fwdbwd_peak_bytes(impl, shape, dtype, causal)
    except (RuntimeError, ValueError) as e:
        row["error"] = _first_line(e)
    finally:
        torch.cuda.empty_cache()
    return row


def memory_lines(row: Row) -> List[str]:
    """One printed line per quantity of a measure_memory row, in MiB."""
    impl = row["impl"]
    if row.get("error"):
        return [f"{impl}: {row['error']}"]
    peak, essential = row["peak_bytes"], row["essential_bytes"]
    return [f"{impl}: peak memory of fwd+bwd: {peak / MIB:.1f} MiB",
            f"{impl}: essential (q, k, v, dout, out, lse, dq, dk, dv): {essential / MIB:.1f} MiB",
            f"{impl}: peak / essential: {peak / essential:.2f}"]


def memory_md(rows: List[Row], shape_text: str) -> str:
    """The --memory section of NAME.md: one table line per impl."""
    lines = [f"## peak memory of one fwd+bwd ({shape_text})", "",
             "essential = q, k, v, dout, out, dq, dk, dv + float32 LSE", "",
             "| impl | peak MiB | essential MiB | peak / essential |", "|---|---|---|---|"]
    for r in rows:
        essential = r["essential_bytes"] / MIB
        if r.get("error"):
            lines.append(f"| {r['impl']} | n/a ({r['error']}) | {essential:.1f} | n/a |")
        else:
            peak = r["peak_bytes"] / MIB
            lines.append(f"| {r['impl']} | {peak:.1f} | {essential:.1f} | {peak / essential:.2f} |")
    return "\n".join(lines) + "\n"


# ---- tables, plots, files ------------------------------------------------------------------------

def markdown_table(rows: List[Row], impls: List[str], metric: str = "fwd_tflops") -> str:
    """One line per (hdim, causal, seqlen): each impl's metric (TFLOP/s) and ours over each other impl."""
    others = [i for i in impls if i != "flash_attn_cuda"]
    head = ["hdim", "causal", "seqlen"] + impls + [f"ours/{o}" for o in others]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    keys = sorted({(r["hdim"], r["causal"], r["seqlen"]) for r in rows})
    for key in keys:
        by_impl = {r["impl"]: r[metric] for r in rows if (r["hdim"], r["causal"], r["seqlen"]) == key}
        cells = [str(key[0]), str(key[1]), str(key[2])] + [str(by_impl.get(i, "")) or "n/a" for i in impls]
        ours = by_impl.get("flash_attn_cuda")
        for o in others:
            theirs = by_impl.get(o)
            cells.append(f"{ours / theirs:.2f}" if isinstance(ours, float) and isinstance(theirs, float) else "n/a")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(rows: List[Row], impls: List[str], path: str, title: str, metric: str = "fwd_tflops") -> None:
    """FA2-paper style: one panel per (mask, hdim), bars of metric (TFLOP/s) per implementation over seqlen."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    hdims = sorted({r["hdim"] for r in rows})
    causals = sorted({r["causal"] for r in rows})
    fig, axes = plt.subplots(len(causals), len(hdims), figsize=(4.6 * len(hdims), 3.4 * len(causals)),
                             squeeze=False)
    for row_i, causal in enumerate(causals):
        for col_i, hdim in enumerate(hdims):
            ax = axes[row_i][col_i]
            seqlens = sorted({r["seqlen"] for r in rows if r["hdim"] == hdim and r["causal"] == causal})
            width = 0.8 / len(impls)
            for j, impl in enumerate(impls):
                vals = []
                for s in seqlens:
                    match = [r[metric] for r in rows
                             if (r["impl"], r["hdim"], r["causal"], r["seqlen"]) == (impl, hdim, causal, s)]
                    vals.append(match[0] if match and isinstance(match[0], float) else 0.0)
                xs = [x + (j - (len(impls) - 1) / 2) * width for x in range(len(seqlens))]
                ax.bar(xs, vals, width, label=impl)
            ax.set_xticks(range(len(seqlens)), [f"{s // 1024}k" if s >= 1024 else str(s) for s in seqlens])
            ax.set_title(f"head dim {hdim}, {'causal' if causal else 'non-causal'}", fontsize=10)
            ax.set_xlabel("seqlen")
            ax.set_ylabel(f"{METRIC_NAMES[metric]} TFLOP/s")
            ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def csv_direction(columns: Sequence[str]) -> str:
    """'fwd' or 'bwd': which direction's rows a CSV with these columns holds."""
    for direction in DIRECTIONS:
        if set(COLUMNS[direction]) <= set(columns):
            return direction
    raise ValueError(f"not a benchmark CSV: expected the columns {COLUMNS['fwd']} or {COLUMNS['bwd']}, "
                     f"got {list(columns)}")


def read_csv(path: str) -> Tuple[str, List[Row]]:
    """(direction, rows) of a results CSV, the direction told by its columns; numbers and booleans
    restored (for --replot)."""
    with open(path) as f:
        reader = csv.DictReader(f)
        direction = csv_direction(reader.fieldnames or [])
        rows = []
        for r in reader:
            row: Row = dict(r)
            for key in ("hdim", "seqlen", "batch", "nheads"):
                row[key] = int(r[key])
            row["causal"] = r["causal"] == "True"
            for key in COLUMNS[direction][len(SHAPE_COLUMNS):]:
                row[key] = float(r[key]) if r[key] else ""
            rows.append(row)
    return direction, rows


def write_csv(path: str, rows: List[Row], columns: List[str]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


@dataclasses.dataclass
class Outputs:
    """Where one set of result files goes; a file not named is not written."""
    directions: Tuple[str, ...]  # the directions these files hold
    md: Optional[str] = None
    csv: Dict[str, str] = dataclasses.field(default_factory=dict)  # direction -> path
    png: Dict[str, str] = dataclasses.field(default_factory=dict)  # metric -> path


def out_files(out_dir: str, prefix: str, directions: Sequence[str]) -> Outputs:
    """--out DIR --prefix NAME: DIR/NAME.md, DIR/NAME_<direction>.csv and DIR/NAME_<pass>.png for
    each TFLOP/s metric (pass fwd, bwd, fwdbwd)."""
    metrics = [m for d in directions for m in METRICS[d]]
    return Outputs(tuple(directions), md=os.path.join(out_dir, f"{prefix}.md"),
                   csv={d: os.path.join(out_dir, f"{prefix}_{d}.csv") for d in directions},
                   png={m: os.path.join(out_dir, f"{prefix}_{m.removesuffix('_tflops')}.png") for m in metrics})


@dataclasses.dataclass
class Report:
    """What the md files and plots say about a set of results."""
    results: Results
    impls: List[str]
    preamble: str  # a run's md header, above its tables; "" for a replot
    caption: str   # after "<metric> TFLOP/s" in plot titles (and a replot's table headings)

    def md(self, directions: Sequence[str]) -> str:
        """The tables of these directions' metrics, each under its heading."""
        heading = "## {name} TFLOP/s" if self.preamble else "# {name} TFLOP/s" + self.caption
        sections = [f"{heading.format(name=METRIC_NAMES[m])}\n\n{markdown_table(rows, self.impls, m)}\n"
                    for d, rows in self.results.items() if d in directions for m in METRICS[d]]
        return "\n".join(([self.preamble] if self.preamble else []) + sections)

    def plot_title(self, metric: str) -> str:
        return f"{METRIC_NAMES[metric]} TFLOP/s{self.caption}"


def write_outputs(report: Report, files: Outputs) -> None:
    for direction, path in files.csv.items():
        write_csv(path, report.results[direction], COLUMNS[direction])
    if files.md:
        with open(files.md, "w") as f:
            f.write(report.md(files.directions))
    for metric, path in files.png.items():
        direction = next(d for d in DIRECTIONS if metric in METRICS[d])
        plot(report.results[direction], report.impls, path, report.plot_title(metric), metric)


# Vendor and brand words left out of file names: 'NVIDIA GeForce RTX 4090' -> 'rtx_4090'.
_GPU_NAME_NOISE = ("nvidia", "geforce", "tesla")


def gpu_slug(name: str) -> str:
    """A file-name prefix from a GPU's name (torch.cuda.get_device_name): lower case, vendor words
    dropped, the rest joined by '_'. 'NVIDIA H200' -> 'h200', 'NVIDIA A100-SXM4-80GB' ->
    'a100_sxm4_80gb', 'NVIDIA GeForce RTX 4090' -> 'rtx_4090'; 'gpu' if nothing is left."""
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w and w not in _GPU_NAME_NOISE]
    return "_".join(words) or "gpu"


@dataclasses.dataclass
class RunInfo:
    """A run's command line, date, torch version, GPU and dtype, for md headers and plot titles."""
    command: str
    date: str
    torch: str
    gpu: str
    dtype: str

    @classmethod
    def current(cls, argv: Optional[List[str]], dtype: str, prog: str = "python -m flash_attn_cuda.bench") -> "RunInfo":
        args = sys.argv[1:] if argv is None else argv
        return cls(command=f"{prog} {shlex.join(args)}".rstrip(),
                   date=datetime.date.today().isoformat(), torch=torch.__version__,
                   gpu=torch.cuda.get_device_name(0), dtype=dtype)

    def md_header(self, title: str = "flash_attn_cuda vs PyTorch SDPA backends") -> str:
        return (f"# {title}\n\n- command: `{self.command}`\n"
                f"- date: {self.date}\n- torch: {self.torch}\n- GPU: {self.gpu}\n- dtype: {self.dtype}\n")

    def caption(self) -> str:
        return f", {self.dtype}, {self.gpu}, torch {self.torch}, {self.date}\n{self.command}"


# ---- command line --------------------------------------------------------------------------------

def _int_list(p: argparse.ArgumentParser, text: str, option: str) -> List[int]:
    try:
        return [int(x) for x in text.split(",") if x]
    except ValueError:
        p.error(f"{option}: expected comma-separated integers, got {text!r}")


def _directions(p: argparse.ArgumentParser, text: str) -> List[str]:
    given = [x for x in text.split(",") if x]
    bad = [x for x in given if x not in DIRECTIONS]
    if bad or not given:
        p.error(f"--directions: expected a comma list from {','.join(DIRECTIONS)}, got {text!r}")
    return [d for d in DIRECTIONS if d in given]


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m flash_attn_cuda.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--directions", default="fwd,bwd", help="comma list from fwd,bwd (default fwd,bwd)")
    p.add_argument("--hdims", help=f"head dims (default {GRID_HDIMS}; --memory: {MEMORY_HDIM})")
    p.add_argument("--seqlens", help=f"default {GRID_SEQLENS}; --memory: {MEMORY_SEQLEN}")
    p.add_argument("--causal", default="both", choices=["both", "0", "1"], help="--memory: both means 0")
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--dropout", type=float, default=0.0, metavar="P",
                   help="attention dropout probability of every timed call, ours and SDPA's (default 0)")
    p.add_argument("--impls", default=",".join(DEFAULT_IMPLS),
                   help=f"subset of {','.join(IMPLS)} (default: all but {','.join(i for i in IMPLS if i not in DEFAULT_IMPLS)})")
    p.add_argument("--order", default="abba", choices=["abba", "ab"],
                   help="abba (default): each point measured twice, impls in order then reversed, times averaged; "
                        "ab: once, in --impls order")
    p.add_argument("--tokens", type=int, default=16384, help="batch * seqlen (default 16k)")
    p.add_argument("--hidden", type=int, default=2048, help="nheads * headdim (default 2048)")
    p.add_argument("--out", metavar="DIR", help="write NAME_fwd.csv, NAME_bwd.csv, NAME.md, NAME_*.png here")
    p.add_argument("--prefix", metavar="NAME",
                   help="file name prefix for --out (default: the GPU's name, e.g. h200; --memory: h200_memory; "
                        "--replot: results)")
    p.add_argument("--csv", help="write the forward rows here")
    p.add_argument("--md", help="write the forward summary table (markdown) here")
    p.add_argument("--plot", help="write a PNG plot of the forward here")
    p.add_argument("--memory", action="store_true",
                   help="measure the peak memory of one fwd+bwd instead of the grid (report in --out's NAME.md)")
    p.add_argument("--replot", nargs="+", metavar="CSV",
                   help="only redraw --md/--plot or --out's md and PNGs from earlier CSVs; no GPU. "
                        "--plot: forward TFLOP/s, or backward TFLOP/s when no forward CSV is given")
    p.add_argument("--title", help="title for --replot (e.g. the GPU, torch version and date of the run)")
    args = p.parse_args(argv)
    if not 0.0 <= args.dropout < 1.0:
        p.error(f"--dropout must be in [0, 1), got {args.dropout}")
    args.directions = _directions(p, args.directions)
    args.hdims = _int_list(p, args.hdims or (str(MEMORY_HDIM) if args.memory else GRID_HDIMS), "--hdims")
    args.seqlens = _int_list(p, args.seqlens or (str(MEMORY_SEQLEN) if args.memory else GRID_SEQLENS), "--seqlens")
    args.causals = [False, True] if args.causal == "both" else [args.causal == "1"]
    args.impls = [x for x in args.impls.split(",") if x]
    bad = [x for x in args.impls if x not in IMPLS]
    if bad:
        p.error(f"unknown impls {bad}; choose from {IMPLS}")
    if "fa3_ref" in args.impls and not os.path.isfile(os.environ.get(FA3_LIB_ENV, "")):
        p.error(f"--impls fa3_ref needs {FA3_LIB_ENV}=path of libfa3ref.so (scripts/fa3_ref/build.sh)")
    forward_files = args.csv or args.md or args.plot
    if args.memory and forward_files:
        p.error("--memory writes its report to --out DIR (NAME.md); --csv/--md/--plot are the grid's")
    if not args.replot and not args.memory and forward_files and "fwd" not in args.directions:
        p.error("--csv/--md/--plot are the forward's files: add fwd to --directions, or use --out")
    return args


def _progress(items: List, desc: str) -> Iterable:
    try:
        from tqdm import tqdm
    except ImportError:
        return items
    return tqdm(items, desc=desc, file=sys.stderr)


def _needs_matplotlib(args: argparse.Namespace) -> bool:
    return bool(args.plot or (args.out and not args.memory))


def replot(args: argparse.Namespace) -> int:
    """--replot: tables and plots of earlier CSVs, no GPU."""
    results: Results = {}
    try:
        for path in args.replot:
            direction, rows = read_csv(path)
            results.setdefault(direction, []).extend(rows)
    except ValueError as e:
        print(f"flash_attn_cuda.bench: {path}: {e}", file=sys.stderr)
        return 2
    results = {d: results[d] for d in DIRECTIONS if d in results}
    directions = tuple(results)
    impls = [i for i in IMPLS if any(r["impl"] == i for rows in results.values() for r in rows)]
    caption = f", {args.title}" if args.title else f" from {', '.join(args.replot)}"
    report = Report(results, impls, preamble="", caption=caption)
    files = [Outputs(directions, md=args.md, png={METRICS[directions[0]][0]: args.plot} if args.plot else {})]
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        files.append(dataclasses.replace(out_files(args.out, args.prefix or "results", directions), csv={}))
    for f in files:
        write_outputs(report, f)
    return 0


def round_times(rows: List[Row]) -> Dict[str, List[float]]:
    """Pass -> its ms in each of one impl's rounds at a grid point, for the passes every round timed."""
    return {name: [r[f"{name}_ms"] for r in rows] for name in PASSES
            if all(isinstance(r.get(f"{name}_ms"), float) for r in rows)}


def merge_rounds(rows: List[Row]) -> Row:
    """One row from one impl's rounds at a grid point: every pass's ms averaged (TFLOP/s recomputed); a
    round that failed makes the merged row the failed one."""
    failed = [r for r in rows if r.get("error")]
    if failed or len(rows) == 1:
        return (failed or rows)[0]
    merged = dict(rows[0])
    for name, times in round_times(rows).items():
        record(merged, name, statistics.fmean(times))
    return merged


def impl_rounds(impls: Sequence[str], order: str) -> List[str]:
    """The impls in the order one grid point measures them: 'abba' = as given then reversed, 'ab' = once."""
    return list(impls) + (list(reversed(impls)) if order == "abba" else [])


def measure_grid(args: argparse.Namespace) -> Results:
    """Every (direction, hdim, causal, seqlen) point, each impl measured per --order: direction -> rows."""
    dtype = DTYPES[args.dtype]
    points = [(d, h, c, s) for d in args.directions for h in args.hdims for c in args.causals for s in args.seqlens]
    results: Results = {d: [] for d in args.directions}
    for direction, hdim, causal, seqlen in _progress(points, "bench"):
        rounds: Dict[str, List[Row]] = {impl: [] for impl in args.impls}
        for impl in impl_rounds(args.impls, args.order):
            rounds[impl].append(bench_point(direction, impl, dtype, hdim, seqlen, causal, args.tokens, args.hidden))
        for impl in args.impls:
            row = merge_rounds(rounds[impl])
            results[direction].append(row)
            if row.get("error"):
                print(f"  {direction} {impl} hdim={hdim} seqlen={seqlen} causal={causal}: {row['error']}",
                      file=sys.stderr)
            elif len(rounds[impl]) > 1:
                print(f"  rounds {direction} {impl} hdim={hdim} seqlen={seqlen} causal={causal}: "
                      + "  ".join(f"{n}_ms {' / '.join(f'{t:.4f}' for t in ts)}"
                                  for n, ts in round_times(rounds[impl]).items()),
                      file=sys.stderr)
    return results


def run_grid(args: argparse.Namespace, info: RunInfo) -> int:
    """The grid measured (measure_grid); tables printed and written."""
    results = measure_grid(args)
    report = Report(results, args.impls, preamble=info.md_header(), caption=info.caption())
    print(f"\n{report.md(args.directions)}")
    files = [Outputs(("fwd",), md=args.md, csv={"fwd": args.csv} if args.csv else {},
                     png={"fwd_tflops": args.plot} if args.plot else {})]
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        files.append(out_files(args.out, args.prefix, args.directions))
    for f in files:
        write_outputs(report, f)
    return 0


def run_memory(args: argparse.Namespace, info: RunInfo) -> int:
    """--memory: peak memory of one fwd+bwd of MEMORY_IMPLS, printed and written to --out's NAME.md."""
    dtype = DTYPES[args.dtype]
    hdim, seqlen, causal = args.hdims[0], args.seqlens[0], args.causals[0]
    rows = [measure_memory(impl, dtype, hdim, seqlen, causal) for impl in _progress(list(MEMORY_IMPLS), "memory")]
    shape_text = (f"{args.dtype}, batch {MEMORY_BATCH}, seqlen {seqlen}, {MEMORY_NHEADS} heads, "
                  f"head dim {hdim}, {'causal' if causal else 'non-causal'}")
    print(f"\npeak memory of one fwd+bwd, {shape_text}")
    for row in rows:
        print("\n".join(memory_lines(row)))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(out_files(args.out, args.prefix, ()).md, "w") as f:
            f.write(f"{info.md_header()}\n{memory_md(rows, shape_text)}")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    if _needs_matplotlib(args) and not _have_matplotlib():
        print("flash_attn_cuda.bench: --plot and --out need matplotlib (pip install matplotlib)", file=sys.stderr)
        return 2
    if args.replot:
        return replot(args)
    if not torch.cuda.is_available():
        print("flash_attn_cuda.bench: no CUDA GPU found; the benchmark needs one.", file=sys.stderr)
        return 2
    info = RunInfo.current(argv, args.dtype)
    global DROPOUT_P
    DROPOUT_P = args.dropout
    if args.prefix is None:  # files named after the GPU that measured them
        args.prefix = gpu_slug(info.gpu) + ("_memory" if args.memory else "")
    return run_memory(args, info) if args.memory else run_grid(args, info)

if __name__ == "__main__":
    sys.exit(main())
