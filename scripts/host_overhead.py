"""Host time of one attention call, piece by piece, ours against SDPA cuDNN (GPU host). On a tiny shape
(GPU work of a few microseconds) the host time of a call is its overhead: Python validation, the
torch.library op and its autograd wrapper, the C++ setup and the launches. Each number is the median of
--iters calls, each started with the GPU idle (synchronize before, none inside):
    python scripts/host_overhead.py [--shape 1:128:8:128] [--iters 200] [--cprofile 300]
--cprofile N: also the Python profile (cProfile, by own time) of N back-to-back fwd+bwd calls.
Why: benchmarks/NOTES.md "Thirteenth session" (our fwd+bwd is host-bound at 1k, cuDNN's is not)."""
import argparse
import cProfile
import pstats

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flash_attn_cuda
from flash_attn_cuda import _validate, attention
from profile_fwdbwd import host_ms  # scripts/ is the script's own directory: on sys.path


def host_us(fn, iters):
    return host_ms(fn, iters) * 1e3


def pieces(q, k, v, dout, causal):
    """{name: callable} of our call's pieces and SDPA cuDNN's whole calls."""
    scale = q.shape[-1] ** -0.5
    args = (scale, causal, False, -1, -1, 0.0, None, 0.0)
    out, lse, _ = torch.ops.flash_attn_cuda.fwd(q, k, v, *args)
    qt, kt, vt = (t.detach().transpose(1, 2).requires_grad_() for t in (q, k, v))
    dout_t = dout.transpose(1, 2)
    out_t = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)

    def validation():
        _validate.check_attention_inputs(q, k, v, flash_attn_cuda.compiled_head_dims(),
                                         flash_attn_cuda.compiled_dtypes())
        flash_attn_cuda._checked_options(q, q.shape[0], k.shape[1], 0.0, None, causal, (-1, -1), 0.0, None,
                                         False, varlen=False)

    def no_grad(fn):  # a plain with-block: torch.no_grad()(f) would time building a decorator too
        def run():
            with torch.no_grad():
                return fn()
        return run

    # SDPA's calls run inside main()'s sdpa_kernel(CUDNN_ATTENTION) block: no context entered per call.
    return {
        "ours validation (Python)": validation,
        "ours fwd op, no grad": no_grad(lambda: torch.ops.flash_attn_cuda.fwd(q, k, v, *args)),
        "ours fwd op, requires grad": lambda: torch.ops.flash_attn_cuda.fwd(q, k, v, *args),
        "ours attention(), no grad": no_grad(lambda: attention(q, k, v, causal=causal)),
        "ours attention(), requires grad": lambda: attention(q, k, v, causal=causal),
        "ours bwd op": no_grad(lambda: torch.ops.flash_attn_cuda.bwd(dout, q, k, v, out, lse, *args, None)),
        "ours autograd.grad (bwd)": lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True),
        "ours fwd+bwd": lambda: torch.autograd.grad(attention(q, k, v, causal=causal), (q, k, v), dout),
        "cudnn fwd, no grad": no_grad(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)),
        "cudnn fwd, requires grad": lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal),
        "cudnn autograd.grad (bwd)": lambda: torch.autograd.grad(out_t, (qt, kt, vt), dout_t, retain_graph=True),
        "cudnn fwd+bwd": lambda: torch.autograd.grad(F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal),
                                                     (qt, kt, vt), dout_t),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="1:128:8:128", help="batch:seqlen:nheads:hdim")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--cprofile", type=int, default=0)
    a = ap.parse_args()
    batch, seqlen, nheads, hdim = (int(x) for x in a.shape.split(":"))
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, dout = (torch.randn(batch, seqlen, nheads, hdim, device="cuda", dtype=torch.bfloat16, generator=gen)
                     for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_()
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        for name, fn in pieces(q, k, v, dout, causal=True).items():
            for _ in range(10):
                fn()
            print(f"{name:34s} {host_us(fn, a.iters):8.1f} us", flush=True)
    if a.cprofile:
        step = lambda: torch.autograd.grad(attention(q, k, v, causal=True), (q, k, v), dout)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(a.cprofile):
            step()
        prof.disable()
        torch.cuda.synchronize()
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)


if __name__ == "__main__":
    main()
