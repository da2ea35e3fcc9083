"""Backward calls for Nsight Compute: ours and SDPA's cuDNN backend on the same shapes (bf16, FA2 grid:
batch * seqlen = 16k tokens, 2048 hidden), each backward alone inside cudaProfilerStart/Stop (ncu
--profile-from-start off), so the forward, warm-up and cuDNN's plan building stay out of the report.

    ncu --profile-from-start off ... python3 scripts/ncu_bwd_probe.py [--hdims 128,256] [--seqlens 4096]

Random normal inputs (never zeros). Prints one line per call, in order, so the report's kernels can be
matched to calls (each backward launches a pre-pass, the main kernel and a dQ conversion).
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from ncu_probe import profile_calls  # scripts/ is the script's own directory: on sys.path

DT = torch.bfloat16


def calls_for(hdim, seqlen, causal):
    from flash_attn_cuda import attention
    b, h = 16384 // seqlen, 2048 // hdim
    q, k, v = (torch.randn(b, seqlen, h, hdim, device="cuda", dtype=DT, requires_grad=True) for _ in range(3))
    do = torch.randn_like(q)
    out = attention(q, k, v, causal=causal)
    qt, kt, vt = (x.detach().transpose(1, 2).requires_grad_() for x in (q, k, v))
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        out_c = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
    do_t = do.transpose(1, 2)
    tag = f"d={hdim} {b}x{seqlen} {'causal' if causal else 'full'}"
    return [(f"bwd ours {tag}", lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True)),
            (f"bwd cudnn {tag}", lambda: torch.autograd.grad(out_c, (qt, kt, vt), do_t, retain_graph=True))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hdims", default="128,256")
    ap.add_argument("--seqlens", default="4096")
    ap.add_argument("--causal", type=int, default=0)
    a = ap.parse_args()
    calls = []
    for d in map(int, a.hdims.split(",")):
        for s in map(int, a.seqlens.split(",")):
            calls += calls_for(d, s, bool(a.causal))
    profile_calls(calls)


if __name__ == "__main__":
    main()
