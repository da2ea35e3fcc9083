"""Runs flash-attn 2.8.3's own test suite (test_flash_attn.py here, fetched by get_suite.py) against
flash_attn_cuda through the `flash_attn` alias package in this directory.

Which of its cases run:
- not the ones that need what flash_attn_cuda does not have (each skipped with the reason):
  attention dropout (dropout_p > 0: those cases read return_attn_probs in FA2's S_dmask layout), paged K/V in the varlen function (block_table), a KV cache
  with a head dim that is not a multiple of 8 (the cache is written in place: padding would copy
  it), and head dims / dtypes this build did not compile;
- of the rest, a fixed sample (FA2_SUITE_SAMPLE cases, default 400, spread over the suite's test
  functions in proportion to their size, at least 2 each, seed FA2_SUITE_SEED, default 0), drawn
  when pytest generates the cases (the suite parametrizes about 500k: generating them all takes
  minutes); the summary line says how many were parametrized, servable and sampled, and why the
  others are not servable. FA2_SUITE_SAMPLE=all generates and runs every case (unservable ones
  skipped with the reason).
Without a GPU or the built extension the suite is not collected (its module queries the GPU on
import); without the fetched file, test_fa2_suite_present.py says how to get it.
"""
import collections
import itertools
import os
import pathlib
import random
import sys
import zlib

import pytest
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

SAMPLE = os.environ.get("FA2_SUITE_SAMPLE", "400")
SEED = int(os.environ.get("FA2_SUITE_SEED", "0"))

collect_ignore = []
if not (torch.cuda.is_available() and flash_attn_cuda._ops.HAS_EXTENSION and SUITE.exists()):
    collect_ignore.append(SUITE.name)


def _padded(d: int) -> int:
    return (d + 7) // 8 * 8


def skip_reason(name: str, params: dict) -> str:
    """Why flash_attn_cuda cannot serve this case of the suite ('' when it can)."""
    if params.get("dropout_p", 0.0) > 0:
        return ("dropout cases check FA2's S_dmask layout (block-local unnormalised P); flash_attn_cuda's "
                "return_attn_probs is the normalised P, sign-encoded (tests/test_dropout_gpu.py checks dropout)")
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


def _marks(marks):
    """parametrize marks' (argnames, values) as [(names tuple, [value tuples])]."""
    out = []
    for names, values in marks:
        names = tuple(n.strip() for n in names.split(",")) if isinstance(names, str) else tuple(names)
        out.append((names, list(values) if len(names) > 1 else [(v,) for v in values]))
    return out


def _cases(marks):
    """Every combination of the marks' values: (flat argnames, [flat value tuples])."""
    names = tuple(n for ns, _ in marks for n in ns)
    return names, [tuple(v for part in combo for v in part) for combo in itertools.product(*(vs for _, vs in marks))]


def _sample(runnable: int, runnable_all: int, count: int, seed: int, name: str) -> list:
    """Indices of this function's share of count cases (in proportion to its servable cases in the
    whole suite, at least 2), drawn with a fixed seed per function."""
    share = max(2, round(count * runnable / max(1, runnable_all)))
    rng = random.Random(seed * 1_000_003 + zlib.crc32(name.encode()))
    return sorted(rng.sample(range(runnable), min(share, runnable)))


_PLAN: dict = {}   # function name -> (flat argnames, servable cases)
_EXCLUDED: collections.Counter = collections.Counter()
_TOTALS = {"all": 0, "runnable": 0, "sampled": 0}


def _plan(module) -> dict:
    """Every suite function's servable cases (once per session), and the counts for the summary."""
    if not _PLAN:
        for name, obj in vars(module).items():
            marks = [(m.args[0], m.args[1]) for m in getattr(obj, "pytestmark", []) if m.name == "parametrize"]
            if not (name.startswith("test_") and callable(obj) and marks):
                continue
            names, cases = _cases(_marks(marks))
            runnable, reasons = [], collections.Counter()
            for case in cases:
                reason = skip_reason(name, dict(zip(names, case)))
                if reason:
                    reasons[reason if not reason.startswith("head dim ") else "head dim above this build's"] += 1
                else:
                    runnable.append(case)
            _EXCLUDED.update(reasons)
            _PLAN[name] = (names, runnable, reasons)
            _TOTALS["all"] += len(cases)
            _TOTALS["runnable"] += len(runnable)
    return _PLAN


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc):
    """Sample mode: parametrize the suite's functions with their sampled, servable cases only
    (generating all ~500k items and skipping most would take minutes); the parametrize marks are
    then dropped so pytest does not expand them again. FA2_SUITE_SAMPLE=all leaves them alone."""
    if pathlib.Path(str(metafunc.definition.fspath)).resolve() != SUITE or SAMPLE == "all":
        return
    plan = _plan(metafunc.module)
    name = metafunc.definition.originalname
    if name not in plan:
        return
    names, runnable, reasons = plan[name]
    picked = [runnable[i] for i in _sample(len(runnable), _TOTALS["runnable"], int(SAMPLE), SEED, name)]
    _TOTALS["sampled"] += len(picked)
    if not picked:   # one skipped case saying why none of this function's cases is servable
        why = "; ".join(f"{n} x {r}" for r, n in reasons.most_common())
        picked = [pytest.param(*[None] * len(names), marks=pytest.mark.skip(reason=f"no servable case: {why}"))]
    metafunc.definition.own_markers = [m for m in metafunc.definition.own_markers if m.name != "parametrize"]
    metafunc.parametrize(",".join(names), picked)


def pytest_collection_modifyitems(config, items):
    """Full mode (FA2_SUITE_SAMPLE=all): the cases flash_attn_cuda cannot serve are skipped with the reason."""
    if SAMPLE != "all":
        return
    for item in items:
        if pathlib.Path(str(item.fspath)).resolve() == SUITE and hasattr(item, "callspec"):
            reason = skip_reason(item.originalname, item.callspec.params)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


def pytest_terminal_summary(terminalreporter):
    if _TOTALS["all"]:
        terminalreporter.write_line(
            f"flash-attn suite: {_TOTALS['all']} cases parametrized, {_TOTALS['runnable']} servable, "
            f"{_TOTALS['sampled']} sampled (FA2_SUITE_SAMPLE={SAMPLE}, FA2_SUITE_SEED={SEED}); not servable: "
            + "; ".join(f"{n} x {r}" for r, n in _EXCLUDED.most_common()))
