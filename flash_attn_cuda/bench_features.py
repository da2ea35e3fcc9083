"""Benchmark grouped-query attention (GQA) and packed variable-length (varlen) batches against
PyTorch SDPA's backends: forward and fwd+bwd TFLOP/s, timed as flash_attn_cuda.bench times.

    python -m flash_attn_cuda.bench_features --out benchmarks/results   # H200: h200_{gqa,varlen}.csv, h200_features.md
    python -m flash_attn_cuda.bench_features --benches gqa --seqlens 4096 --causal 1 --directions fwd
    python -m flash_attn_cuda.bench_features --benches varlen --varlen-maxlens 2048 --varlen-batch 32

GQA: q (batch, seqlen, 32, 128), k/v (batch, seqlen, 8, 128), batch * seqlen = 16k tokens.
flash_attn_cuda reads the 8 K/V heads as they are. Each SDPA backend is tried with
enable_gqa=True and, where it refuses, run on K/V heads expanded with repeat_interleave inside
the timed call (label "(expand)": users pay it). FLOPs count query heads: 4 * batch * seqlen^2 *
nheads * d (halved when causal); backward 2.5x, fwd+bwd 3.5x.

Varlen: --varlen-batch sequences of seeded random lengths in [max/4, max], packed (total, nheads,
d): flash_attn_cuda.attention_varlen against the batch padded to max, run by
flash_attn_cuda.attention and by SDPA's backends. Causal: padding sits after each sequence, so
real queries never see it and padded runs give the same result on real tokens. Non-causal: an
additive key-padding mask (batch, 1, 1, max) where the backend takes one ("(padded, mask)"),
else no mask ("(padded, no mask)": an upper bound on speed, not the same result). FLOPs count
real tokens only (visible pairs), so padding shows as lower TFLOP/s. Padded rows are timed
without the pad/unpad copies (fwd_ms) and with them (fwd_pad_ms: packed in, packed out; for SDPA
with the copies into its (batch, nheads, seqlen, d) layout). attention_varlen checks the
cu_seqlens values (one device-to-host copy) on its first call with a pair of cu_seqlens tensors,
in the warm-up, not in the timed calls: as in a model whose layers share them. fwd+bwd is timed
unless --directions is fwd or the build has no backward.

Before timing, each row's output on the first input set is checked against SDPA's (default
backend choice; per sequence for varlen, real tokens only): max abs error <= CHECK_EPS *
eps(dtype) * max |reference|, else the row is dropped with a message and the exit status is 1.
Rows a backend cannot run (no kernel, OOM) say why under 'error'; they do not fail the run.

Files: --out DIR --prefix NAME writes DIR/NAME_gqa.csv, DIR/NAME_varlen.csv, DIR/NAME_features.md.
NAME defaults to the GPU's name as a slug (flash_attn_cuda.bench.gpu_slug: 'NVIDIA H200' -> h200).
"""
from __future__ import annotations

import argparse
import itertools
import math
import os
import sys
from typing import Callable, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from .bench import (DTYPES, EXTERNAL_IMPLS, FAMILY_IMPLS, FLOP_FACTORS, OPT_IN_IMPLS, SMEM_IMPLS, Row, RunInfo,
                    _directions, _first_line, _int_list, _progress,
                    attention_fn, attention_flops, gpu_slug, make_bwd, make_fwd, n_input_sets, random_inputs,
                    sdpa_fn, time_cuda, write_csv)
from .bench import IMPLS as bench_impls

PROG = "python -m flash_attn_cuda.bench_features"
# GQA / varlen run the default family and tiles (not bench's fa3_ref)
IMPLS = tuple(i for i in bench_impls if i not in FAMILY_IMPLS and i not in SMEM_IMPLS and i not in OPT_IN_IMPLS
              and i not in EXTERNAL_IMPLS)
BENCHES = ("gqa", "varlen")
OURS = "flash_attn_cuda"
DEVICE = "cuda"  # where inputs are made (a CPU test runs the whole benchmark on "cpu" with stand-ins)
CHECK_EPS = 4  # a row passes when max |out - reference| <= CHECK_EPS * eps(dtype) * max |reference|
GQA_COLUMNS = ["impl", "dtype", "hdim", "nheads", "nheads_kv", "batch", "seqlen", "causal", "fwd_ms", "fwd_tflops",
               "bwd_ms", "bwd_tflops", "fwdbwd_ms", "fwdbwd_tflops", "max_err", "error"]
VARLEN_COLUMNS = ["impl", "same_result", "dtype", "hdim", "nheads", "batch", "max_seqlen", "total_tokens", "causal",
                  "fwd_ms", "fwd_tflops", "fwd_pad_ms", "fwd_pad_tflops", "fwdbwd_ms", "fwdbwd_tflops",
                  "fwdbwd_pad_ms", "fwdbwd_pad_tflops", "max_err", "error"]
METRIC_TITLES = {"fwd_tflops": "fwd", "fwd_pad_tflops": "fwd incl. pad", "bwd_tflops": "bwd",
                 "fwdbwd_tflops": "fwd+bwd", "fwdbwd_pad_tflops": "fwd+bwd incl. pad"}
Attn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
Candidate = Tuple[str, Attn, bool]  # (row label, attention in the impl's layout, same result as the reference)


# ---- FLOPs, lengths, padding (no GPU needed) -----------------------------------------------------

def causal_pairs(seqlen_q: int, seqlen_k: int) -> int:
    """(query, key) pairs visible under bottom-right causal masking: query i sees keys j <= i + seqlen_k - seqlen_q."""
    n = min(seqlen_q, seqlen_k)  # rows that see a key; they see seqlen_k - n + 1 .. seqlen_k keys
    return n * (2 * seqlen_k - n + 1) // 2


def varlen_flops(lengths_q: Sequence[int], lengths_k: Sequence[int], nheads: int, hdim: int, causal: bool,
                 direction: str = "fwd") -> float:
    """FLOPs of one pass over a packed batch, real tokens only; direction: 'fwd', 'bwd' or 'fwdbwd'."""
    pairs = sum(causal_pairs(sq, sk) if causal else sq * sk for sq, sk in zip(lengths_q, lengths_k))
    return FLOP_FACTORS[direction] * 4.0 * pairs * nheads * hdim


def random_lengths(batch: int, max_seqlen: int, seed: int) -> List[int]:
    """batch seeded sequence lengths, uniform in [max(1, max_seqlen // 4), max_seqlen]."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(max(1, max_seqlen // 4), max_seqlen + 1, (batch,), generator=gen).tolist()


def cu_seqlens(lengths: Sequence[int], device: torch.device | str = "cpu") -> torch.Tensor:
    """(batch + 1,) int32 prefix sums: sequence b is packed rows cu[b]:cu[b + 1]."""
    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device=device)


def pad_index(lengths: Sequence[int], max_seqlen: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """(total,) int64: each packed row's row in the padded batch seen as (batch * max_seqlen)."""
    return torch.cat([torch.arange(n) + b * max_seqlen for b, n in enumerate(lengths)]).to(device)


def pad(x: torch.Tensor, index: torch.Tensor, batch: int, max_seqlen: int) -> torch.Tensor:
    """(total, nheads, d) packed -> (batch, max_seqlen, nheads, d), zeros after each sequence (differentiable)."""
    flat = x.new_zeros((batch * max_seqlen, *x.shape[1:])).index_put((index,), x)  # (batch * max_seqlen, nheads, d)
    return flat.view(batch, max_seqlen, *x.shape[1:])


def unpad(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """(batch, max_seqlen, nheads, d) -> (total, nheads, d): the real tokens, packed."""
    return x.reshape(-1, *x.shape[2:])[index]


def key_padding_bias(lengths: Sequence[int], max_seqlen: int, dtype: torch.dtype,
                     device: torch.device | str = "cpu") -> torch.Tensor:
    """(batch, 1, 1, max_seqlen) additive SDPA mask: 0 on each sequence's keys, -inf on its padding."""
    real = torch.arange(max_seqlen, device=device) < torch.tensor(lengths, device=device)[:, None]  # (batch, max)
    bias = torch.zeros(real.shape, dtype=dtype, device=device).masked_fill(~real, float("-inf"))  # (batch, max)
    return bias[:, None, None, :]


# ---- what is run ---------------------------------------------------------------------------------

def in_bshd(layout: str, attn: Attn) -> Attn:
    """attn, run in impl `layout`'s native layout, as a function of (batch, seqlen, nheads*, d) tensors:
    for SDPA, contiguous (batch, nheads*, seqlen, d) copies in (as bench.to_native makes), the output
    transposed back."""
    if layout == OURS:
        return attn
    return lambda q, k, v: attn(*(t.transpose(1, 2).contiguous() for t in (q, k, v))).transpose(1, 2)


def sdpa_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """SDPA (default backend choice) on (batch, seqlen, nheads*, d) tensors, K/V heads expanded for GQA;
    returns (batch, seqlen, nheads, d)."""
    group = q.shape[2] // k.shape[2]
    k, v = (t.repeat_interleave(group, dim=2) for t in (k, v))  # (batch, seqlen, nheads, d)
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
    return out.transpose(1, 2)


def varlen_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: torch.Tensor, causal: bool) -> torch.Tensor:
    """SDPA per sequence of packed (total, nheads, d) tensors -> (total, nheads, d)."""
    bounds = cu.tolist()
    return torch.cat([sdpa_reference(q[None, a:b], k[None, a:b], v[None, a:b], causal)[0]
                      for a, b in zip(bounds, bounds[1:])])


def max_error(out: torch.Tensor, ref: torch.Tensor) -> Tuple[float, float]:
    """(max |out - ref|, the bound it must meet: CHECK_EPS * eps(ref's dtype) * max |ref|)."""
    err = (out.float() - ref.float()).abs().max().item()
    return err, CHECK_EPS * torch.finfo(ref.dtype).eps * ref.float().abs().max().item()


def probe(attn: Attn, inputs: tuple, with_grad: bool) -> torch.Tensor:
    """attn's output on inputs (q, k, v, dout); with_grad, through a backward too (so a backend that
    refuses either pass refuses here)."""
    q, k, v, dout = inputs
    if not with_grad:
        with torch.no_grad():
            return attn(q, k, v)
    leaves = tuple(t.detach().clone().requires_grad_() for t in (q, k, v))
    out = attn(*leaves)
    torch.autograd.grad(out, leaves, dout)
    return out.detach()


def pick(candidates: Sequence[Candidate], wrap: Callable[[Attn], Attn], inputs: tuple,
         with_grad: bool) -> Tuple[Candidate, torch.Tensor]:
    """The first candidate whose wrap(attn) runs on inputs (see probe), with that output."""
    for i, candidate in enumerate(candidates):
        try:
            return candidate, probe(wrap(candidate[1]), inputs, with_grad)
        except RuntimeError:
            if i + 1 == len(candidates):
                raise
    raise ValueError("no candidates")


def checked(row: Row, out: torch.Tensor, ref: torch.Tensor) -> bool:
    """Record out's max error against ref in row; False (and row['error']) on a mismatch."""
    err, bound = max_error(out, ref)
    row["max_err"] = f"{err:.2e}"
    if not err <= bound:  # NaN fails too
        row["error"] = f"mismatch: max abs error {err:.3e} > {bound:.3e} against SDPA; not timed"
    return not row.get("error")


def put(row: Row, name: str, ms: float, flops: float) -> None:
    row[f"{name}_ms"], row[f"{name}_tflops"] = round(ms, 4), round(flops / (ms * 1e-3) / 1e12, 1)


def measure(row: Row, layout: str, attn: Attn, sets: List[tuple], causal: bool, bwd_passes: Sequence[str],
            flops: Callable[[str], float], suffix: str = "") -> None:
    """Time attn (in impl `layout`'s layout) over sets of (q, k, v, dout) in (batch, seqlen, nheads*, d) or
    packed: the forward without grad, then bwd_passes ('bwd', 'fwdbwd') with q, k, v requiring grad."""
    put(row, "fwd" + suffix, time_cuda(make_fwd(layout, [s[:3] for s in sets], causal, attn), len(sets)), flops("fwd"))
    if bwd_passes:
        fns = make_bwd(layout, [tuple(t.clone() for t in s) for s in sets], causal, attn)
        for name in bwd_passes:
            put(row, name + suffix, time_cuda(fns[name], len(sets)), flops(name))


def run_row(row: Row, body: Callable[[Row], None], where: str) -> Row:
    """body(row), its failure (unsupported, OOM, mismatch) kept under row['error'] and printed."""
    try:
        body(row)
    except (RuntimeError, ValueError) as e:  # NotImplementedError and OOM are RuntimeErrors
        row["error"] = _first_line(e)
    finally:
        torch.cuda.empty_cache()
    if row.get("error"):
        print(f"  {where} {row['impl']}: {row['error']}", file=sys.stderr)
    return row


# ---- the two benchmarks --------------------------------------------------------------------------

def gqa_rows(args: argparse.Namespace, causal: bool, seqlen: int) -> List[Row]:
    """One row per impl at one (causal, seqlen) of the GQA benchmark."""
    dtype, hdim, nheads, nheads_kv = DTYPES[args.dtype], args.hdim, args.nheads, args.nheads_kv
    batch = max(1, args.tokens // seqlen)
    q_shape, kv_shape = (batch, seqlen, nheads, hdim), (batch, seqlen, nheads_kv, hdim)
    n_sets = n_input_sets(2 * (math.prod(q_shape) + math.prod(kv_shape)) * dtype.itemsize)
    qs = random_inputs(q_shape, dtype, 2, n_sets, seed=seqlen)       # (q, dout), each (batch, seqlen, nheads, d)
    kvs = random_inputs(kv_shape, dtype, 2, n_sets, seed=seqlen + 1)  # (k, v), each (batch, seqlen, nheads_kv, d)
    sets = [(q, k, v, dout) for (q, dout), (k, v) in zip(qs, kvs)]
    ref = sdpa_reference(*sets[0][:3], causal)  # (batch, seqlen, nheads, d)
    passes = ("bwd", "fwdbwd") if "bwd" in args.directions else ()
    flops = lambda direction: attention_flops(batch, seqlen, nheads, hdim, causal, direction)  # noqa: E731
    rows = []
    for impl in args.impls:
        candidates = ([(impl, attention_fn(impl, causal), True)] if impl == OURS else
                      [(impl, sdpa_fn(impl, causal, "enable_gqa"), True),
                       (f"{impl}(expand)", sdpa_fn(impl, causal, "expand"), True)])

        def body(row: Row, impl: str = impl, candidates: list = candidates) -> None:
            (row["impl"], attn, _), out = pick(candidates, lambda a: in_bshd(impl, a), sets[0], bool(passes))
            if checked(row, out, ref):
                measure(row, impl, attn, sets, causal, passes, flops)
        row = {"impl": impl, "dtype": args.dtype_name, "hdim": hdim, "nheads": nheads, "nheads_kv": nheads_kv,
               "batch": batch, "seqlen": seqlen, "causal": causal}
        rows.append(run_row(row, body, f"gqa seqlen={seqlen} causal={causal}"))
    return rows


def varlen_rows(args: argparse.Namespace, causal: bool, max_seqlen: int, bwd: bool) -> List[Row]:
    """The rows of one (causal, max_seqlen) of the varlen benchmark: ours on the packed batch, then
    each impl on the padded batch."""
    from flash_attn_cuda import attention_varlen
    dtype, hdim, nheads, batch = DTYPES[args.dtype], args.hdim, args.varlen_nheads, args.varlen_batch
    lengths = random_lengths(batch, max_seqlen, args.seed + max_seqlen)
    total = sum(lengths)
    cu = cu_seqlens(lengths, DEVICE)                # (batch + 1,) int32
    index = pad_index(lengths, max_seqlen, DEVICE)  # (total,)
    n_sets = n_input_sets(4 * total * nheads * hdim * dtype.itemsize)
    sets = random_inputs((total, nheads, hdim), dtype, 4, n_sets, seed=max_seqlen)  # (q, k, v, dout) (total, nheads, d)

    def to_pad(t: torch.Tensor) -> torch.Tensor:  # (total, nheads, d) -> (batch, max_seqlen, nheads, d)
        return pad(t, index, batch, max_seqlen)
    padded = [tuple(map(to_pad, s)) for s in sets]
    # The references, packed (total, nheads, d): per sequence (exact), or padded without a mask.
    refs = {True: varlen_reference(*sets[0][:3], cu, causal)}
    if not causal:
        refs[False] = unpad(sdpa_reference(*padded[0][:3], causal), index)
    bias = None if causal else key_padding_bias(lengths, max_seqlen, dtype, DEVICE)  # (batch, 1, 1, max_seqlen)
    passes = ("fwdbwd",) if bwd else ()
    flops = lambda direction: varlen_flops(lengths, lengths, nheads, hdim, causal, direction)  # noqa: E731
    base = {"dtype": args.dtype_name, "hdim": hdim, "nheads": nheads, "batch": batch, "max_seqlen": max_seqlen,
            "total_tokens": total, "causal": causal}
    where = f"varlen max_seqlen={max_seqlen} causal={causal}"
    rows = []

    def ours_varlen(row: Row) -> None:
        attn = lambda q, k, v: attention_varlen(q, k, v, cu, cu, max_seqlen, max_seqlen, causal=causal)  # noqa: E731
        if checked(row, probe(attn, sets[0], bwd), refs[True]):
            measure(row, OURS, attn, sets, causal, passes, flops)

    def padded_row(impl: str, candidates: List[Candidate]) -> Callable[[Row], None]:
        def through_pad(attn: Attn) -> Attn:  # packed (total, nheads, d) in and out
            return lambda q, k, v: unpad(in_bshd(impl, attn)(to_pad(q), to_pad(k), to_pad(v)), index)

        def body(row: Row) -> None:
            (row["impl"], attn, exact), out = pick(candidates, through_pad, sets[0], bwd)
            row["same_result"] = exact
            if checked(row, out, refs[exact]):
                measure(row, impl, attn, padded, causal, passes, flops)
                measure(row, OURS, through_pad(attn), sets, causal, passes, flops, suffix="_pad")
        return body

    for impl in args.impls:
        if impl == OURS:
            rows.append(run_row({"impl": OURS, "same_result": True, **base}, ours_varlen, where))
            label = f"{OURS}(padded)" if causal else f"{OURS}(padded, no mask)"
            candidates = [(label, attention_fn(OURS, causal), causal)]
        elif causal:
            candidates = [(f"{impl}(padded)", sdpa_fn(impl, causal), True)]
        else:
            candidates = [(f"{impl}(padded, mask)", sdpa_fn(impl, causal, bias=bias), True),
                          (f"{impl}(padded, no mask)", sdpa_fn(impl, causal), False)]
        rows.append(run_row({"impl": impl, **base}, padded_row(impl, candidates), where))
    return rows


# ---- tables, files, command line -----------------------------------------------------------------

def md_table(rows: List[Row], columns: List[str], keys: List[str], metrics: List[str]) -> str:
    """One line per row: columns, each metric (TFLOP/s) and ours over this row for the metrics without
    padding, ours being the flash_attn_cuda row of the same keys."""
    ratios = [m for m in metrics if "_pad" not in m]
    head = columns + [f"{METRIC_TITLES[m]} TFLOP/s" for m in metrics] + [f"ours/this {METRIC_TITLES[m]}"
                                                                          for m in ratios]
    lines = ["| " + " | ".join(head + ["max err"]) + " |", "|" + "---|" * (len(head) + 1)]
    for r in rows:
        ours = next((o for o in rows if o["impl"] == OURS and all(o[k] == r[k] for k in keys)), {})
        cells = [str(r.get(c, "")) for c in columns] + [str(r.get(m, "")) or "n/a" for m in metrics]
        cells += [f"{ours[m] / r[m]:.2f}" if isinstance(ours.get(m), float) and isinstance(r.get(m), float) and r[m]
                  else "n/a" for m in ratios]
        lines.append("| " + " | ".join(cells + [str(r.get("max_err", "")) or "n/a"]) + " |")
    errors = [f"- {r['impl']} ({', '.join(f'{k}={r[k]}' for k in keys)}): {r['error']}" for r in rows if r.get("error")]
    return "\n".join(lines + ([""] + errors if errors else [])) + "\n"


def features_md(args: argparse.Namespace, gqa: List[Row], varlen: List[Row], varlen_note: str) -> str:
    """The tables of both benchmarks, each under its heading (no run header)."""
    sections = []
    if gqa:
        metrics = ["fwd_tflops"] + (["bwd_tflops", "fwdbwd_tflops"] if "bwd" in args.directions else [])
        sections.append(f"## GQA: {args.nheads} q heads / {args.nheads_kv} K/V heads, head dim {args.hdim}, "
                        f"batch * seqlen = {args.tokens}\n\nFLOPs count query heads. (expand): the backend "
                        "refused enable_gqa=True; K/V heads repeated (repeat_interleave) inside the timed call.\n\n"
                        + md_table(gqa, ["causal", "seqlen", "batch", "impl"], ["causal", "seqlen"], metrics))
    if varlen:
        metrics = ["fwd_tflops", "fwd_pad_tflops"] + (["fwdbwd_tflops", "fwdbwd_pad_tflops"]
                                                      if any("fwdbwd_ms" in r for r in varlen) else [])
        sections.append(
            f"## varlen: {args.varlen_batch} sequences, lengths uniform in [max/4, max] (seed {args.seed}), "
            f"{args.varlen_nheads} heads, head dim {args.hdim}\n\n"
            "FLOPs count real tokens only. Causal padded runs need no mask (padding follows each sequence's "
            "real queries); non-causal ones take a key-padding mask where the backend accepts one. same_result "
            "False: padded without a mask, an upper bound on speed, not the same result. incl. pad: the "
            "pad/unpad copies timed too. attention_varlen checks the cu_seqlens values (one device-to-host "
            f"copy) on its first call with these tensors, in the warm-up.{varlen_note}\n\n"
            + md_table(varlen, ["causal", "max_seqlen", "total_tokens", "impl", "same_result"],
                       ["causal", "max_seqlen"], metrics))
    return "\n".join(sections)


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--benches", default="gqa,varlen", help="comma list from gqa,varlen (default both)")
    p.add_argument("--directions", default="fwd,bwd", help="fwd, or fwd,bwd: also bwd and fwd+bwd (default)")
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--hdim", type=int, default=128)
    p.add_argument("--causal", default="both", choices=["both", "0", "1"])
    p.add_argument("--impls", default=",".join(IMPLS), help=f"subset of {','.join(IMPLS)}")
    p.add_argument("--nheads", type=int, default=32, help="GQA query heads (default 32)")
    p.add_argument("--nheads-kv", type=int, default=8, help="GQA K/V heads (default 8)")
    p.add_argument("--tokens", type=int, default=16384, help="GQA batch * seqlen (default 16k)")
    p.add_argument("--seqlens", default="1024,4096,16384", help="GQA seqlens (default 1024,4096,16384)")
    p.add_argument("--varlen-batch", type=int, default=16, help="sequences per varlen batch (default 16)")
    p.add_argument("--varlen-maxlens", default="1024,4096", help="varlen max lengths (default 1024,4096)")
    p.add_argument("--varlen-nheads", type=int, default=16)
    p.add_argument("--seed", type=int, default=0, help="varlen lengths seed")
    p.add_argument("--out", metavar="DIR", help="write NAME_gqa.csv, NAME_varlen.csv, NAME_features.md here")
    p.add_argument("--prefix", metavar="NAME", help="file name prefix for --out (default: the GPU's name, e.g. h200)")
    args = p.parse_args(argv)
    benches = [b for b in args.benches.split(",") if b]
    if not benches or any(b not in BENCHES for b in benches):
        p.error(f"--benches: expected a comma list from {','.join(BENCHES)}, got {args.benches!r}")
    args.benches = [b for b in BENCHES if b in benches]
    args.directions = _directions(p, args.directions)
    if "fwd" not in args.directions:
        p.error("--directions: fwd is always run; give fwd or fwd,bwd")
    args.seqlens = _int_list(p, args.seqlens, "--seqlens")
    args.varlen_maxlens = _int_list(p, args.varlen_maxlens, "--varlen-maxlens")
    args.causals = [False, True] if args.causal == "both" else [args.causal == "1"]
    args.dtype_name = str(DTYPES[args.dtype]).replace("torch.", "")  # the CSVs' dtype, as bench writes it
    args.impls = [x for x in args.impls.split(",") if x]
    if not args.impls or any(x not in IMPLS for x in args.impls):
        p.error(f"--impls: expected a subset of {','.join(IMPLS)}, got {','.join(args.impls)!r}")
    if min(args.nheads, args.nheads_kv, args.hdim, args.tokens, args.varlen_batch, args.varlen_nheads) < 1:
        p.error("--nheads, --nheads-kv, --hdim, --tokens, --varlen-batch, --varlen-nheads must be positive")
    if args.nheads % args.nheads_kv:
        p.error(f"--nheads {args.nheads} must be a multiple of --nheads-kv {args.nheads_kv}")
    if min(args.seqlens + args.varlen_maxlens, default=0) < 1:
        p.error("--seqlens and --varlen-maxlens must be positive")
    return args


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("flash_attn_cuda.bench_features: no CUDA GPU found; the benchmark needs one.", file=sys.stderr)
        return 2
    from flash_attn_cuda._ops import HAS_BACKWARD
    if "bwd" in args.directions and not HAS_BACKWARD:
        print("flash_attn_cuda.bench_features: this build has no backward; forward only", file=sys.stderr)
        args.directions = ["fwd"]
    gqa, varlen, varlen_note = [], [], ""
    if "gqa" in args.benches:
        for causal, seqlen in _progress(list(itertools.product(args.causals, args.seqlens)), "gqa"):
            gqa += gqa_rows(args, causal, seqlen)
    if "varlen" in args.benches:
        why_not = None if "bwd" in args.directions else "--directions fwd"
        varlen_note = f" fwd+bwd not timed: {why_not}" if why_not else ""
        for causal, max_seqlen in _progress(list(itertools.product(args.causals, args.varlen_maxlens)), "varlen"):
            varlen += varlen_rows(args, causal, max_seqlen, why_not is None)
    info = RunInfo.current(argv, args.dtype, PROG)
    prefix = args.prefix or gpu_slug(info.gpu)  # files named after the GPU that measured them
    report = f"{info.md_header('flash_attn_cuda GQA and varlen vs PyTorch SDPA backends')}\n" \
             f"{features_md(args, gqa, varlen, varlen_note)}"
    print(f"\n{report}")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        for name, rows, columns in (("gqa", gqa, GQA_COLUMNS), ("varlen", varlen, VARLEN_COLUMNS)):
            if rows:
                write_csv(os.path.join(args.out, f"{prefix}_{name}.csv"), rows, columns)
        with open(os.path.join(args.out, f"{prefix}_features.md"), "w") as f:
            f.write(report)
    return 1 if any(r.get("error", "").startswith("mismatch") for r in gqa + varlen) else 0


if __name__ == "__main__":
    sys.exit(main())
