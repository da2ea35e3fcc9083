"""A small ragged workload for compute-sanitizer (scripts/sanitize.sh scripts/sanitize_sm90_dropout.py):
the sm90 family's forward with attention dropout (its kDropout units) and without, every head dim it
compiled, every compiled dtype, causal and not, ragged sequence lengths (a query tile and a key block
cut short), GQA; then the sm80 backward on the mask each forward drew. Needs a 90a build on a compute
capability 9.0 GPU. Prints one line; the sanitizer's summary says the rest."""
import os

import torch

import flash_attn_cuda
from flash_attn_cuda import attention


def run(hdim, dtype, causal, dropout_p):
    torch.manual_seed(hdim)
    q = torch.randn(2, 77, 4, hdim, device="cuda", dtype=dtype, requires_grad=True)
    k = torch.randn(2, 201, 2, hdim, device="cuda", dtype=dtype, requires_grad=True)
    v = torch.randn(2, 201, 2, hdim, device="cuda", dtype=dtype, requires_grad=True)
    out = attention(q, k, v, dropout_p, causal=causal)
    served = flash_attn_cuda._ops.last_fwd_family()
    assert served == "sm90", f"d={hdim} p={dropout_p}: the forward ran on {served}, not sm90"
    out.backward(torch.randn_like(out))
    torch.cuda.synchronize()
    return f"d={hdim} {dtype} causal={causal} p={dropout_p}"


def main():
    dims = flash_attn_cuda._ops.sm90_head_dims()
    assert dims, "needs a build with the sm90 family (FLASH_ATTN_CUDA_ARCHS with 90a)"
    assert torch.cuda.get_device_capability() == (9, 0), "the sm90 family runs on compute capability 9.0 only"
    os.environ["FLASH_ATTN_CUDA_FAMILY"] = "sm90"
    lines = [run(hdim, dtype, causal, p) for hdim in dims for dtype in flash_attn_cuda.compiled_dtypes()
             for causal in (False, True) for p in (0.0, 0.17)]
    print("sanitize_sm90_dropout: " + str(len(lines)) + " runs; " + "; ".join(lines[:4]) + " ...")


if __name__ == "__main__":
    main()
