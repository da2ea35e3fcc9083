"""A small ragged KV-cache workload for compute-sanitizer (scripts/sanitize.sh): paged (page 16)
and contiguous caches, GQA, ragged lengths (0, 1, 17, 200), append with rotary, causal, window,
split and unsplit, d = the smallest compiled head dim. Checks against the reference too, so a
sanitizer run that passes also computed the right thing."""
import torch

import flash_attn_cuda
from flash_attn_cuda import attention_with_kvcache
from flash_attn_cuda.reference import kvcache_reference


def run(page_size, num_splits, window):
    torch.manual_seed(page_size or 0)
    dtype, d = torch.bfloat16, flash_attn_cuda.compiled_head_dims()[0]
    batch, capacity, hq, hk, new = 4, 256, 8, 2, 3
    if page_size:
        pages = batch * capacity // page_size
        k_cache = torch.randn(pages, page_size, hk, d, device="cuda", dtype=dtype)
        block_table = torch.randperm(pages, device="cuda").view(batch, -1).to(torch.int32)
    else:
        k_cache, block_table = torch.randn(batch, capacity, hk, d, device="cuda", dtype=dtype), None
    v_cache = torch.randn_like(k_cache)
    q = torch.randn(batch, new, hq, d, device="cuda", dtype=dtype)
    k, v = torch.randn(batch, new, hk, d, device="cuda", dtype=dtype), torch.randn(batch, new, hk, d, device="cuda", dtype=dtype)
    angles = torch.rand(capacity, d // 4, device="cuda")
    kw = dict(k=k, v=v, cache_seqlens=torch.tensor([0, 1, 17, 200], dtype=torch.int32, device="cuda"),
              block_table=block_table, rotary_cos=angles.cos().to(dtype), rotary_sin=angles.sin().to(dtype),
              causal=True, window_size=window, num_splits=num_splits)
    ref = kvcache_reference(q, k_cache, v_cache, **kw)
    out = attention_with_kvcache(q, k_cache, v_cache, **kw)
    torch.cuda.synchronize()
    err = (out.float() - ref.out).abs().max().item()
    assert err < 0.05, f"page {page_size}, splits {num_splits}: max error {err}"


for page_size in (None, 16):
    for num_splits in (1, 3):
        for window in ((-1, -1), (20, 0)):
            run(page_size, num_splits, window)
print("sanitize_kvcache: ok")
