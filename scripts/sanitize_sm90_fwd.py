"""A small ragged workload for compute-sanitizer (scripts/sanitize.sh scripts/sanitize_sm90_fwd.py): the
sm90 family's forward (no dropout, no backward: a FLASH_ATTN_CUDA_BACKWARD=0 build suffices) on every
head dim it compiled, the first compiled dtype, causal and not, at the query-tile edges of the 128-row
(2 consumer warpgroups) and 192-row (3, d=64) tiles: a last tile with one row (193), a warpgroup whose
TMA box lies wholly past seqlen_q, causal with seqlen_q > seqlen_k (rows with no key), GQA, key
blocks cut short. Needs a 90a build on a compute capability 9.0 GPU. Prints one line; the sanitizer's
summary says the rest. `--hdims 64` limits it to those head dims (d = 64's short causal kernel, in
the default build (FLASH_ATTN_CUDA_SM90_SHORT_CAUSAL), serves every causal d = 64 shape here)."""
import argparse
import os

import torch

import flash_attn_cuda
from flash_attn_cuda import attention

SHAPES = [(193, 201), (385, 130), (64, 383), (250, 250)]  # (seqlen_q, seqlen_k)


def run(hdim, dtype, causal, seqlen_q, seqlen_k):
    torch.manual_seed(hdim + seqlen_q)
    q = torch.randn(2, seqlen_q, 4, hdim, device="cuda", dtype=dtype)
    k = torch.randn(2, seqlen_k, 2, hdim, device="cuda", dtype=dtype)
    v = torch.randn(2, seqlen_k, 2, hdim, device="cuda", dtype=dtype)
    out = attention(q, k, v, causal=causal)
    served = flash_attn_cuda._ops.last_fwd_family()
    assert served == "sm90", f"d={hdim} {seqlen_q}x{seqlen_k}: the forward ran on {served}, not sm90"
    torch.cuda.synchronize()
    assert not out.isnan().any()
    return f"d={hdim} causal={causal} {seqlen_q}x{seqlen_k}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hdims", default="", help="comma-separated head dims (default: every compiled one)")
    args = parser.parse_args()
    dims = flash_attn_cuda._ops.sm90_head_dims()
    assert dims, "needs a build with the sm90 family (FLASH_ATTN_CUDA_ARCHS with 90a)"
    if args.hdims:
        wanted = [int(d) for d in args.hdims.split(",")]
        assert set(wanted) <= set(dims), f"head dims {wanted} not all compiled (sm90: {dims})"
        dims = wanted
    assert torch.cuda.get_device_capability() == (9, 0), "the sm90 family runs on compute capability 9.0 only"
    os.environ["FLASH_ATTN_CUDA_FAMILY"] = "sm90"
    dtype = flash_attn_cuda.compiled_dtypes()[0]
    lines = [run(hdim, dtype, causal, sq, sk) for hdim in dims for causal in (False, True) for sq, sk in SHAPES]
    print("sanitize_sm90_fwd: " + str(len(lines)) + " runs; " + "; ".join(lines[:3]) + " ...")


if __name__ == "__main__":
    main()
