"""Backward calls for Nsight Compute: ours and SDPA's cuDNN backend on the same shapes (bf16, FA2 grid:
batch * seqlen = 16k tokens, 2048 hidden), each backward alone inside cudaProfilerStart/Stop (ncu
--profile-from-start off), so the forward, warm-up and cuDNN's plan building stay out of the report.

    ncu --profile-from-start off ... python3 scripts/ncu_bwd_probe.py [--hdims 128,256] [--seqlens 4096]

Random normal inputs (never zeros). Prints one line per call, in order, so the report's kernels can be
matched to calls (each backward launches a pre-pass, the main kernel and a dQ conversion).
"""
import argparse

from flash_attn_cuda import bench
from ncu_probe import profile_calls  # scripts/ is the script's own directory: on sys.path
from profile_fwdbwd import grid_inputs


def calls_for(hdim, seqlen, causal, impls=("flash_attn_cuda", "sdpa_cudnn")):
    """One backward of each impl (flash_attn_cuda.bench's names; fa3_ref needs FLASH_ATTN_CUDA_BENCH_FA3_LIB) on
    the same inputs, as flash_attn_cuda.bench times it (make_bwd's 'bwd': the graph of one forward kept,
    autograd.grad over it)."""
    inputs = grid_inputs(hdim, seqlen)
    tag = f"d={hdim} {inputs[0][0].shape[0]}x{seqlen} {'causal' if causal else 'full'}"
    calls = []
    for impl in impls:
        bwd = bench.make_bwd(impl, inputs, causal)["bwd"]
        calls.append((f"bwd {impl} {tag}", lambda bwd=bwd: bwd(0)))
    return calls


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hdims", default="128,256")
    ap.add_argument("--seqlens", default="4096")
    ap.add_argument("--causal", default="0", choices=["0", "1", "both"], help="both: non-causal calls first")
    ap.add_argument("--impls", default="flash_attn_cuda,sdpa_cudnn", help="comma list of flash_attn_cuda.bench impls")
    a = ap.parse_args()
    calls = []
    for causal in ((False, True) if a.causal == "both" else (a.causal == "1",)):
        for d in map(int, a.hdims.split(",")):
            for s in map(int, a.seqlens.split(",")):
                calls += calls_for(d, s, causal, tuple(a.impls.split(",")))
    profile_calls(calls)


if __name__ == "__main__":
    main()
