"""Bit-identity of two builds' forward outputs: `save FILE [HDIMS]` runs attention() (the default family) on
fixed seeded shapes (ragged, causal both, GQA, bf16; head dims HDIMS, comma-separated, default 128) and saves
out and lse; `compare A B` exits 1 unless both files hold the same bits. For changes that must not move a bit
(e.g. skipping a multiply by 1, or an instruction-scheduling change)."""
import sys

import torch

SHAPES = [  # batch, seqlen_q, seqlen_k, heads, kv heads, causal
    (2, 1000, 1000, 16, 16, False), (2, 1000, 1000, 16, 16, True), (1, 4096, 4096, 16, 4, False),
    (1, 4096, 4096, 16, 4, True), (3, 113, 777, 8, 8, False), (3, 777, 113, 8, 2, True),
]


def save(path, hdims="128"):
    from flash_attn_cuda import attention
    torch.manual_seed(0)
    res = {}
    for d in (int(x) for x in hdims.split(",")):
        for i, (b, sq, sk, h, hk, causal) in enumerate(SHAPES):
            q = torch.randn(b, sq, h, d, device="cuda", dtype=torch.bfloat16)
            k, v = (torch.randn(b, sk, hk, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            out, lse = attention(q, k, v, causal=causal, return_lse=True)
            key = f"{i}" if d == 128 else f"{i}_d{d}"  # d = 128's keys as before
            res[f"out{key}"], res[f"lse{key}"] = out.cpu(), lse.cpu()
    torch.save(res, path)


def compare(a, b):
    ra, rb = torch.load(a), torch.load(b)
    bad = [k for k in ra if k not in rb or not torch.equal(ra[k].view(torch.uint8), rb[k].view(torch.uint8))]
    print(f"fwd_bits: {len(ra)} tensors, {len(bad)} differ {bad}")
    return 1 if bad or len(ra) != len(rb) else 0


if __name__ == "__main__":
    sys.exit(save(*sys.argv[2:4]) if sys.argv[1] == "save" else compare(sys.argv[2], sys.argv[3]))
