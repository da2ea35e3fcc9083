"""Where the time of one training step's attention goes, ours against SDPA cuDNN: for each shape, one
fwd+bwd call (autograd, inputs requiring grad) is timed four ways, to tell host overhead from GPU work
(benchmarks/NOTES.md "Twelfth session": our fwd+bwd did not add up to its passes, cuDNN's did):
  host      host time of the call with the GPU idle before it (launches and Python; no sync inside)
  events    CUDA-event time of back-to-back calls (median), as flash_attn_cuda.bench times them
  kernels   the sum of the call's kernel durations (torch.profiler, CUDA activity)
  span      first kernel start to last kernel end of one call (kernels + the gaps between them)
events > span means calls wait on the host; span > kernels means gaps inside a call.

    python scripts/profile_fwdbwd.py [--shapes 128:4096:1,128:1024:1] [--iters 20] [--trace DIR]
--trace also lists, per shape and impl, the kernels of three back-to-back calls (start offset, duration, gap
before each) and writes their Chrome trace (CPU and CUDA activities) to DIR.
Shapes are hdim:seqlen:causal on the FA2 grid (batch * seqlen = 16k tokens, 2048 hidden), bf16.
"""
import argparse
import os
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from flash_attn_cuda import bench


def grid_inputs(hdim, seqlen):
    """One set of random (never zero) bf16 q, k, v, dout at an FA2-grid point (16k tokens, 2048 hidden),
    as flash_attn_cuda.bench makes them."""
    batch, nheads = bench.grid_shape(seqlen, hdim, tokens=16384, hidden=2048)
    return bench.random_inputs((batch, seqlen, nheads, hdim), torch.bfloat16, n_tensors=4, n_sets=1, seed=0)


def step_fns(hdim, seqlen, causal, pass_name="fwdbwd"):
    """{impl: a callable running one pass}: flash_attn_cuda.bench's own pass_name ('fwdbwd', 'fwd', 'bwd' of make_bwd)
    on grid_inputs, so what is timed here is what the bench timed."""
    inputs = grid_inputs(hdim, seqlen)
    fns = {impl: bench.make_bwd(impl, inputs, causal)[pass_name] for impl in ("flash_attn_cuda", "sdpa_cudnn")}
    return {impl: (lambda fn=fn: fn(0)) for impl, fn in fns.items()}


def host_ms(fn, iters):
    times = []
    for _ in range(iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(times)


def events_ms(fn, iters):
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for s, e in ev:
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in ev)


def kernel_ms(fn, iters):
    """(median kernel-time sum, median span) per call, from one profiled call at a time."""
    sums, spans = [], []
    for _ in range(iters):
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        if not kernels:
            continue
        sums.append(sum(e.device_time for e in kernels) / 1e3)
        spans.append((max(e.time_range.end for e in kernels) - min(e.time_range.start for e in kernels)) / 1e3)
    return statistics.median(sums), statistics.median(spans)


def kernel_timeline(fn, calls=3, trace=None):
    """Lines 'start_us dur_us gap_us name' for the kernels of `calls` back-to-back calls (one profile);
    the Chrome trace of it (CPU and CUDA activities) to the file `trace` when given."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    if trace:
        prof.export_chrome_trace(trace)
    kernels = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                     key=lambda e: e.time_range.start)
    lines, t0, end = [], kernels[0].time_range.start if kernels else 0, None
    for e in kernels:
        gap = 0 if end is None else e.time_range.start - end
        lines.append(f"  {e.time_range.start - t0:9.1f} {e.device_time:8.1f} {gap:7.1f}  {e.name[:110]}")
        end = e.time_range.end if end is None else max(end, e.time_range.end)
    return lines


def report(fn, a, label, trace_name):
    """Print fn's four times (and with --trace its kernel timeline)."""
    for _ in range(5):  # warm-up: module load, cuDNN plans, the caching allocator
        fn()
    torch.cuda.synchronize()
    host = host_ms(fn, a.iters)
    events = events_ms(fn, a.iters)
    kernels, span = kernel_ms(fn, min(a.iters, 10))
    print(f"{label} host {host:7.3f}  events {events:7.3f}  kernels {kernels:7.3f}  span {span:7.3f} ms",
          flush=True)
    if a.trace:
        os.makedirs(a.trace, exist_ok=True)
        print("  start_us   dur_us  gap_us  kernel (3 back-to-back calls)")
        print("\n".join(kernel_timeline(fn, trace=os.path.join(a.trace, trace_name))), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="128:4096:1,128:1024:1,128:4096:0")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--passes", default="fwdbwd", help="of make_bwd: fwdbwd, fwd (inputs requiring grad), bwd")
    ap.add_argument("--trace", default=None, help="folder for Chrome traces and kernel timelines")
    a = ap.parse_args()
    for spec in a.shapes.split(","):
        hdim, seqlen, causal = (int(x) for x in spec.split(":"))
        for pass_name in a.passes.split(","):
            for name, fn in step_fns(hdim, seqlen, bool(causal), pass_name).items():
                report(fn, a, f"d={hdim} seqlen={seqlen} causal={causal} {pass_name:6s} {name:16s}",
                       f"d{hdim}_s{seqlen}_c{causal}_{pass_name}_{name}.json")


if __name__ == "__main__":
    main()
