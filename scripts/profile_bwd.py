"""Per-kernel GPU time of one backward (FA2 grid shapes: batch * seqlen = 16k tokens, 2048 hidden), from
torch.profiler: which share the pre-pass, the main kernel and the dQ conversion take, next to cuDNN's kernels.
  python scripts/profile_bwd.py [--hdim 128] [--seqlens 1024,4096] [--causal 0]
"""
import argparse
from collections import defaultdict

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

from flash_attn_cuda import attention


def kernel_times(fn, iters):
    """{kernel name: mean µs per call} over `iters` calls of fn (after a warm-up)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    times = defaultdict(float)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            times[ev.name[:90]] += ev.device_time / iters
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hdim", type=int, default=128)
    ap.add_argument("--seqlens", default="1024,4096")
    ap.add_argument("--causal", type=int, default=0)
    ap.add_argument("--iters", type=int, default=10)
    a = ap.parse_args()
    for s in map(int, a.seqlens.split(",")):
        b, h = 16384 // s, 2048 // a.hdim
        q, k, v = (torch.randn(b, s, h, a.hdim, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        do = torch.randn_like(q)
        out = attention(q, k, v, causal=bool(a.causal))
        qt, kt, vt = (x.detach().transpose(1, 2).requires_grad_() for x in (q, k, v))
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            out_c = F.scaled_dot_product_attention(qt, kt, vt, is_causal=bool(a.causal))
        do_t = do.transpose(1, 2)
        for name, fn in (("flash_attn_cuda", lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True)),
                         ("sdpa_cudnn", lambda: torch.autograd.grad(out_c, (qt, kt, vt), do_t, retain_graph=True))):
            t = kernel_times(fn, a.iters)
            total = sum(t.values())
            print(f"== {name} bwd d={a.hdim} seqlen={s} batch={b} heads={h} causal={a.causal}: {total:.1f} us per call")
            for n, us in sorted(t.items(), key=lambda kv: -kv[1]):
                print(f"   {us:9.1f} us  {100 * us / total:5.1f} %  {n}")


if __name__ == "__main__":
    main()
