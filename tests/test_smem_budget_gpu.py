"""The small-shared-memory tiles (csrc/smem_budget.h: the 163 KB rows of A100, the 99 KB rows of
sm86/sm89) on whatever GPU runs the tests, through FLASH_ATTN_CUDA_SMEM_BUDGET (set per test with
monkeypatch; the binding reads it on every call). Each test runs one family of the GPU suite (dense,
features, varlen, deterministic) forward and backward under the budget, for every compiled head dim
and dtype, against the float32 reference with FA2's rule (fa2_checks), and asserts which tile ran:
the sm80 family (the sm90 forward needs 227 KB), a tile that fits the budget, and the row the table
has for it (gen_instantiations.SMEM_TILES lists the rows with a tile of their own).
"""
import pathlib
import sys

import pytest
import torch
from fa2_checks import assert_fa2_close, assert_grads_fa2_close, assert_lse_close, grads, poison
import flash_attn_cuda
from flash_attn_cuda import attention, attention_varlen
from flash_attn_cuda.reference import attention_ref, attention_varlen_ref

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tools"))
import gen_instantiations  # noqa: E402

pytestmark = pytest.mark.gpu

HDIMS = flash_attn_cuda.compiled_head_dims() or (64,)
DTYPES = flash_attn_cuda.compiled_dtypes() or (torch.bfloat16,)
BUDGETS_KB = (163, 99)
KNOB = "FLASH_ATTN_CUDA_SMEM_BUDGET"


@pytest.fixture(autouse=True)
def _needs_backward_build():
    if not flash_attn_cuda._ops.HAS_BACKWARD:
        pytest.skip("built with FLASH_ATTN_CUDA_BACKWARD=0")


# Tests that need no small-memory tile (they check the knob's errors).
_NO_SMALL_TILES_NEEDED = ("test_bad_knob", "test_budget_below_every_tile", "test_without_small_tiles")


@pytest.fixture(autouse=True)
def _needs_small_tiles(request):
    if request.node.name.startswith(_NO_SMALL_TILES_NEEDED):
        return
    if flash_attn_cuda._ops.HAS_EXTENSION and not flash_attn_cuda._ops.smem_tiles_compiled():
        pytest.skip("built without the small-memory tiles (FLASH_ATTN_CUDA_SMEM_TILES=1 builds them)")


def expected_row(direction, hdim, budget_kb):
    """The table row the dispatch must launch under budget_kb: the budget's own row where it has
    one, else the nearest larger budget's row with a tile of its own (227 KB: the default)."""
    own = sorted(set(gen_instantiations.SMEM_TILES.get((direction, hdim), ())) | {227})
    return min(kb for kb in own if kb >= budget_kb)


def assert_tile(direction, tile, hdim, budget_kb):
    assert tile is not None, f"{direction}: no sm80-family tile recorded"
    assert 0 < tile.smem_bytes <= budget_kb * 1024, f"{direction} tile {tile} exceeds {budget_kb} KB"
    assert tile.budget_kb == expected_row(direction, hdim, budget_kb), f"{direction} ran {tile}"


def assert_forward_tile(hdim, budget_kb):
    assert flash_attn_cuda._ops.last_fwd_family() == "sm80"  # the sm90 family needs the full 227 KB
    assert_tile("fwd", flash_attn_cuda._ops.last_fwd_tile(), hdim, budget_kb)


def _dense(hdim, dtype, seqlen_q=255, seqlen_k=300, nheads=4, nheads_k=2, batch=2):
    torch.manual_seed(hdim + seqlen_q)
    q = torch.randn(batch, seqlen_q, nheads, hdim, device="cuda", dtype=dtype)
    k = torch.randn(batch, seqlen_k, nheads_k, hdim, device="cuda", dtype=dtype)
    v = torch.randn(batch, seqlen_k, nheads_k, hdim, device="cuda", dtype=dtype)
    return q, k, v


def check_dense(q, k, v, causal, opts, budget_kb, deterministic=False):
    hdim = q.shape[-1]
    poison((q.shape, q.dtype))
    out, lse = attention(q, k, v, causal=causal, deterministic=deterministic, return_lse=True, **opts)
    assert_forward_tile(hdim, budget_kb)
    ref, ref_lse = attention_ref(q, k, v, causal, **opts)
    ref_lowp, _ = attention_ref(q, k, v, causal, compute_dtype=None, **opts)
    assert_fa2_close("out", out, ref, ref_lowp)
    assert_lse_close(lse, ref_lse, rtol=2e-3 if opts.get("softcap") else 1e-4)
    assert_grads_fa2_close(
        lambda a, b, c: attention(a, b, c, causal=causal, deterministic=deterministic, **opts),
        lambda a, b, c, dt: attention_ref(a, b, c, causal, compute_dtype=dt, **opts)[0], (q, k, v), torch.randn_like(q))
    assert_tile("bwd", flash_attn_cuda._ops.last_bwd_tile(), hdim, budget_kb)


@pytest.mark.parametrize("budget_kb", BUDGETS_KB)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hdim", HDIMS)
@pytest.mark.parametrize("causal", [False, True])
def test_dense(monkeypatch, causal, hdim, dtype, budget_kb):
    monkeypatch.setenv(KNOB, str(budget_kb))
    check_dense(*_dense(hdim, dtype), causal, {}, budget_kb)


# (causal, window_size, softcap, alibi): the feature kernels (kMods) of both directions
FEATURES = [(False, (50, 20), 20.0, False), (True, (64, -1), 0.0, True)]


@pytest.mark.parametrize("budget_kb", BUDGETS_KB)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hdim", HDIMS)
@pytest.mark.parametrize("causal,window_size,softcap,alibi", FEATURES, ids=str)
def test_features(monkeypatch, causal, window_size, softcap, alibi, hdim, dtype, budget_kb):
    if not flash_attn_cuda._ops.HAS_FEATURES:
        pytest.skip("built with FLASH_ATTN_CUDA_FEATURES=0")
    monkeypatch.setenv(KNOB, str(budget_kb))
    q, k, v = _dense(hdim, dtype)
    slopes = torch.rand(q.shape[2], device="cuda") if alibi else None  # (nheads,)
    check_dense(q, k, v, causal, dict(window_size=window_size, softcap=softcap, alibi_slopes=slopes), budget_kb)


@pytest.mark.parametrize("budget_kb", BUDGETS_KB)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hdim", HDIMS)
def test_varlen(monkeypatch, hdim, dtype, budget_kb):
    if not flash_attn_cuda._ops.HAS_FEATURES:
        pytest.skip("built with FLASH_ATTN_CUDA_FEATURES=0 (varlen needs the feature kernels)")
    monkeypatch.setenv(KNOB, str(budget_kb))
    torch.manual_seed(hdim)
    lengths_q, lengths_k = [1, 257, 130, 0], [1, 300, 64, 17]
    cu_q = torch.tensor([0] + torch.tensor(lengths_q).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0] + torch.tensor(lengths_k).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
    q = torch.randn(sum(lengths_q), 4, hdim, device="cuda", dtype=dtype)  # (total_q, nheads, d)
    k = torch.randn(sum(lengths_k), 2, hdim, device="cuda", dtype=dtype)  # (total_k, nheads_k, d)
    v = torch.randn_like(k)
    max_q, max_k = max(lengths_q), max(lengths_k)
    poison((q.shape, q.dtype))
    out, lse = attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=True, return_lse=True)
    assert_forward_tile(hdim, budget_kb)
    ref, ref_lse = attention_varlen_ref(q, k, v, cu_q, cu_k, True)
    ref_lowp, _ = attention_varlen_ref(q, k, v, cu_q, cu_k, True, compute_dtype=None)
    assert_fa2_close("out", out, ref, ref_lowp)
    assert_lse_close(lse, ref_lse)
    assert_grads_fa2_close(
        lambda a, b, c: attention_varlen(a, b, c, cu_q, cu_k, max_q, max_k, causal=True),
        lambda a, b, c, dt: attention_varlen_ref(a, b, c, cu_q, cu_k, True, compute_dtype=dt)[0], (q, k, v),
        torch.randn_like(q))
    assert_tile("bwd", flash_attn_cuda._ops.last_bwd_tile(), hdim, budget_kb)


@pytest.mark.parametrize("budget_kb", BUDGETS_KB)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hdim", HDIMS)
def test_deterministic(monkeypatch, hdim, dtype, budget_kb):
    """Bit-identical gradients run to run with the dq_accum splits of the tile that runs (its
    block_n), and right against the reference."""
    monkeypatch.setenv(KNOB, str(budget_kb))
    q, k, v = _dense(hdim, dtype, seqlen_q=500, seqlen_k=700, nheads=2, nheads_k=2, batch=1)
    dout = torch.randn_like(q)
    runs = [grads(lambda a, b, c: attention(a, b, c, causal=True, deterministic=True), (q, k, v), dout)
            for _ in range(3)]
    for later in runs[1:]:
        for name, a, b in zip(("dq", "dk", "dv"), runs[0], later):
            assert torch.equal(a, b), f"{name} differs between deterministic runs"
    assert_tile("bwd", flash_attn_cuda._ops.last_bwd_tile(), hdim, budget_kb)
    check_dense(q, k, v, True, {}, budget_kb, deterministic=True)


def test_unset_or_large_budget_runs_the_default_tiles(monkeypatch):
    """Without the knob (or with one above the GPU's limit) the GPU's own limit picks: on compute
    capability 9.0 (227 KB) the default rows."""
    hdim, dtype = HDIMS[-1], DTYPES[-1]
    q, k, v = _dense(hdim, dtype)
    hopper = torch.cuda.get_device_capability() == (9, 0)
    for value in (None, "100000"):
        if value is None:
            monkeypatch.delenv(KNOB, raising=False)
        else:
            monkeypatch.setenv(KNOB, value)
        q_, k_, v_ = (t.detach().clone().requires_grad_() for t in (q, k, v))
        attention(q_, k_, v_).sum().backward()
        tile = flash_attn_cuda._ops.last_bwd_tile()
        sm90_bwd = flash_attn_cuda._ops.last_bwd_family() == "sm90"  # no sm80 tile then (the full 227 KB)
        assert sm90_bwd and hopper and tile is None or tile is not None and 0 < tile.smem_bytes, tile
        fwd = flash_attn_cuda._ops.last_fwd_tile()
        if hopper:
            assert tile is None or tile.budget_kb == 227, tile
            assert fwd is None or fwd.budget_kb == 227, fwd  # None: the sm90 family ran


def test_bad_knob_is_one_clear_error(monkeypatch):
    q, k, v = _dense(HDIMS[0], DTYPES[0])
    for bad in ("abc", "-5", "0", "99KB"):
        monkeypatch.setenv(KNOB, bad)
        with pytest.raises(RuntimeError, match=KNOB):
            attention(q, k, v)


def test_budget_below_every_tile_refuses_naming_the_limit(monkeypatch):
    """16 KB fits no forward tile of any head dim (the smallest, d = 32, needs 24 KB)."""
    monkeypatch.setenv(KNOB, "16")
    q, k, v = _dense(HDIMS[0], DTYPES[0])
    with pytest.raises(RuntimeError, match=r"capped to 16 KB by FLASH_ATTN_CUDA_SMEM_BUDGET"):
        attention(q, k, v)


def test_without_small_tiles_a_budget_that_needs_them_is_refused(monkeypatch):
    """A build without the 163 / 99 KB rows (FLASH_ATTN_CUDA_SMEM_TILES=0, or a 9.0-only build by
    default) refuses a budget only those rows fit, naming the build flag."""
    if flash_attn_cuda._ops.smem_tiles_compiled():
        pytest.skip("this build has the small-memory tiles")
    hdim = max(HDIMS)
    if hdim < 64:
        pytest.skip("every backward tile up to d = 32 fits 99 KB")
    monkeypatch.setenv(KNOB, "99")
    q, k, v = _dense(hdim, DTYPES[0])
    q.requires_grad_(True)
    with pytest.raises(RuntimeError, match="FLASH_ATTN_CUDA_SMEM_TILES"):
        attention(q, k, v).sum().backward()


def test_dropout_backward_on_a_32_key_tile_is_one_clear_error(monkeypatch):
    """The 99 KB backward rows 32 keys wide (d >= 192) have no dropout kernel (dropout works on 16 x 64
    chunks): the backward raises naming it; the forward and the dropout-free backward still run."""
    wide = [d for d in HDIMS if d >= 192]
    if not wide or not flash_attn_cuda._ops.HAS_FEATURES:
        pytest.skip("needs a head dim >= 192 and the feature kernels")
    monkeypatch.setenv(KNOB, "99")
    q, k, v = _dense(wide[0], DTYPES[0])
    q.requires_grad_(True)
    out = attention(q, k, v, 0.1)
    with pytest.raises(RuntimeError, match="64 keys wide"):
        out.sum().backward()
    attention(q, k, v).sum().backward()
    assert flash_attn_cuda._ops.last_bwd_tile().block_n == 32
