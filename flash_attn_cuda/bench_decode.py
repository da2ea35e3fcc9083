"""Decode benchmark (issue 10): a few new query tokens attending to a KV cache, flash_attn_cuda
against PyTorch SDPA's backends, in TB/s of K/V read.

    python -m flash_attn_cuda.bench_decode --out benchmarks/results     # -> h200_decode.{csv,md,png} on an H200
    python -m flash_attn_cuda.bench_decode --heads 32:8 --batches 1,64 --seqlens 4k,32k --layouts contiguous,paged64
    python -m flash_attn_cuda.bench_decode --impls flash_attn_cuda,sdpa_cudnn --seqlen-q 4

Shapes: q (batch, seqlen_q, hq, d), seqlen_q 1 by default; K/V cache (batch, seqlen_k, hk, d), every
cached token valid (cache_seqlens = seqlen_k for each sequence); bf16, d = 128; heads 32:8 (GQA)
and 32:32 (MHA); batch 1, 8, 32, 64, 128 x seqlen_k 2k..128k. A shape whose K/V exceed --max-kv-gb
(16 GB) is skipped (listed under its table). No causal mask: every query token sees the whole
cache, seqlen_q > 1 included, for every impl.

Impls (--impls):
- flash_attn_cuda: flash_attn_cuda.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=...) on
  the contiguous cache or, for layout pagedN, on a paged cache (num_pages, N, hk, d) with a
  block_table (batch, ceil(seqlen_k / N)) int32: a seeded random permutation of all pages, as a
  real allocator hands them out. Only this impl runs the paged layouts (SDPA has no paged cache).
- attention: flash_attn_cuda.attention(q, k_cache, v_cache), the dense call on the contiguous
  cache; rows labelled "flash_attn_cuda (attention)".
- sdpa_flash, sdpa_cudnn (sdpa_efficient on request): F.scaled_dot_product_attention under
  sdpa_kernel(backend), enable_gqa=True when hq != hk, on q (batch, hq, seqlen_q, d) and K/V in
  SDPA's own layout (batch, hk, seqlen_k, d): contiguous copies of the cache made once per shape,
  outside the timed region. SDPA reads as many bytes as ours, in its native layout.
A backend that refuses a shape (no kernel, OOM, op missing from this build) gets the error text in
its row; the run goes on.

Timing: decode is memory-bound, so K/V must come from HBM, not from L2. Each shape has n input sets
of random normal q, K, V (n = ceil(2 * L2 size / K/V bytes), 1 to 64) and call i reads set i mod n:
between two reads of a set, more than twice the L2 size of other data streams through (rotation,
no flush kernel). A call can be ~10 us, less than Python's launch overhead, so N >= 32 calls (sets
0, 1, ..., n-1, 0, ...) are captured into one CUDA graph and the time is the median over graph
replays (CUDA events, after warm-up) / N. If capture fails for an impl (e.g. a host sync inside the
call), it is timed eagerly (bench.time_cuda: events around each call, median); column timing says
which, and the md marks eager times with *.

Throughput: K/V bytes = 2 * batch * seqlen_k * hk * d * itemsize (q and out not counted); TB/s =
bytes / time; % of copy = TB/s / the device-to-device copy rate, measured once per run on a 1 GB
buffer as (bytes read + bytes written) / time. Ratios are of TB/s (> 1: the first is faster):
vs_sdpa_cudnn / vs_sdpa_flash (this row against that backend at the same shape) and
vs_contiguous (this row against the same impl's contiguous layout: paged / contiguous).

Correctness gate: before timing, each impl's output on the first input set is compared with a
float32 reference (matmul-softmax on float32 copies of the same bf16 inputs, K/V heads grouped,
not expanded): max abs error <= 4 * eps(dtype) * max |reference|, else the row is dropped with a
message and the exit status is 1.

Files: --out DIR writes DIR/PREFIX_decode.csv (every row), DIR/PREFIX_decode.md (run header with
the copy rate; one table per head config: rows batch x seqlen_k, columns each impl/layout's us,
TB/s and % of copy, then the ratios) and DIR/PREFIX_decode.png (TB/s vs seqlen_k, a panel per
head config and batch; skipped when matplotlib is missing). --prefix defaults to the GPU's slug
('NVIDIA H200' -> 'h200'). The tables are printed too. Without a CUDA GPU: one line, exit status 2.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from . import bench
from .bench import DTYPES, Row, RunInfo, _first_line, _progress, sdpa_fn, time_cuda, write_csv

PROG = "python -m flash_attn_cuda.bench_decode"
OURS = "flash_attn_cuda"
IMPLS = {"flash_attn_cuda": OURS, "attention": "flash_attn_cuda (attention)", "sdpa_flash": "sdpa_flash",
         "sdpa_cudnn": "sdpa_cudnn", "sdpa_efficient": "sdpa_efficient"}  # --impls name -> row label
DEFAULT_IMPLS = "flash_attn_cuda,attention,sdpa_flash,sdpa_cudnn"
LAYOUTS = ("contiguous", "paged16", "paged64", "paged256")
# Not in the default set: ours on a head-major cache (memory (batch, hk, seqlen_k, d), SDPA's layout, seen
# through a (batch, seqlen_k, hk, d) view): each K/V head's rows contiguous, as SDPA's backends read them.
EXTRA_LAYOUTS = ("headmajor",)
BASELINES = ("sdpa_cudnn", "sdpa_flash")  # the vs_ ratio columns
DEFAULT_BATCHES, DEFAULT_SEQLENS, DEFAULT_HEADS = "1,8,32,64,128", "2k,4k,8k,16k,32k,64k,128k", "32:8,32:32"
COLUMNS = ["impl", "layout", "dtype", "batch", "seqlen_q", "hq", "hk", "d", "seqlen_k", "timing", "us", "kv_bytes",
           "tbps", "pct_copy", "vs_sdpa_cudnn", "vs_sdpa_flash", "vs_contiguous", "max_err", "error"]
DEVICE = "cuda"      # where inputs are made (a CPU test runs the whole benchmark on "cpu" with stand-ins)
CHECK_EPS = 4        # a row passes when max |out - reference| <= CHECK_EPS * eps(dtype) * max |reference|
MAX_SETS = 64        # input sets rotated over, at most
GRAPH_CALLS = 32     # calls per captured CUDA graph, at least
COPY_BYTES = 2 ** 30  # the d2d copy measured once per run
Fn = Callable[[int], torch.Tensor]  # input set i -> output (batch, seqlen_q, hq, d)




# ---- arithmetic and layouts (no GPU needed) ------------------------------------------------------

def kv_bytes(batch: int, seqlen_k: int, hk: int, d: int, itemsize: int = 2) -> int:
    """Bytes of K and V read by one decode call: 2 * batch * seqlen_k * hk * d * itemsize."""
    return 2 * batch * seqlen_k * hk * d * itemsize


def tb_per_s(nbytes: int, us: float) -> float:
    return nbytes / (us * 1e-6) / 1e12


def page_size(layout: str) -> Optional[int]:
    """Tokens per page of layout 'pagedN'; None for 'contiguous' and 'headmajor'."""
    return None if layout in ("contiguous", "headmajor") else int(layout.removeprefix("paged"))


def n_sets(set_bytes: int, l2_bytes: int) -> int:
    """How many input sets to rotate over: together more than twice the L2 size, 1 to MAX_SETS."""
    return min(MAX_SETS, max(1, math.ceil(2 * l2_bytes / set_bytes)))


def block_table(batch: int, seqlen_k: int, page: int, seed: Optional[int], device: str = "cpu") -> torch.Tensor:
    """(batch, ceil(seqlen_k / page)) int32: a seeded random permutation of all the pages (seed
    None: in order, sequence after sequence)."""
    pages = math.ceil(seqlen_k / page)
    perm = (torch.arange(batch * pages) if seed is None
            else torch.randperm(batch * pages, generator=torch.Generator().manual_seed(seed)))
    return perm.view(batch, pages).to(device=device, dtype=torch.int32)


def to_paged(cache: torch.Tensor, table: torch.Tensor, page: int) -> torch.Tensor:
    """(batch, seqlen_k, hk, d) -> (num_pages, page, hk, d) where page table[b, j] holds tokens
    j * page ... of sequence b (the last page zero-padded)."""
    batch, seqlen_k, hk, d = cache.shape
    extra = table.shape[1] * page - seqlen_k
    padded = F.pad(cache, (0, 0, 0, 0, 0, extra)) if extra else cache  # (batch, pages * page, hk, d)
    paged = cache.new_empty((table.numel(), page, hk, d))
    paged[table.flatten().long()] = padded.view(-1, page, hk, d)
    return paged


def from_paged(paged: torch.Tensor, table: torch.Tensor, seqlen_k: int) -> torch.Tensor:
    """The inverse of to_paged: (batch, seqlen_k, hk, d) gathered through the block table."""
    gathered = paged[table.long()]  # (batch, pages, page, hk, d)
    return gathered.flatten(1, 2)[:, :seqlen_k]


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk_bytes: int = 2 ** 30) -> torch.Tensor:
    """float32 attention of q (batch, seqlen_q, hq, d) over all of k, v (batch, seqlen_k, hk, d), no
    mask; query head h reads K/V head h // (hq // hk). Batch in chunks of ~chunk_bytes of float32 K/V."""
    batch, seqlen_q, hq, d = q.shape
    hk = k.shape[2]
    step = max(1, chunk_bytes // (8 * k[0].numel()))
    outs = []
    for i in range(0, batch, step):
        qc = q[i:i + step].float().unflatten(2, (hk, hq // hk)).permute(0, 2, 3, 1, 4)  # (n, hk, g, sq, d)
        kc, vc = (t[i:i + step].float().transpose(1, 2) for t in (k, v))  # (n, hk, seqlen_k, d)
        p = (torch.einsum("nhgqd,nhsd->nhgqs", qc, kc) * d ** -0.5).softmax(-1)
        outs.append(torch.einsum("nhgqs,nhsd->nhgqd", p, vc).permute(0, 3, 1, 2, 4).flatten(2, 3))
    return torch.cat(outs)  # (batch, seqlen_q, hq, d)


def check(row: Row, out: torch.Tensor, ref: torch.Tensor) -> bool:
    """Record out's max error against ref; False (and a 'mismatch' error) past the bound."""
    err = (out.float() - ref).abs().max().item()
    bound = CHECK_EPS * torch.finfo(out.dtype).eps * ref.abs().max().item()
    row["max_err"] = f"{err:.2e}"
    if not err <= bound:  # NaN fails too
        row["error"] = f"mismatch: max abs error {err:.3e} > {bound:.3e} against the float32 reference; not timed"
    return "error" not in row


# ---- what is timed -------------------------------------------------------------------------------

def _kvcache_op() -> Callable[..., torch.Tensor]:
    from flash_attn_cuda import attention_with_kvcache
    return attention_with_kvcache


def _attention_op() -> Callable[..., torch.Tensor]:
    from flash_attn_cuda import attention
    return attention


def ours_fn(sets: List[tuple], layout: str, seed: Optional[int], num_splits: int = 0) -> Fn:
    """attention_with_kvcache over sets of (q, k, v) in layout (paged caches built here, untimed)."""
    op, k0 = _kvcache_op(), sets[0][1]
    batch, seqlen_k = k0.shape[:2]
    seqlens = torch.full((batch,), seqlen_k, dtype=torch.int32, device=k0.device)
    page = page_size(layout)
    if layout == "headmajor":  # (batch, hk, seqlen_k, d) memory, the same values
        hm = [(q, *(t.transpose(1, 2).contiguous().transpose(1, 2) for t in (k, v))) for q, k, v in sets]
        return lambda i: op(*hm[i], cache_seqlens=seqlens, num_splits=num_splits)
    if page is None:
        return lambda i: op(sets[i][0], sets[i][1], sets[i][2], cache_seqlens=seqlens, num_splits=num_splits)
    table = block_table(batch, seqlen_k, page, seed, str(k0.device))
    paged = [(q, to_paged(k, table, page), to_paged(v, table, page)) for q, k, v in sets]
    return lambda i: op(*paged[i], cache_seqlens=seqlens, block_table=table, num_splits=num_splits)


def sdpa_decode_fn(impl: str, sets: List[tuple]) -> Fn:
    """SDPA backend impl on (batch, hq, seqlen_q, d) / (batch, hk, seqlen_k, d) copies of sets (made here, untimed)."""
    gqa = "enable_gqa" if sets[0][0].shape[2] != sets[0][1].shape[2] else ""
    attn = sdpa_fn(impl, causal=False, gqa=gqa)
    native = [tuple(t.transpose(1, 2).contiguous() for t in s) for s in sets]
    return lambda i: attn(*native[i]).transpose(1, 2)


def impl_fn(impl: str, layout: str, sets: List[tuple], seed: Optional[int], num_splits: int = 0) -> Fn:
    if impl == "flash_attn_cuda":
        return ours_fn(sets, layout, seed, num_splits)
    if impl == "attention":
        op = _attention_op()
        return lambda i: op(*sets[i])
    return sdpa_decode_fn(impl, sets)


def time_graph(fn: Fn, n: int) -> float:
    """Milliseconds per call of fn: N >= GRAPH_CALLS calls (inputs 0, 1, ..., n - 1, 0, ...) captured
    into one CUDA graph, median replay time / N."""
    calls = n * math.ceil(GRAPH_CALLS / n)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up off the capture: lazy init, workspaces
        for i in range(n):
            fn(i)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fn(i % n)
    return time_cuda(lambda _: graph.replay(), 1, min_reps=5) / calls


def time_call(fn: Fn, n: int, where: str) -> Tuple[float, str]:
    """(ms per call, 'graph') or, if capture fails, (eagerly timed ms, 'eager')."""
    try:
        return time_graph(fn, n), "graph"
    except RuntimeError as e:
        print(f"  {where}: CUDA graph capture failed ({_first_line(e)}); timed eagerly", file=sys.stderr)
        torch.cuda.synchronize()
        return time_cuda(fn, n), "eager"


def copy_rate(nbytes: int = COPY_BYTES) -> float:
    """Device-to-device copy rate of an nbytes buffer, bytes/s counting bytes read + bytes written."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=DEVICE).random_()
    dst = torch.empty_like(src)
    ms = time_cuda(lambda _: dst.copy_(src), 1)
    return 2 * nbytes / (ms * 1e-3)


def l2_bytes() -> int:
    return torch.cuda.get_device_properties(0).L2_cache_size


# ---- one shape -----------------------------------------------------------------------------------

def random_sets(args: argparse.Namespace, hq: int, hk: int, batch: int, seqlen_k: int) -> List[tuple]:
    """Input sets (q, k, v) of random normal values: q (batch, seqlen_q, hq, d), k, v (batch, seqlen_k, hk, d)."""
    dtype, d = DTYPES[args.dtype], args.hdim
    count = n_sets(kv_bytes(batch, seqlen_k, hk, d, dtype.itemsize), l2_bytes())
    gen = torch.Generator(device=DEVICE).manual_seed(args.seed + seqlen_k + batch)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(shape, dtype=dtype, device=DEVICE, generator=gen)
    return [(randn(batch, args.seqlen_q, hq, d), randn(batch, seqlen_k, hk, d), randn(batch, seqlen_k, hk, d))
            for _ in range(count)]


def put_time(row: Row, ms: float, rate: float) -> None:
    """Fill row's us, TB/s and % of the copy rate (bytes/s) from ms per call."""
    us = ms * 1e3
    tbps = tb_per_s(row["kv_bytes"], us)
    row["us"], row["tbps"], row["pct_copy"] = round(us, 2), round(tbps, 4), round(100 * tbps * 1e12 / rate, 1)


def series(impls: Sequence[str], layouts: Sequence[str]) -> List[Tuple[str, str]]:
    """(impl, layout) pairs run at each shape: ours in every layout, the others contiguous only."""
    return [(i, lay) for i in impls for lay in layouts if i == "flash_attn_cuda" or lay == "contiguous"]


def shape_rows(args: argparse.Namespace, hq: int, hk: int, batch: int, seqlen_k: int, rate: float) -> List[Row]:
    """The checked, timed rows of every (impl, layout) at one shape, ratios filled in."""
    sets = random_sets(args, hq, hk, batch, seqlen_k)
    ref = reference(*sets[0])
    base = {"dtype": args.dtype_name, "batch": batch, "seqlen_q": args.seqlen_q, "hq": hq, "hk": hk, "d": args.hdim,
            "seqlen_k": seqlen_k, "kv_bytes": kv_bytes(batch, seqlen_k, hk, args.hdim, DTYPES[args.dtype].itemsize)}
    rows = []
    for impl, layout in series(args.impls, args.layouts):
        row = {"impl": IMPLS[impl], "layout": layout, **base}
        where = f"hq={hq} hk={hk} batch={batch} seqlen_k={seqlen_k} {row['impl']} {layout}"
        try:
            fn = impl_fn(impl, layout, sets, None if args.sorted_pages else args.seed, args.num_splits)
            if check(row, fn(0), ref):
                ms, row["timing"] = time_call(fn, len(sets), where)
                put_time(row, ms, rate)
        except (RuntimeError, ValueError, ImportError) as e:  # NotImplementedError and OOM are RuntimeErrors
            row["error"] = _first_line(e)
        finally:
            fn = None
            torch.cuda.empty_cache()
        if row.get("error"):
            print(f"  {where}: {row['error']}", file=sys.stderr)
        rows.append(row)
    add_ratios(rows)
    return rows


def add_ratios(rows: List[Row]) -> None:
    """vs_<baseline> and vs_contiguous (TB/s ratios) of rows of one shape."""
    speed = {(r["impl"], r["layout"]): r.get("tbps") for r in rows}

    def ratio(a: object, b: object) -> object:
        return round(a / b, 3) if isinstance(a, float) and isinstance(b, float) and b else ""
    for r in rows:
        for name in BASELINES:
            r[f"vs_{name}"] = ratio(r.get("tbps"), speed.get((name, "contiguous")))
        r["vs_contiguous"] = ratio(r.get("tbps"), speed.get((r["impl"], "contiguous")))


# ---- tables, plot, files -------------------------------------------------------------------------

def _k(seqlen: int) -> str:
    return f"{seqlen // 1024}k" if seqlen % 1024 == 0 else str(seqlen)


def _label(impl: str, layout: str) -> str:
    return IMPLS[impl] if layout == "contiguous" else f"{IMPLS[impl]} {layout}"


def ratio_columns(pairs: Sequence[Tuple[str, str]]) -> List[Tuple[str, str, str]]:
    """(heading, series label, row key) of the md ratio columns: ours against each baseline, each
    paged layout of ours against contiguous."""
    have = set(pairs)
    cols = [(f"ours/{b}", OURS, f"vs_{b}") for b in BASELINES
            if ("flash_attn_cuda", "contiguous") in have and (b, "contiguous") in have]
    if ("flash_attn_cuda", "contiguous") in have:
        cols += [(f"{lay}/contig", _label("flash_attn_cuda", lay), "vs_contiguous")
                 for i, lay in pairs if i == "flash_attn_cuda" and lay != "contiguous"]
    return cols


def _cell(row: Optional[Row], key: str, eager_mark: bool = False) -> str:
    value = row.get(key, "") if row else ""
    if value == "":
        return "n/a"
    return f"{value}*" if eager_mark and row.get("timing") == "eager" else str(value)


def heads_table(rows: List[Row], pairs: Sequence[Tuple[str, str]]) -> str:
    """Markdown: one line per (batch, seqlen_k) of rows (one head config), each series' us, TB/s,
    % of copy, then the ratio columns; the rows' errors listed below."""
    labels = [_label(i, lay) for i, lay in pairs]
    ratios = ratio_columns(pairs)
    head = ["batch", "seqlen_k", "K/V MB"] + [f"{s} {m}" for s in labels for m in ("us", "TB/s", "% copy")]
    lines = ["| " + " | ".join(head + [h for h, _, _ in ratios]) + " |", "|" + "---|" * (len(head) + len(ratios))]
    for batch, seqlen_k in sorted({(r["batch"], r["seqlen_k"]) for r in rows}):
        at = {_label_of(r): r for r in rows if (r["batch"], r["seqlen_k"]) == (batch, seqlen_k)}
        cells = [str(batch), _k(seqlen_k), f"{next(iter(at.values()))['kv_bytes'] / 1e6:.0f}"]
        for s in labels:
            cells += [_cell(at.get(s), "us", True), _cell(at.get(s), "tbps"), _cell(at.get(s), "pct_copy")]
        cells += [_cell(at.get(s), key) for _, s, key in ratios]
        lines.append("| " + " | ".join(cells) + " |")
    errors = [f"- {_label_of(r)} (batch={r['batch']}, seqlen_k={r['seqlen_k']}): {r['error']}"
              for r in rows if r.get("error")]
    return "\n".join(lines + ([""] + errors if errors else [])) + "\n"


def _label_of(row: Row) -> str:
    return row["impl"] if row["layout"] == "contiguous" else f"{row['impl']} {row['layout']}"


def report_md(rows: List[Row], pairs: Sequence[Tuple[str, str]], heads: Sequence[Tuple[int, int]],
              skipped: Dict[Tuple[int, int], List[str]], note: str) -> str:
    """The tables of every head config, each under its heading (no run header)."""
    sections = []
    for hq, hk in heads:
        mine = [r for r in rows if (r["hq"], r["hk"]) == (hq, hk)]
        if not mine and not skipped.get((hq, hk)):
            continue
        r0 = mine[0] if mine else {}
        title = f"## {'GQA' if hq != hk else 'MHA'} {hq} q heads / {hk} K/V heads"
        text = f"{title}, d={r0.get('d', '')}, seqlen_q={r0.get('seqlen_q', '')}\n\n{note}\n\n"
        text += heads_table(mine, pairs) if mine else "(no shape within the memory budget)\n"
        if skipped.get((hq, hk)):
            text += f"\nskipped (K/V over the memory budget): {', '.join(skipped[(hq, hk)])}\n"
        sections.append(text)
    return "\n".join(sections)


def plot(rows: List[Row], pairs: Sequence[Tuple[str, str]], rate: float, path: str, title: str) -> bool:
    """TB/s vs seqlen_k, a panel per (head config, batch), a line per series, the copy rate dashed.
    False (nothing written) without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    heads = sorted({(r["hq"], r["hk"]) for r in rows}, key=lambda h: h[1])
    batches, seqlens = sorted({r["batch"] for r in rows}), sorted({r["seqlen_k"] for r in rows})
    fig, axes = plt.subplots(len(heads), len(batches), figsize=(3.6 * len(batches), 3.0 * len(heads)),
                             squeeze=False, sharey=True)
    for (hq, hk), batch, ax in [(h, b, axes[i][j]) for i, h in enumerate(heads) for j, b in enumerate(batches)]:
        for impl, layout in pairs:
            pts = sorted((r["seqlen_k"], r["tbps"]) for r in rows if (r["hq"], r["hk"], r["batch"]) == (hq, hk, batch)
                         and _label_of(r) == _label(impl, layout) and isinstance(r.get("tbps"), float))
            if pts:
                ax.plot(*zip(*pts), marker="o", markersize=3, label=_label(impl, layout))
        ax.axhline(rate / 1e12, color="gray", linestyle="--", linewidth=0.8, label="d2d copy")
        ax.set_xscale("log", base=2)
        ax.set_xticks(seqlens, [_k(x) for x in seqlens], fontsize=7)
        ax.minorticks_off()
        ax.set_ylim(bottom=0)
        ax.set_title(f"hq={hq} hk={hk} batch={batch}", fontsize=9)
        ax.set_xlabel("seqlen_k")
        ax.set_ylabel("K/V TB/s")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=6)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_files(args: argparse.Namespace, rows: List[Row], md: str, pairs: Sequence[Tuple[str, str]],
                rate: float, caption: str) -> None:
    """PREFIX_decode.csv, .md and .png under --out."""
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"{args.prefix}_decode")
    write_csv(stem + ".csv", rows, COLUMNS)
    with open(stem + ".md", "w") as f:
        f.write(md)
    if not plot(rows, pairs, rate, stem + ".png", f"decode, K/V TB/s{caption}"):
        print(f"{PROG}: matplotlib not installed; {stem}.png not written", file=sys.stderr)


# ---- command line --------------------------------------------------------------------------------

def _sizes(p: argparse.ArgumentParser, text: str, option: str) -> List[int]:
    """'1,8' or '2k,4096' -> [1, 8] / [2048, 4096]; positive integers."""
    try:
        values = [int(x[:-1]) * 1024 if x.lower().endswith("k") else int(x) for x in text.split(",") if x]
    except ValueError:
        p.error(f"{option}: expected comma-separated positive integers (k = 1024), got {text!r}")
    if not values or min(values) < 1:
        p.error(f"{option}: expected comma-separated positive integers (k = 1024), got {text!r}")
    return values


def _heads(p: argparse.ArgumentParser, text: str) -> List[Tuple[int, int]]:
    """'32:8,32:32' -> [(32, 8), (32, 32)]: q heads a multiple of K/V heads."""
    try:
        heads = [tuple(int(n) for n in pair.split(":")) for pair in text.split(",") if pair]
    except ValueError:
        heads = []
    if not heads or any(len(h) != 2 or min(h) < 1 or h[0] % h[1] for h in heads):
        p.error(f"--heads: expected HQ:HK pairs with HQ a multiple of HK, e.g. 32:8,32:32; got {text!r}")
    return heads


def _choices(p: argparse.ArgumentParser, text: str, option: str, allowed: Sequence[str]) -> List[str]:
    given = [x for x in text.split(",") if x]
    if not given or any(x not in allowed for x in given):
        p.error(f"{option}: expected a comma list from {','.join(allowed)}, got {text!r}")
    return [x for x in allowed if x in given]


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--heads", default=DEFAULT_HEADS, help=f"HQ:HK pairs (default {DEFAULT_HEADS})")
    p.add_argument("--batches", default=DEFAULT_BATCHES, help=f"default {DEFAULT_BATCHES}")
    p.add_argument("--seqlens", default=DEFAULT_SEQLENS, help=f"cached tokens, k = 1024 (default {DEFAULT_SEQLENS})")
    p.add_argument("--seqlen-q", type=int, default=1, help="new query tokens per sequence (default 1)")
    p.add_argument("--hdim", type=int, default=128)
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--layouts", default=",".join(LAYOUTS),
                   help=f"comma list from {','.join(LAYOUTS + EXTRA_LAYOUTS)} (default {','.join(LAYOUTS)})")
    p.add_argument("--impls", default=DEFAULT_IMPLS, help=f"from {','.join(IMPLS)} (default {DEFAULT_IMPLS})")
    p.add_argument("--max-kv-gb", type=float, default=16.0, help="skip shapes whose K/V exceed this (GB, default 16)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sorted-pages", action="store_true", help="paged layouts: pages in order (default: shuffled)")
    p.add_argument("--num-splits", type=int, default=0, help="attention_with_kvcache's num_splits (default 0: heuristic)")
    p.add_argument("--out", metavar="DIR", help="write PREFIX_decode.csv, PREFIX_decode.md, PREFIX_decode.png here")
    p.add_argument("--prefix", help="file name prefix for --out (default: the GPU, e.g. h200)")
    args = p.parse_args(argv)
    args.heads = _heads(p, args.heads)
    args.batches = _sizes(p, args.batches, "--batches")
    args.seqlens = _sizes(p, args.seqlens, "--seqlens")
    args.layouts = _choices(p, args.layouts, "--layouts", LAYOUTS + EXTRA_LAYOUTS)
    args.impls = _choices(p, args.impls, "--impls", list(IMPLS))
    if min(args.seqlen_q, args.hdim) < 1 or args.max_kv_gb <= 0:
        p.error("--seqlen-q, --hdim and --max-kv-gb must be positive")
    args.dtype_name = str(DTYPES[args.dtype]).replace("torch.", "")
    return args


def run(args: argparse.Namespace, rate: float) -> Tuple[List[Row], Dict[Tuple[int, int], List[str]]]:
    """Every shape within the memory budget: (rows, skipped shapes per head config)."""
    itemsize = DTYPES[args.dtype].itemsize
    shapes = [(hq, hk, b, s) for hq, hk in args.heads for b in args.batches for s in args.seqlens]
    rows: List[Row] = []
    skipped: Dict[Tuple[int, int], List[str]] = {}
    for hq, hk, batch, seqlen_k in _progress(shapes, "decode"):
        nbytes = kv_bytes(batch, seqlen_k, hk, args.hdim, itemsize)
        if nbytes > args.max_kv_gb * 1e9:
            skipped.setdefault((hq, hk), []).append(f"b{batch} x {_k(seqlen_k)} ({nbytes / 1e9:.0f} GB)")
            continue
        rows += shape_rows(args, hq, hk, batch, seqlen_k, rate)
    return rows, skipped


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print(f"{PROG}: no CUDA GPU found; the benchmark needs one.", file=sys.stderr)
        return 2
    info = RunInfo.current(argv, args.dtype, PROG)
    args.prefix = args.prefix or bench.gpu_slug(info.gpu)
    rate = copy_rate()
    print(f"d2d copy: {rate / 1e9:.0f} GB/s (read+write)")
    rows, skipped = run(args, rate)
    pairs = series(args.impls, args.layouts)
    note = ("us: per call (* timed eagerly: CUDA graph capture failed). TB/s: K/V bytes / time. % copy: of the d2d "
            "copy rate. Ratios: of TB/s, > 1 = the first is faster.")
    md = (f"{info.md_header('flash_attn_cuda decode (KV cache) vs PyTorch SDPA backends')}"
          f"- d2d copy: {rate / 1e9:.0f} GB/s (read+write, 1 GB buffer)\n\n"
          f"{report_md(rows, pairs, args.heads, skipped, note)}")
    print(f"\n{md}")
    if args.out:
        write_files(args, rows, md, pairs, rate, info.caption())
    return 1 if any(str(r.get("error", "")).startswith("mismatch") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
