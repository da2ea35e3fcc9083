"""Benchmark flash_attn_cuda against PyTorch SDPA's backends in one run.

    python -m flash_attn_cuda.bench                      # FA2-paper grid, bf16, forward
    python -m flash_attn_cuda.bench --hdims 128 --seqlens 4096 --causal 1
    python -m flash_attn_cuda.bench --csv out.csv --plot out.png --md out.md

Grid (FA2 paper): batch * seqlen = 16k tokens, hidden = nheads * headdim = 2048, head dims
64/128/256, seqlen 512..16k, causal and not. TFLOP/s = 4 * batch * seqlen^2 * nheads * headdim
(halved when causal). Times are medians over many runs timed with CUDA events after warm-up;
inputs rotate over several buffers when one set would fit in L2.
"""
from __future__ import annotations

import argparse
import csv
import datetime
import math
import statistics
import sys
from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as F

IMPLS = ("flash_attn_cuda", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient")
FWD_COLUMNS = ["impl", "dtype", "hdim", "seqlen", "causal", "batch", "nheads", "fwd_ms", "fwd_tflops"]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def attention_flops(batch: int, seqlen: int, nheads: int, hdim: int, causal: bool) -> float:
    flops = 4.0 * batch * seqlen * seqlen * nheads * hdim
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


def _sdpa_backend(name: str):
    from torch.nn.attention import SDPBackend
    return {"sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
            "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION}[name]


def make_fwd(impl: str, inputs: List[tuple], causal: bool) -> Callable[[int], object]:
    """A callable running one forward of impl on inputs[i]. Inputs are (batch, seqlen, nheads, d);
    SDPA gets its native (batch, nheads, seqlen, d) layout, made contiguous outside the timing."""
    if impl == "flash_attn_cuda":
        from flash_attn_cuda import attention
        return lambda i: attention(*inputs[i], causal=causal)
    from torch.nn.attention import sdpa_kernel
    native = [tuple(t.transpose(1, 2).contiguous() for t in qkv) for qkv in inputs]
    backend = _sdpa_backend(impl)

    def run(i):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(*native[i], is_causal=causal)
    return run


def bench_fwd_point(impl: str, dtype: torch.dtype, hdim: int, seqlen: int, causal: bool,
                    tokens: int, hidden: int) -> Dict[str, object]:
    batch, nheads = max(1, tokens // seqlen), hidden // hdim
    row = {"impl": impl, "dtype": str(dtype).replace("torch.", ""), "hdim": hdim, "seqlen": seqlen,
           "causal": causal, "batch": batch, "nheads": nheads, "fwd_ms": "", "fwd_tflops": ""}
    set_bytes = 3 * batch * seqlen * nheads * hdim * torch.finfo(dtype).bits // 8
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    n_inputs = min(8, max(1, math.ceil(2 * l2 / set_bytes)))
    gen = torch.Generator(device="cuda").manual_seed(seqlen + hdim)
    inputs = [tuple(torch.randn(batch, seqlen, nheads, hdim, device="cuda", dtype=dtype, generator=gen)
                    for _ in range(3)) for _ in range(n_inputs)]
    try:
        fn = make_fwd(impl, inputs, causal)
        ms = time_cuda(fn, n_inputs)
    except (RuntimeError, ValueError) as e:  # backend unavailable for this shape, or OOM
        row["error"] = str(e).splitlines()[0][:200]
        return row
    finally:
        del inputs
        torch.cuda.empty_cache()
    row["fwd_ms"] = round(ms, 4)
    row["fwd_tflops"] = round(attention_flops(batch, seqlen, nheads, hdim, causal) / (ms * 1e-3) / 1e12, 1)
    return row


def markdown_table(rows: List[Dict[str, object]], impls: List[str]) -> str:
    """One line per (hdim, causal, seqlen): each impl's TFLOP/s and ours over each SDPA backend."""
    others = [i for i in impls if i != "flash_attn_cuda"]
    head = ["hdim", "causal", "seqlen"] + impls + [f"ours/{o}" for o in others]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    keys = sorted({(r["hdim"], r["causal"], r["seqlen"]) for r in rows})
    for key in keys:
        by_impl = {r["impl"]: r["fwd_tflops"] for r in rows if (r["hdim"], r["causal"], r["seqlen"]) == key}
        cells = [str(key[0]), str(key[1]), str(key[2])] + [str(by_impl.get(i, "")) or "n/a" for i in impls]
        ours = by_impl.get("flash_attn_cuda")
        for o in others:
            theirs = by_impl.get(o)
            cells.append(f"{ours / theirs:.2f}" if isinstance(ours, float) and isinstance(theirs, float) else "n/a")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(rows: List[Dict[str, object]], impls: List[str], path: str, title: str) -> None:
    """FA2-paper style: one panel per (mask, hdim), bars per implementation over seqlen."""
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
                    match = [r["fwd_tflops"] for r in rows
                             if (r["impl"], r["hdim"], r["causal"], r["seqlen"]) == (impl, hdim, causal, s)]
                    vals.append(match[0] if match and isinstance(match[0], float) else 0.0)
                xs = [x + (j - (len(impls) - 1) / 2) * width for x in range(len(seqlens))]
                ax.bar(xs, vals, width, label=impl)
            ax.set_xticks(range(len(seqlens)), [f"{s // 1024}k" if s >= 1024 else str(s) for s in seqlens])
            ax.set_title(f"head dim {hdim}, {'causal' if causal else 'non-causal'}", fontsize=10)
            ax.set_xlabel("seqlen")
            ax.set_ylabel("TFLOP/s")
            ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def read_csv(path: str) -> List[Dict[str, object]]:
    """Rows of a results CSV with numbers and booleans restored (for --replot)."""
    rows = []
    with open(path) as f:
        for r in csv.DictReader(f):
            row: Dict[str, object] = dict(r)
            for key in ("hdim", "seqlen", "batch", "nheads"):
                row[key] = int(r[key])
            row["causal"] = r["causal"] == "True"
            for key in ("fwd_ms", "fwd_tflops"):
                row[key] = float(r[key]) if r.get(key) else ""
            rows.append(row)
    return rows


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m flash_attn_cuda.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hdims", default="64,128,256", help="head dims (default 64,128,256)")
    p.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    p.add_argument("--causal", default="both", choices=["both", "0", "1"])
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--impls", default=",".join(IMPLS), help=f"subset of {','.join(IMPLS)}")
    p.add_argument("--tokens", type=int, default=16384, help="batch * seqlen (default 16k)")
    p.add_argument("--hidden", type=int, default=2048, help="nheads * headdim (default 2048)")
    p.add_argument("--csv", help="write rows here")
    p.add_argument("--md", help="write the summary table (markdown) here")
    p.add_argument("--plot", help="write a PNG plot here")
    p.add_argument("--replot", metavar="CSV", help="only redraw --plot (and --md) from an earlier --csv; no GPU")
    p.add_argument("--title", help="title for --replot (e.g. the GPU, torch version and date of the run)")
    args = p.parse_args(argv)
    args.hdims = [int(x) for x in args.hdims.split(",")]
    args.seqlens = [int(x) for x in args.seqlens.split(",")]
    args.causals = [False, True] if args.causal == "both" else [args.causal == "1"]
    args.impls = [x for x in args.impls.split(",") if x]
    bad = [x for x in args.impls if x not in IMPLS]
    if bad:
        p.error(f"unknown impls {bad}; choose from {IMPLS}")
    return args


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    if args.replot:
        if args.plot and not _have_matplotlib():
            print("flash_attn_cuda.bench: --plot needs matplotlib (pip install matplotlib)", file=sys.stderr)
            return 2
        rows = read_csv(args.replot)
        impls = [i for i in IMPLS if any(r["impl"] == i for r in rows)]
        title = args.title or f"forward TFLOP/s from {args.replot}"
        if args.plot:
            plot(rows, impls, args.plot, title)
        if args.md:
            with open(args.md, "w") as f:
                f.write(f"# {title}\n\n{markdown_table(rows, impls)}\n")
        return 0
    if not torch.cuda.is_available():
        print("flash_attn_cuda.bench: no CUDA GPU found; the benchmark needs one.", file=sys.stderr)
        return 2
    if args.plot and not _have_matplotlib():
        print("flash_attn_cuda.bench: --plot needs matplotlib (pip install matplotlib)", file=sys.stderr)
        return 2
    dtype = DTYPES[args.dtype]
    points = [(h, c, s, i) for h in args.hdims for c in args.causals for s in args.seqlens for i in args.impls]
    try:
        from tqdm import tqdm
        points_iter = tqdm(points, desc="bench", file=sys.stderr)
    except ImportError:
        points_iter = points
    rows = []
    for hdim, causal, seqlen, impl in points_iter:
        rows.append(bench_fwd_point(impl, dtype, hdim, seqlen, causal, args.tokens, args.hidden))
        if rows[-1].get("error"):
            print(f"  {impl} hdim={hdim} seqlen={seqlen} causal={causal}: {rows[-1]['error']}", file=sys.stderr)
    gpu = torch.cuda.get_device_name(0)
    title = (f"forward, {args.dtype}, {gpu}, torch {torch.__version__}, "
             f"{datetime.date.today().isoformat()}: {' '.join(sys.argv)}")
    table = markdown_table(rows, args.impls)
    print(f"\n{title}\n\n{table}")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=FWD_COLUMNS, extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)
    if args.md:
        with open(args.md, "w") as f:
            f.write(f"# {title}\n\nTFLOP/s (forward)\n\n{table}\n")
    if args.plot:
        plot(rows, args.impls, args.plot, title)
    return 0


if __name__ == "__main__":
    sys.exit(main())
