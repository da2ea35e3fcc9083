"""Small ragged workload of the sm90 (Hopper) backward for compute-sanitizer (scripts/sanitize.sh
scripts/sanitize_sm90_bwd.py [--dropout P] [head dims]): ragged seqlens across the 64/80/128-row and
64/128-key tile edges (113 rows: an 80-row tile past the scratch's 128-row padding), causal both ways,
GQA, more tiles than SMs (the last shape: 144 / 288 tiles, for a persistent grid's cross-tile
hand-overs), d = 64, 128 and 256 where compiled (or the head dims given, e.g. `... 256`); asserts the
sm90 main kernel ran. --dropout P > 0: the dropout variant (its mask words in shared memory,
bwd_dropout.h: racecheck covers their warpgroup barrier; d = 256: the mask made in registers, the
sign-marked P^T in sP). dtype: bf16 if compiled, else the build's first."""
import argparse
import os

import torch

import flash_attn_cuda
from flash_attn_cuda import attention

parser = argparse.ArgumentParser()
parser.add_argument("--dropout", type=float, default=0.0)
parser.add_argument("--deterministic", action="store_true", help="deterministic=True: the dQ turns (dq_turns.h)")
parser.add_argument("hdims", type=int, nargs="*")
args = parser.parse_args()
os.environ["FLASH_ATTN_CUDA_FAMILY"] = "sm90"
wanted = args.hdims or [64, 128, 256]
dims = [d for d in wanted if d in flash_attn_cuda.compiled_head_dims()]
assert dims, f"none of {wanted} compiled"
dtypes = flash_attn_cuda.compiled_dtypes()
dtype = torch.bfloat16 if torch.bfloat16 in dtypes else dtypes[0]
runs = 0
for d in dims:
    for (sq, sk, h, hk) in [(113, 77, 2, 1), (77, 200, 4, 2), (129, 129, 2, 2), (300, 1100, 8, 2)]:
        for causal in (False, True):
            q = torch.randn(2, sq, h, d, device="cuda", dtype=dtype, requires_grad=True)
            k = torch.randn(2, sk, hk, d, device="cuda", dtype=dtype, requires_grad=True)
            v = torch.randn(2, sk, hk, d, device="cuda", dtype=dtype, requires_grad=True)
            out = attention(q, k, v, args.dropout, causal=causal, deterministic=args.deterministic)
            out.backward(torch.randn(2, sq, h, d, device="cuda", dtype=dtype))
            torch.cuda.synchronize()
            want = "sm80" if args.deterministic and d == 256 else "sm90"  # bwd_supports: d = 256 deterministic on sm80
            assert flash_attn_cuda._ops.last_bwd_family() == want, flash_attn_cuda._ops.last_bwd_family()
            runs += 1
print(f"sanitize_sm90_bwd: {runs} fwd+bwd runs, {dtype}, dropout {args.dropout}, "
      f"deterministic {args.deterministic}, d = {dims}")
