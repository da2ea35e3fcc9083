"""Calls for Nsight Compute to profile (scripts/ncu_gpu.sh): ours and SDPA's cuDNN backend on the same
shapes, bf16, d = 128, one call each inside cudaProfilerStart/Stop (ncu --profile-from-start off), so
the warm-up, input generation and cuDNN's plan building stay out of the report.

    ncu --profile-from-start off ... python3 scripts/ncu_probe.py [--skip-ours]

Shapes: decode GQA 32/8 seqlen_q 1 at 8 x 4k, 1 x 32k, 32 x 4k (issue 10's gap to cuDNN); forward on
the FA2 grid (16k tokens, 16 heads) at 1k and 4k, causal and not (issue 11); cuDNN's backward at 1k
(issue 12). --forward-only --seqlens 2048,8192 --fa3-lib .fa3/libfa3ref.so: the forward calls only, with
FlashAttention-3's (scripts/fa3_ref) next to ours and cuDNN's. Random normal inputs (never zeros). Prints one line per call, in order, so the report's
kernels can be matched to calls (each call may launch several kernels).
"""
import argparse
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

DEV = "cuda"
DT = torch.bfloat16


def randn(*shape):
    return torch.randn(shape, dtype=DT, device=DEV)


def decode_calls(skip_ours):
    calls = []
    for batch, seqlen_k in ((8, 4096), (1, 32768), (32, 4096)):
        q, k, v = randn(batch, 1, 32, 128), randn(batch, seqlen_k, 8, 128), randn(batch, seqlen_k, 8, 128)
        seqlens = torch.full((batch,), seqlen_k, dtype=torch.int32, device=DEV)
        qh, kh, vh = (t.transpose(1, 2).contiguous() for t in (q, k, v))
        if not skip_ours:
            from flash_attn_cuda import attention_with_kvcache
            calls.append((f"decode ours {batch}x{seqlen_k}",
                          lambda q=q, k=k, v=v, s=seqlens: attention_with_kvcache(q, k, v, cache_seqlens=s)))

        def cudnn(q=qh, k=kh, v=vh):
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        calls.append((f"decode cudnn {batch}x{seqlen_k}", cudnn))
    return calls


def forward_calls(skip_ours, seqlens=(1024, 4096), fa3=None):
    """fa3: scripts/fa3_ref/fa3_ref.py with its library loaded, or None (then no FA3 call)."""
    calls = []
    for seqlen in seqlens:
        batch = 16384 // seqlen
        for causal in (False, True):
            q, k, v = randn(batch, seqlen, 16, 128), randn(batch, seqlen, 16, 128), randn(batch, seqlen, 16, 128)
            qh, kh, vh = (t.transpose(1, 2).contiguous() for t in (q, k, v))
            tag = f"{batch}x{seqlen} {'causal' if causal else 'full'}"
            if not skip_ours:
                from flash_attn_cuda import attention
                calls.append((f"fwd ours {tag}", lambda q=q, k=k, v=v, c=causal: attention(q, k, v, causal=c)))

            def cudnn(q=qh, k=kh, v=vh, c=causal):
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=c)
            calls.append((f"fwd cudnn {tag}", cudnn))
            if fa3 is not None:
                calls.append((f"fwd fa3 {tag}", lambda q=q, k=k, v=v, c=causal: fa3.forward(q, k, v, causal=c)))
    return calls


def backward_calls():
    q, k, v = (randn(16, 16, 1024, 128).requires_grad_() for _ in range(3))
    dout = randn(16, 16, 1024, 128)

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            out = F.scaled_dot_product_attention(q, k, v)
        out.backward(dout)
    return [("fwd+bwd cudnn 16x1024 full", cudnn)]


def profile_calls(calls):
    """Each (name, fn) twice as warm-up (module load, cuDNN plans, workspaces), then each once between
    cudaProfilerStart / Stop, its name printed first."""
    for _, fn in calls:
        fn()
        fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for name, fn in calls:
        print("call:", name, flush=True)
        fn()
        torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print("probe done", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-ours", action="store_true")
    ap.add_argument("--forward-only", action="store_true", help="only the forward calls")
    ap.add_argument("--seqlens", default="1024,4096", help="the forward calls' sequence lengths")
    ap.add_argument("--fa3-lib", help="libfa3ref.so (scripts/fa3_ref/build.sh): FA3's forward too")
    args = ap.parse_args()
    fa3 = None
    if args.fa3_lib:
        import importlib.util
        import os
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fa3_ref", "fa3_ref.py")
        spec = importlib.util.spec_from_file_location("fa3_ref", path)
        fa3 = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(fa3)
        fa3.load(args.fa3_lib)
    fwd = forward_calls(args.skip_ours, tuple(int(x) for x in args.seqlens.split(",")), fa3)
    profile_calls(fwd if args.forward_only else decode_calls(args.skip_ours) + fwd + backward_calls())


if __name__ == "__main__":
    main()
