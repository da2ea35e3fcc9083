"""Does a pass slow down under sustained load? (GPU host; reads the clocks, changes nothing.) For ours
and SDPA cuDNN, the bench's fwd, bwd and fwd+bwd callables (flash_attn_cuda.bench.make_bwd, one input
set) each run back to back for --seconds, CUDA events per call, while `nvidia-smi -lms` samples the SM
clock, power draw and temperature; per loop: the median call time of the first and last 20 calls, the
median clock / power over the loop and the energy per call (the GPU's energy counter read before and
after the loop, divided by the calls).
    python scripts/sustained_probe.py [--shape 128:4096:1] [--seconds 1.5]
Why: benchmarks/NOTES.md "Thirteenth session" (our fwd+bwd exceeds fwd + bwd by 3-16 % in the bench,
cuDNN's does not)."""
import argparse
import ctypes
import statistics
import subprocess
import time

import torch

from flash_attn_cuda import bench
from profile_fwdbwd import grid_inputs  # scripts/ is the script's own directory: on sys.path


def sampler():
    """A running `nvidia-smi` writing 'clock_mhz, power_w, temp_c' lines every 50 ms, or None."""
    try:
        return subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                                 "--format=csv,noheader,nounits", "-lms", "50"],
                                stdout=subprocess.PIPE, text=True)
    except OSError:
        return None


def energy_mj():
    """The GPU's total energy counter (mJ since the driver loaded; NVML through ctypes, GPU 0), or None."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        handle, mj = ctypes.c_void_p(), ctypes.c_ulonglong()
        if (nvml.nvmlInit_v2() or nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle))
                or nvml.nvmlDeviceGetTotalEnergyConsumption(handle, ctypes.byref(mj))):
            return None
        return float(mj.value)
    except (OSError, AttributeError):
        return None


def loop(fn, seconds):
    """Per-call event times (ms) of back-to-back calls for about `seconds`, and the wall time (ms) of the
    whole loop."""
    events = []
    t0 = time.perf_counter()
    t_end = t0 + seconds
    while time.perf_counter() < t_end:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn(0)
        e.record()
        events.append((s, e))
        if len(events) % 50 == 0:
            torch.cuda.synchronize()  # keep the host within 50 calls of the GPU
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in events], (time.perf_counter() - t0) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="128:4096:1", help="hdim:seqlen:causal on the FA2 grid")
    ap.add_argument("--seconds", type=float, default=1.5)
    a = ap.parse_args()
    hdim, seqlen, causal = (int(x) for x in a.shape.split(":"))
    inputs = grid_inputs(hdim, seqlen)
    for impl in ("flash_attn_cuda", "sdpa_cudnn", "flash_attn_cuda"):
        fns = bench.make_bwd(impl, inputs, bool(causal))
        for name in ("fwd", "bwd", "fwdbwd"):
            for _ in range(3):
                fns[name](0)
            torch.cuda.synchronize()
            smi = sampler()
            e0 = energy_mj()
            times, wall = loop(fns[name], a.seconds)
            e1 = energy_mj()
            mj_per_call = (e1 - e0) / len(times) if e0 is not None and e1 is not None else float("nan")
            samples = []
            if smi is not None:
                smi.terminate()
                out, _ = smi.communicate()
                samples = [[float(x) for x in line.split(",")] for line in out.strip().splitlines()
                           if line.count(",") == 2 and "N/A" not in line]
            clock = statistics.median(s[0] for s in samples) if samples else float("nan")
            power = statistics.median(s[1] for s in samples) if samples else float("nan")
            temp = max(s[2] for s in samples) if samples else float("nan")
            print(f"{impl:16s} {name:6s} calls {len(times):5d}  first20 {statistics.median(times[:20]):7.4f}  "
                  f"last20 {statistics.median(times[-20:]):7.4f}  all {statistics.median(times):7.4f} ms  "
                  f"wall/call {wall / len(times):7.4f} ms  "
                  f"sm clock {clock:6.0f} MHz  power {power:6.1f} W  temp max {temp:4.0f} C  "
                  f"energy {mj_per_call:7.1f} mJ/call", flush=True)


if __name__ == "__main__":
    main()
