"""An SDPA-based decoder block timed with PyTorch's flash kernels and with flash_attn_cuda activated
as SDPA's flash implementation, in the same run (alternating, CUDA events, warm-up, medians).

The block is a small pre-norm decoder layer written with F.scaled_dot_product_attention (no
transformers needed): LayerNorm -> fused qkv Linear -> causal SDPA with GQA (enable_gqa=True) ->
out Linear -> LayerNorm -> MLP (4x, GELU); `--layers` of them stacked, random weights, bf16.
Before timing, the two backends' outputs and input gradients are compared (FA2-style: our error vs
a float32 block at most 2x PyTorch flash's error + 1e-3); a failure stops the run.

    python -m flash_attn_cuda.bench_sdpa [--batch 4 --seqlen 4096 --hidden 2048 --heads 16 --kv-heads 4]
"""
from __future__ import annotations

import argparse
import copy
import statistics

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int):
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, hidden // heads
        self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, (heads + 2 * kv_heads) * self.d, bias=False)
        self.proj = nn.Linear(hidden, hidden, bias=False)
        self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:           # x: (batch, seqlen, hidden)
        b, s, _ = x.shape
        qkv = self.qkv(self.norm1(x)).view(b, s, self.heads + 2 * self.kv_heads, self.d)
        q, k, v = qkv.split((self.heads, self.kv_heads, self.kv_heads), dim=2)
        # (batch, heads, seqlen, d) views of the projection, as HF-style attention layers make them
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                                           enable_gqa=self.kv_heads != self.heads)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, -1))
        return x + self.mlp(self.norm2(x))


def _fwd_bwd(model, x, dout):
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        out = model(x)
        (dx,) = torch.autograd.grad(out, x, dout)
    return out, dx


def _time_ms(fn, iters: int) -> float:
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _activate(ours: bool) -> None:
    if ours:
        torch.nn.attention.activate_flash_attention_impl("flash_attn_cuda")
    elif torch.nn.attention.current_flash_attention_impl() is not None:
        torch.nn.attention.restore_flash_attention_impl()


def check(model, x, dout) -> str:
    """Our block output/dx vs a float32 copy of the block, against PyTorch flash's error."""
    ref_model = copy.deepcopy(model).float()   # the same layers and weights, in float32
    xf = x.detach().float().requires_grad_()
    with sdpa_kernel(SDPBackend.MATH):
        ref_out = ref_model(xf)
        (ref_dx,) = torch.autograd.grad(ref_out, xf, dout.float())
    lines = []
    errors = {}
    for ours in (False, True):
        _activate(ours)
        out, dx = _fwd_bwd(model, x, dout)
        errors[ours] = ((out.float() - ref_out).abs().max().item(), (dx.float() - ref_dx).abs().max().item())
    _activate(False)
    for i, what in enumerate(("out", "dx")):
        ok = errors[True][i] <= 2 * errors[False][i] + 1e-3
        lines.append(f"{what}: max error vs float32 {errors[True][i]:.3e} (PyTorch flash {errors[False][i]:.3e}) "
                     f"{'ok' if ok else 'FAIL'}")
        if not ok:
            raise SystemExit("bench_sdpa: correctness gate failed: " + lines[-1])
    return "; ".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seqlen", type=int, nargs="+", default=[1024, 4096])
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--out", default=None, help="write the markdown table here too")
    args = p.parse_args(argv)
    import flash_attn_cuda
    assert "flash_attn_cuda" in torch.nn.attention.list_flash_attention_impls(), flash_attn_cuda.__file__
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(args.hidden, args.heads, args.kv_heads) for _ in range(args.layers)])
    model = model.cuda().to(torch.bfloat16)
    rows = [f"SDPA decoder block, {args.layers} layers, hidden {args.hidden}, {args.heads} heads / {args.kv_heads} "
            f"K/V heads (d={args.hidden // args.heads}), causal, bf16, batch {args.batch}; {torch.cuda.get_device_name()}, "
            f"torch {torch.__version__}", "",
            "| seqlen | fwd PyTorch flash (ms) | fwd ours (ms) | ratio | fwd+bwd PyTorch flash (ms) | fwd+bwd ours (ms) "
            "| ratio |", "|---|---|---|---|---|---|---|"]
    notes = []
    for seqlen in args.seqlen:
        x = torch.randn(args.batch, seqlen, args.hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        dout = torch.randn_like(x)
        notes.append(f"seqlen {seqlen}: " + check(model, x, dout))
        results = {}
        for ours in (False, True, False, True):            # alternate; keep the second of each
            _activate(ours)
            with torch.no_grad(), sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                for _ in range(3):
                    model(x)
                fwd = _time_ms(lambda: model(x), args.iters)
            for _ in range(3):
                _fwd_bwd(model, x, dout)
            both = _time_ms(lambda: _fwd_bwd(model, x, dout), args.iters)
            results[ours] = (fwd, both)
        _activate(False)
        (f0, b0), (f1, b1) = results[False], results[True]
        rows.append(f"| {seqlen} | {f0:.2f} | {f1:.2f} | {f0 / f1:.3f}x | {b0:.2f} | {b1:.2f} | {b0 / b1:.3f}x |")
    text = "\n".join(rows + ["", "ratio = PyTorch flash time / ours (> 1: ours faster). Correctness gate:"] +
                     [f"- {n}" for n in notes]) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
