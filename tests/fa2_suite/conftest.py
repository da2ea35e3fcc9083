"""Runs flash-attn 2.8.3's own test suite (test_flash_attn.py here, fetched by get_suite.py) against
flash_attn_cuda through the `flash_attn` alias package in this directory.

Which of its cases run:
- not the ones that need what flash_attn_cuda does not have (each skipped with the reason):
  attention dropout (dropout_p > 0), paged K/V in the varlen function (block_table), a KV cache
  with a head dim that is not a multiple of 8 (the cache is written in place: padding would copy
  it), and head dims / dtypes this build did not compile;
- of the rest, a fixed sample (FA2_SUITE_SAMPLE cases, default 400, spread over the suite's test
  functions in proportion, seed FA2_SUITE_SEED, default 0); FA2_SUITE_SAMPLE=all runs all of them.
  The cases left out of the sample are deselected (pytest reports the count).
Without a GPU or the built extension the suite is not collected (its module queries the GPU on
import); without the fetched file, test_fa2_suite_present.py says how to get it.
"""
import os
import pathlib
import random
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
SUITE = HERE / "test_flash_attn.py"
sys.path.insert(0, str(HERE))   # `import flash_attn` -> the alias package here

try:
    import einops  # noqa: F401 (the real one when installed)
except ImportError:   # the GPU host has no package registry
    import _einops_fallback
    sys.modules["einops"] = _einops_fallback

import flash_attn_cuda  # noqa: E402

collect_ignore = []
if not (torch.cuda.is_available() and flash_attn_cuda._ops.HAS_EXTENSION and SUITE.exists()):
    collect_ignore.append(SUITE.name)


def _padded(d: int) -> int:
    return (d + 7) // 8 * 8


def skip_reason(name: str, params: dict) -> str:
    """Why flash_attn_cuda cannot serve this case of the suite ('' when it can)."""
    if params.get("dropout_p", 0.0) > 0:
        return "attention dropout is not implemented in flash_attn_cuda"
    if name.startswith("test_flash_attn_varlen_causal") and params.get("paged_kv_block_size") is not None:
        return "attention_varlen has no paged K/V (block_table)"
    d = params.get("d")
    if name.startswith("test_flash_attn_kvcache") and d is not None and d % 8 != 0:
        return "KV cache with a head dim not a multiple of 8: the cache is written in place, padding would copy it"
    compiled = flash_attn_cuda.compiled_head_dims()
    if d is not None and compiled and _padded(d) > max(compiled):
        return f"head dim {d} is above this build's compiled head dims {list(compiled)}"
    dtype = params.get("dtype")
    if dtype is not None and dtype not in flash_attn_cuda.compiled_dtypes():
        return f"{dtype} is not compiled into this build"
    return ""


def _sample(items, count: int, seed: int):
    """About count items spread over the test functions in proportion (at least 2 of each)."""
    by_function = {}
    for item in items:
        by_function.setdefault(item.originalname, []).append(item)
    rng = random.Random(seed)
    kept = set()
    for group in by_function.values():
        share = max(2, round(count * len(group) / max(1, len(items))))
        kept.update(id(i) for i in rng.sample(group, min(share, len(group))))
    return kept


def pytest_collection_modifyitems(config, items):
    import pytest
    suite = [i for i in items if pathlib.Path(str(i.fspath)).resolve() == SUITE]
    runnable = []
    for item in suite:
        params = item.callspec.params if hasattr(item, "callspec") else {}
        reason = skip_reason(item.originalname, params)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))
        else:
            runnable.append(item)
    sample = os.environ.get("FA2_SUITE_SAMPLE", "400")
    if sample == "all":
        return
    kept = _sample(runnable, int(sample), int(os.environ.get("FA2_SUITE_SEED", "0")))
    dropped = [i for i in runnable if id(i) not in kept]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        dropped_ids = {id(i) for i in dropped}
        items[:] = [i for i in items if id(i) not in dropped_ids]
