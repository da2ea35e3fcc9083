"""Diagnosis of the sm90 backward against the sm80 one and a float64 reference (GPU host):
per gradient the max error of each family, and for dq where sm90 departs (per 64-row block and per
32-column group), plus norms. python3 scripts/sm90_bwd_diag.py"""
import os

import torch

import flash_attn_cuda
from flash_attn_cuda import attention
from flash_attn_cuda.reference import attention_ref


def grads(family, q, k, v, dout, causal):
    os.environ["FLASH_ATTN_CUDA_FAMILY"] = family
    qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = attention(qq, kk, vv, causal=causal)
    g = torch.autograd.grad(out, (qq, kk, vv), dout)
    torch.cuda.synchronize()
    return [x.float() for x in g], flash_attn_cuda._ops.last_bwd_family()


def main():
    for d in [x for x in (64, 128) if x in flash_attn_cuda.compiled_head_dims()]:
        for (b, sq, sk, h, causal) in [(1, 64, 128, 1, False), (1, 128, 128, 1, False), (1, 64, 256, 1, False),
                                       (2, 200, 300, 2, True)]:
            torch.manual_seed(0)
            q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for s in (sq, sk, sk, sq))
            qd, kd, vd = (t.double().requires_grad_() for t in (q, k, v))
            out_ref = attention_ref(qd, kd, vd, causal, compute_dtype=torch.float64)[0]
            ref = [x.float() for x in torch.autograd.grad(out_ref, (qd, kd, vd), dout.double())]
            g80, f80 = grads("sm80", q, k, v, dout, causal)
            g90, f90 = grads("sm90", q, k, v, dout, causal)
            print(f"d={d} b={b} sq={sq} sk={sk} h={h} causal={causal} families {f80}/{f90}")
            for name, r, a, c in zip(("dq", "dk", "dv"), ref, g80, g90):
                print(f"  {name}: |ref|max {r.abs().max():.3f} err sm80 {(a - r).abs().max():.4f} "
                      f"sm90 {(c - r).abs().max():.4f} norm ratio sm90/ref {c.norm() / r.norm():.4f} "
                      f"cos {torch.nn.functional.cosine_similarity(c.flatten(), r.flatten(), dim=0):.4f}")
            dq_err = (g90[0] - ref[0]).abs()[0, :, 0]  # (sq, d) of batch 0 head 0
            rows = [f"{dq_err[i:i + 64].max():.3f}" for i in range(0, sq, 64)]
            cols = [f"{dq_err[:, j:j + 32].max():.3f}" for j in range(0, d, 32)]
            print(f"  dq err per 64-row block {rows} per 32-col group {cols}")
            # is sm90's dq a multiple / a different combination of the reference?
            r0, c0 = ref[0][0, :, 0], g90[0][0, :, 0]
            print(f"  dq[0,:4,0,:4] ref {r0[:2, :4].tolist()}\n  sm90 {c0[:2, :4].tolist()}")


main()
