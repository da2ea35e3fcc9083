"""Where the time of one training step's attention goes, ours against SDPA cuDNN: for each shape, one
fwd+bwd call (autograd, inputs requiring grad) is timed four ways, to tell host overhead from GPU work
(benchmarks/NOTES.md "Twelfth session": our fwd+bwd did not add up to its passes, cuDNN's did):
  host      host time of the call with the GPU idle before it (launches and Python; no sync inside)
  events    CUDA-event time of back-to-back calls (median), as flash_attn_cuda.bench times them
  kernels   the sum of the call's kernel durations (torch.profiler, CUDA activity)
  span      first kernel start to last kernel end of one call (kernels + the gaps between them)
events > span means calls wait on the host; span > kernels means gaps inside a call.

    python scripts/profile_fwdbwd.py [--shapes 128:4096:1,128:1024:1] [--iters 20]
Shapes are hdim:seqlen:causal on the FA2 grid (batch * seqlen = 16k tokens, 2048 hidden), bf16.
"""
import argparse
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from flash_attn_cuda import bench


def step_fns(hdim, seqlen, causal):
    """{impl: a callable running one forward + backward}: flash_attn_cuda.bench's own 'fwdbwd' (make_bwd)
    on one set of random inputs (never zeros), so what is timed here is what the bench timed."""
    batch, nheads = bench.grid_shape(seqlen, hdim, tokens=16384, hidden=2048)
    inputs = bench.random_inputs((batch, seqlen, nheads, hdim), torch.bfloat16, n_tensors=4, n_sets=1, seed=0)
    fns = {impl: bench.make_bwd(impl, inputs, causal)["fwdbwd"] for impl in ("flash_attn_cuda", "sdpa_cudnn")}
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="128:4096:1,128:1024:1,128:4096:0")
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    for spec in a.shapes.split(","):
        hdim, seqlen, causal = (int(x) for x in spec.split(":"))
        for name, fn in step_fns(hdim, seqlen, bool(causal)).items():
            for _ in range(5):  # warm-up: module load, cuDNN plans, the caching allocator
                fn()
            torch.cuda.synchronize()
            host = host_ms(fn, a.iters)
            events = events_ms(fn, a.iters)
            kernels, span = kernel_ms(fn, min(a.iters, 10))
            print(f"d={hdim} seqlen={seqlen} causal={causal} {name:16s} host {host:7.3f}  events {events:7.3f}  "
                  f"kernels {kernels:7.3f}  span {span:7.3f} ms", flush=True)


if __name__ == "__main__":
    main()
