"""A small ragged workload for compute-sanitizer (scripts/sanitize.sh scripts/sanitize_small_tiles.py):
the sm80 family's forward and backward under the 163 KB and 99 KB tile rows (FLASH_ATTN_CUDA_SMEM_BUDGET;
needs a build with FLASH_ATTN_CUDA_SMEM_TILES=1) and with attention dropout, every compiled head dim,
causal and not, ragged sequence lengths, GQA. Prints one line; the sanitizer's summary says the rest."""
import os

import torch

import flash_attn_cuda
from flash_attn_cuda import attention


def run(hdim, dtype, budget_kb, causal, dropout_p):
    torch.manual_seed(hdim + budget_kb)
    q = torch.randn(2, 77, 4, hdim, device="cuda", dtype=dtype, requires_grad=True)
    k = torch.randn(2, 131, 2, hdim, device="cuda", dtype=dtype, requires_grad=True)
    v = torch.randn(2, 131, 2, hdim, device="cuda", dtype=dtype, requires_grad=True)
    os.environ["FLASH_ATTN_CUDA_SMEM_BUDGET"] = str(budget_kb)
    try:
        out = attention(q, k, v, dropout_p, causal=causal)
        out.backward(torch.randn_like(out))
    finally:
        del os.environ["FLASH_ATTN_CUDA_SMEM_BUDGET"]
    torch.cuda.synchronize()
    tile = flash_attn_cuda._ops.last_bwd_tile()
    return f"d={hdim} {budget_kb} KB causal={causal} p={dropout_p}: bwd {tile.block_m}x{tile.block_n} row {tile.budget_kb}"


def main():
    assert flash_attn_cuda._ops.smem_tiles_compiled(), "build with FLASH_ATTN_CUDA_SMEM_TILES=1"
    lines = []
    for hdim in flash_attn_cuda.compiled_head_dims():
        for dtype in flash_attn_cuda.compiled_dtypes():
            for budget_kb in (163, 99):
                for causal in (False, True):
                    lines.append(run(hdim, dtype, budget_kb, causal, 0.0))
                    try:
                        lines.append(run(hdim, dtype, budget_kb, causal, 0.17))
                    except RuntimeError as e:  # dropout's backward needs a tile >= 64 keys wide
                        assert "64 keys wide" in str(e), e
    print("sanitize_small_tiles: " + str(len(lines)) + " runs; " + "; ".join(lines[:4]) + " ...")


if __name__ == "__main__":
    main()
