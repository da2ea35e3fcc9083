"""Small ragged workload of the sm90 (Hopper) backward's dropout variant for compute-sanitizer
(scripts/sanitize.sh scripts/sanitize_sm90_bwd_dropout.py): ragged seqlens across the 64-query,
64/128-key tile edges, causal both ways, GQA, d = 64, 128 and 256 where compiled (or the head dims in
argv, e.g. `... 256`), dropout_p = 0.2 (the mask words in shared memory, bwd_dropout.h: racecheck
covers their warpgroup barrier; d = 256: consumer 0's words and the sign-marked P^T in sP); asserts
the sm90 main kernel ran."""
import os
import sys

import torch

import flash_attn_cuda
from flash_attn_cuda import attention

os.environ["FLASH_ATTN_CUDA_FAMILY"] = "sm90"
wanted = [int(a) for a in sys.argv[1:]] or [64, 128, 256]
dims = [d for d in wanted if d in flash_attn_cuda.compiled_head_dims()]
assert dims, f"none of {wanted} compiled"
runs = 0
for d in dims:
    for (sq, sk, h, hk) in [(113, 77, 2, 1), (77, 200, 4, 2), (129, 129, 2, 2)]:
        for causal in (False, True):
            q = torch.randn(2, sq, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            k = torch.randn(2, sk, hk, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            v = torch.randn(2, sk, hk, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            out = attention(q, k, v, 0.2, causal=causal)
            out.backward(torch.randn(2, sq, h, d, device="cuda", dtype=torch.bfloat16))
            torch.cuda.synchronize()
            assert flash_attn_cuda._ops.last_bwd_family() == "sm90", flash_attn_cuda._ops.last_bwd_family()
            runs += 1
print(f"sanitize_sm90_bwd_dropout: {runs} fwd+bwd runs with dropout, d = {dims}")
