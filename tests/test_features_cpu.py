"""Feature breadth (sliding window, softcap, ALiBi, varlen) of the pure-PyTorch side, on the CPU
in float64: the block-skipping arithmetic the kernels share (exhaustively, against the dense
mask), the blockwise FA2 models against naive attention and autograd, the varlen reference
against one dense packed computation, and every validation error path of the new arguments."""
import itertools

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import flash_attn_cuda
from flash_attn_cuda import _validate
from flash_attn_cuda._validate import (MAX_SEQLEN, check_alibi_slopes, check_cu_seqlens_values, check_flag,
                                       check_max_seqlen, check_softcap, check_varlen_inputs, check_window_size,
                                       values_readable)
from flash_attn_cuda.reference import (alibi_bias, attention_blockwise, attention_blockwise_backward, attention_ref,
                                       attention_varlen_ref, block_needs_mask, effective_window, kv_block_range,
                                       q_block_range, visible_mask)

# Tolerance rule (float64: the algebra is exact up to rounding), written once.
TOL = dict(rtol=1e-9, atol=1e-9)
F64 = torch.float64


def cdiv(a, b):
    return -(-a // b)


# ---------------------------------------------------------------- masking semantics

def test_window_mask_examples():
    # shift = seqlen_k - seqlen_q = 2: query i's diagonal is key i + 2.
    m = visible_mask(3, 5, window_size=(1, 0))
    assert m.int().tolist() == [[0, 1, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 0, 1, 1]]
    m = visible_mask(3, 5, window_size=(-1, 1))
    assert m.int().tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1], [1, 1, 1, 1, 1]]
    m = visible_mask(3, 5, window_size=(0, -1))
    assert m.int().tolist() == [[0, 0, 1, 1, 1], [0, 0, 0, 1, 1], [0, 0, 0, 0, 1]]
    # seqlen_q > seqlen_k: the first rows fall left of key 0 and see nothing.
    m = visible_mask(4, 2, window_size=(0, 0))
    assert m.int().tolist() == [[0, 0], [0, 0], [1, 0], [0, 1]]


@pytest.mark.parametrize("window", [(-1, -1), (3, 5), (0, 7), (-1, 4), (6, -1)])
def test_causal_forces_right_zero_and_keeps_left(window):
    assert effective_window(True, window) == (window[0], 0)
    assert effective_window(False, window) == window
    torch.testing.assert_close(visible_mask(9, 13, causal=True, window_size=window),
                               visible_mask(9, 13, window_size=(window[0], 0)))


def test_validation_and_reference_agree_on_the_window_rule():
    for left, right, causal in itertools.product(range(-1, 4), range(-1, 4), (False, True)):
        assert check_window_size((left, right), causal) == effective_window(causal, (left, right))


def test_alibi_bias_formula():
    slopes = torch.tensor([0.5, 0.25], dtype=F64)
    bias = alibi_bias(2, 3, slopes)                                # shift 1
    assert bias.shape == (2, 2, 3)
    assert bias[0].tolist() == [[-0.5, -0.0, -0.5], [-1.0, -0.5, -0.0]]
    assert alibi_bias(2, 3, slopes[None].expand(4, 2)).shape == (4, 2, 2, 3)


def test_softcap_and_alibi_apply_in_flash_attn_order():
    # one query, two keys, d = 1, scale 1: score s_j = q k_j, then cap, then bias.
    q = torch.tensor([[[[2.0]]]], dtype=F64)                       # (1, 1, 1, 1)
    k = torch.tensor([[[[1.0]], [[3.0]]]], dtype=F64)              # (1, 2, 1, 1)
    v = torch.tensor([[[[10.0]], [[20.0]]]], dtype=F64)
    slopes = torch.tensor([0.7], dtype=torch.float32)
    out, lse = attention_ref(q, k, v, softmax_scale=1.0, compute_dtype=F64, softcap=4.0, alibi_slopes=slopes)
    slope = float(slopes[0])                                       # 0.7 rounded to float32
    s = torch.tensor([2.0, 6.0], dtype=F64)
    s = 4.0 * torch.tanh(s / 4.0) + torch.tensor([-slope * 1, -slope * 0], dtype=F64)   # |i + 1 - j|
    p = torch.softmax(s, 0)
    torch.testing.assert_close(out.flatten(), (p @ torch.tensor([10.0, 20.0], dtype=F64))[None], **TOL)
    torch.testing.assert_close(lse.flatten(), torch.logsumexp(s, 0)[None], **TOL)


# ---------------------------------------------------------------- block skipping, exhaustively

SMALL = range(0, 11)                                               # seqlens 0..10
WINDOWS = list(itertools.product((-1, 0, 1, 2, 4, 9), repeat=2))  # (left, right); right 0 = causal
BLOCKS = [(1, 1), (2, 3), (3, 2), (4, 4), (5, 3)]                  # (block_m, block_n)


def _dense_cases():
    for seqlen_q, seqlen_k, window in itertools.product(SMALL, SMALL, WINDOWS):
        yield seqlen_q, seqlen_k, window, visible_mask(seqlen_q, seqlen_k, window_size=window).tolist()


@pytest.mark.parametrize("block_m,block_n", BLOCKS)
def test_kv_and_q_block_ranges_are_exact(block_m, block_n):
    """For every Q block, [n_min, n_max) is exactly the set of K/V blocks holding a visible key
    (empty when n_max <= n_min); for every K/V block, [m_min, m_max) exactly the Q blocks with a
    row that sees one of its keys."""
    for seqlen_q, seqlen_k, window, mask in _dense_cases():
        seen = {(i // block_m, j // block_n) for i in range(seqlen_q) for j in range(seqlen_k) if mask[i][j]}
        for m_block in range(cdiv(seqlen_q, block_m)):
            n_min, n_max = kv_block_range(m_block, block_m, block_n, seqlen_q, seqlen_k, *window)
            expected = {n for (m, n) in seen if m == m_block}
            assert set(range(n_min, n_max)) == expected, (seqlen_q, seqlen_k, window, m_block)
        for n_block in range(cdiv(seqlen_k, block_n)):
            m_min, m_max = q_block_range(n_block, block_m, block_n, seqlen_q, seqlen_k, *window)
            expected = {m for (m, n) in seen if n == n_block}
            assert set(range(m_min, m_max)) == expected, (seqlen_q, seqlen_k, window, n_block)


@pytest.mark.parametrize("block_m,block_n", BLOCKS)
def test_block_needs_mask_is_sound_and_exact_inside(block_m, block_n):
    """A tile said to need no mask has every (row < seqlen_q, key) in bounds and visible; a tile
    fully inside both sequences needs the mask exactly when some element is invisible."""
    for seqlen_q, seqlen_k, window, mask in _dense_cases():
        for m_block, n_block in itertools.product(range(cdiv(seqlen_q, block_m)), range(cdiv(seqlen_k, block_n))):
            rows = range(m_block * block_m, min((m_block + 1) * block_m, seqlen_q))
            cols = range(n_block * block_n, (n_block + 1) * block_n)
            all_visible = all(j < seqlen_k and mask[i][j] for i in rows for j in cols)
            needs = block_needs_mask(m_block, n_block, block_m, block_n, seqlen_q, seqlen_k, *window)
            if not needs:
                assert all_visible, (seqlen_q, seqlen_k, window, m_block, n_block)
            if (m_block + 1) * block_m <= seqlen_q and (n_block + 1) * block_n <= seqlen_k:
                assert needs == (not all_visible), (seqlen_q, seqlen_k, window, m_block, n_block)


# ---------------------------------------------------------------- blockwise models vs attention_ref

SEQLENS = [(1, 1), (7, 7), (64, 64), (113, 203), (203, 113), (1, 255), (255, 1)]
# (id, causal, options); softcap tests use inputs scaled up so the tanh bends.
OPTIONS = [
    ("window", False, dict(window_size=(17, 5))),
    ("window-left", False, dict(window_size=(9, -1))),
    ("window-right", False, dict(window_size=(-1, 3))),
    ("window-0", False, dict(window_size=(0, 0))),
    ("causal+window", True, dict(window_size=(20, -1))),
    ("causal+window-right-ignored", True, dict(window_size=(7, 13))),
    ("softcap", False, dict(softcap=2.0)),
    ("softcap+window", False, dict(softcap=1.5, window_size=(12, 12))),
    ("alibi", False, dict(alibi="heads")),
    ("alibi-batch", False, dict(alibi="batch")),
    ("alibi+causal", True, dict(alibi="heads")),
    ("all", True, dict(alibi="batch", softcap=3.0, window_size=(30, -1))),
]
BATCH, HEADDIM = 2, 16


def _inputs(seqlen_q, seqlen_k, nheads, nheads_k, opts, seed, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    amp = 3.0 if "softcap" in opts else 1.0
    q = amp * torch.randn(BATCH, seqlen_q, nheads, HEADDIM, dtype=F64, generator=g)
    k = amp * torch.randn(BATCH, seqlen_k, nheads_k, HEADDIM, dtype=F64, generator=g)
    v = torch.randn(BATCH, seqlen_k, nheads_k, HEADDIM, dtype=F64, generator=g)
    dout = torch.randn(BATCH, seqlen_q, nheads, HEADDIM, dtype=F64, generator=g)
    kwargs = {key: val for key, val in opts.items() if key != "alibi"}
    if "alibi" in opts:
        shape = (nheads,) if opts["alibi"] == "heads" else (BATCH, nheads)
        kwargs["alibi_slopes"] = torch.rand(shape, generator=g).to(torch.float32)
    q, k, v = (t.requires_grad_(requires_grad) for t in (q, k, v))
    return q, k, v, dout, kwargs


@pytest.mark.parametrize("seqlen_q,seqlen_k", SEQLENS)
@pytest.mark.parametrize("name,causal,opts", OPTIONS, ids=[o[0] for o in OPTIONS])
@pytest.mark.parametrize("nheads,nheads_k", [(2, 2), (4, 1)])
def test_blockwise_forward_options_match_reference(seqlen_q, seqlen_k, name, causal, opts, nheads, nheads_k):
    q, k, v, _, kwargs = _inputs(seqlen_q, seqlen_k, nheads, nheads_k, opts, seqlen_q * 1000 + seqlen_k)
    out, lse = attention_blockwise(q, k, v, causal=causal, block_m=32, block_n=16, **kwargs)
    ref_out, ref_lse = attention_ref(q, k, v, causal=causal, compute_dtype=F64, **kwargs)
    torch.testing.assert_close(out, ref_out, **TOL)
    torch.testing.assert_close(lse, ref_lse, **TOL)


@pytest.mark.parametrize("seqlen_q,seqlen_k", SEQLENS)
@pytest.mark.parametrize("name,causal,opts", OPTIONS, ids=[o[0] for o in OPTIONS])
@pytest.mark.parametrize("nheads,nheads_k", [(2, 2), (4, 1)])
def test_blockwise_backward_options_match_autograd(seqlen_q, seqlen_k, name, causal, opts, nheads, nheads_k):
    q, k, v, dout, kwargs = _inputs(seqlen_q, seqlen_k, nheads, nheads_k, opts, seqlen_q * 31 + seqlen_k, True)
    out, lse = attention_ref(q, k, v, causal=causal, compute_dtype=F64, **kwargs)
    dq_ref, dk_ref, dv_ref = torch.autograd.grad(out, (q, k, v), dout)
    dq, dk, dv = attention_blockwise_backward(q.detach(), k.detach(), v.detach(), out.detach(), lse.detach(), dout,
                                              causal=causal, block_m=32, block_n=16, **kwargs)
    torch.testing.assert_close(dq, dq_ref, **TOL)
    torch.testing.assert_close(dk, dk_ref, **TOL)
    torch.testing.assert_close(dv, dv_ref, **TOL)


def test_options_change_the_result():
    # guards against an option silently ignored by both the model and the reference
    q, k, v, _, _ = _inputs(40, 50, 2, 2, {"softcap": 1}, 0)
    base, _ = attention_ref(q, k, v, compute_dtype=F64)
    slopes = torch.full((2,), 0.3)
    for kwargs in (dict(window_size=(5, 5)), dict(softcap=1.0), dict(alibi_slopes=slopes)):
        assert not torch.allclose(attention_ref(q, k, v, compute_dtype=F64, **kwargs)[0], base)
    # and the equivalences: a huge cap, zero slopes, a window wider than the sequences
    for kwargs in (dict(softcap=1e9), dict(alibi_slopes=torch.zeros(2)), dict(window_size=(50, 40))):
        torch.testing.assert_close(attention_ref(q, k, v, compute_dtype=F64, **kwargs)[0], base, rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("fn", ["ref", "blockwise"])
def test_rows_outside_the_window_give_zero_minus_inf_and_zero_gradients(fn):
    # window (0, 0), seqlen_q 10 > seqlen_k 4: rows 0..5 fall left of key 0.
    q, k, v, dout, kwargs = _inputs(10, 4, 2, 1, {"window_size": (0, 0), "alibi": "heads"}, 5, True)
    if fn == "ref":
        out, lse = attention_ref(q, k, v, compute_dtype=F64, **kwargs)
        dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
    else:
        out, lse = attention_blockwise(q.detach(), k.detach(), v.detach(), block_m=4, block_n=2, **kwargs)
        dq, dk, dv = attention_blockwise_backward(q.detach(), k.detach(), v.detach(), out, lse, dout,
                                                  block_m=4, block_n=2, **kwargs)
    assert torch.all(out[:, :6] == 0) and torch.all(lse[:, :, :6] == float("-inf"))
    assert torch.all(dq[:, :6] == 0)
    assert torch.isfinite(out).all() and torch.isfinite(lse[:, :, 6:]).all()
    assert torch.isfinite(dq).all() and torch.isfinite(dk).all() and torch.isfinite(dv).all()


# ---------------------------------------------------------------- varlen

def _packed_dense(q, k, v, cu_q, cu_k, causal=False, softmax_scale=None, window_size=(-1, -1), softcap=0.0,
                  alibi_slopes=None):
    """The varlen semantics as ONE (total_q, total_k) score matrix: query t of sequence b sees key
    u iff u belongs to b and is visible by b's own lengths. Independent of attention_varlen_ref's
    per-sequence loop. Returns out (total_q, h, d), lse (h, total_q)."""
    nheads = q.shape[1]
    len_q, len_k = cu_q.diff().long(), cu_k.diff().long()
    batch = len_q.numel()
    seq_q = torch.repeat_interleave(torch.arange(batch), len_q)          # (total_q,) sequence of each token
    seq_k = torch.repeat_interleave(torch.arange(batch), len_k)
    i = torch.arange(q.shape[0]) - cu_q.long()[seq_q]                    # local query index
    j = torch.arange(k.shape[0]) - cu_k.long()[seq_k]                    # local key index
    shift = (len_k - len_q)[seq_q]
    offset = j[None, :] - i[:, None] - shift[:, None]                    # (total_q, total_k)
    left, right = effective_window(causal, window_size)
    visible = seq_q[:, None] == seq_k[None, :]
    if right >= 0:
        visible &= offset <= right
    if left >= 0:
        visible &= offset >= -left
    kx = k.repeat_interleave(nheads // k.shape[1], dim=1)
    vx = v.repeat_interleave(nheads // v.shape[1], dim=1)
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
    s = torch.einsum("thd,uhd->htu", q, kx) * scale                      # (h, total_q, total_k)
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(s.dtype).expand(batch, nheads)[seq_q].T  # (h, total_q)
        s = s - slopes[:, :, None] * offset.abs().to(s.dtype)
    s = s.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.nan_to_num(torch.softmax(s, -1), nan=0.0)
    return torch.einsum("htu,uhd->thd", p, vx), lse


VARLEN_CASES = [
    # (lengths_q, lengths_k): zero-length sequences on either side, q-only and k-only empties
    ([5], [5]),
    ([0, 5, 0, 17, 3, 0], [4, 0, 0, 9, 20, 0]),
    ([33, 1, 40], [33, 70, 2]),
    ([0], [0]),
]
VARLEN_OPTIONS = [o for o in OPTIONS if o[0] in ("window", "causal+window", "softcap+window", "alibi-batch", "all")]
VARLEN_OPTIONS = [("plain", False, {}), ("causal", True, {})] + VARLEN_OPTIONS


def _varlen_inputs(lengths_q, lengths_k, nheads, nheads_k, opts, seed):
    g = torch.Generator().manual_seed(seed)
    cu_q = torch.tensor([0] + list(itertools.accumulate(lengths_q)), dtype=torch.int32)
    cu_k = torch.tensor([0] + list(itertools.accumulate(lengths_k)), dtype=torch.int32)
    amp = 3.0 if "softcap" in opts else 1.0
    q = (amp * torch.randn(int(cu_q[-1]), nheads, HEADDIM, dtype=F64, generator=g)).requires_grad_()
    k = (amp * torch.randn(int(cu_k[-1]), nheads_k, HEADDIM, dtype=F64, generator=g)).requires_grad_()
    v = torch.randn(int(cu_k[-1]), nheads_k, HEADDIM, dtype=F64, generator=g).requires_grad_()
    dout = torch.randn(int(cu_q[-1]), nheads, HEADDIM, dtype=F64, generator=g)
    kwargs = {key: val for key, val in opts.items() if key != "alibi"}
    if "alibi" in opts:
        shape = (nheads,) if opts["alibi"] == "heads" else (len(lengths_q), nheads)
        kwargs["alibi_slopes"] = torch.rand(shape, generator=g).to(torch.float32)
    return q, k, v, dout, cu_q, cu_k, kwargs


@pytest.mark.parametrize("lengths_q,lengths_k", VARLEN_CASES)
@pytest.mark.parametrize("name,causal,opts", VARLEN_OPTIONS, ids=[o[0] for o in VARLEN_OPTIONS])
@pytest.mark.parametrize("nheads,nheads_k", [(2, 2), (4, 2)])
def test_varlen_ref_matches_dense_packed(lengths_q, lengths_k, name, causal, opts, nheads, nheads_k):
    q, k, v, dout, cu_q, cu_k, kwargs = _varlen_inputs(lengths_q, lengths_k, nheads, nheads_k, opts, len(lengths_q))
    out, lse = attention_varlen_ref(q, k, v, cu_q, cu_k, causal, compute_dtype=F64, **kwargs)
    ref_out, ref_lse = _packed_dense(q, k, v, cu_q, cu_k, causal, **kwargs)
    assert out.shape == q.shape and lse.shape == (nheads, q.shape[0])
    torch.testing.assert_close(out, ref_out, **TOL)
    torch.testing.assert_close(lse, ref_lse, **TOL)
    if q.shape[0] == 0:
        return
    grads = torch.autograd.grad(out, (q, k, v), dout, allow_unused=True)
    ref_grads = torch.autograd.grad(ref_out, (q, k, v), dout, allow_unused=True)
    for g, ref_g in zip(grads, ref_grads):
        torch.testing.assert_close(g, ref_g, **TOL)


@pytest.mark.parametrize("name,causal,opts", VARLEN_OPTIONS, ids=[o[0] for o in VARLEN_OPTIONS])
def test_varlen_ref_matches_per_sequence_blockwise(name, causal, opts):
    """Sequence b of the packed result is the blockwise FA2 model run on sequence b alone."""
    lengths_q, lengths_k = VARLEN_CASES[1]
    q, k, v, _, cu_q, cu_k, kwargs = _varlen_inputs(lengths_q, lengths_k, 4, 2, opts, 7)
    out, lse = attention_varlen_ref(q, k, v, cu_q, cu_k, causal, compute_dtype=F64, **kwargs)
    slopes = kwargs.pop("alibi_slopes", None)
    for b in range(len(lengths_q)):
        qs, qe, ks, ke = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
        sl = None if slopes is None else (slopes if slopes.dim() == 1 else slopes[b:b + 1])
        out_b, lse_b = attention_blockwise(q[None, qs:qe].detach(), k[None, ks:ke].detach(), v[None, ks:ke].detach(),
                                           causal=causal, block_m=8, block_n=4, alibi_slopes=sl, **kwargs)
        torch.testing.assert_close(out[qs:qe], out_b[0], **TOL)
        torch.testing.assert_close(lse[:, qs:qe], lse_b[0], **TOL)


def test_varlen_ref_with_no_sequences():
    q = torch.zeros(0, 2, 8, dtype=F64)
    cu = torch.zeros(1, dtype=torch.int32)
    out, lse = attention_varlen_ref(q, q, q, cu, cu, compute_dtype=F64)
    assert out.shape == (0, 2, 8) and lse.shape == (2, 0)


# ---------------------------------------------------------------- validation of the new arguments

# A compiled head dim and dtype; without the extension (the checks here need none), a default build's.
HDIM = (flash_attn_cuda.compiled_head_dims() or (64,))[0]
DTYPE = (flash_attn_cuda.compiled_dtypes() or (torch.bfloat16,))[0]
OTHER_DTYPE = torch.float16 if DTYPE == torch.bfloat16 else torch.bfloat16


def t(*shape, dtype=DTYPE, device="cuda"):
    return torch.empty(*shape, dtype=dtype, device=device)


@pytest.mark.parametrize("window,causal,expected", [
    ((-1, -1), False, (-1, -1)), ((3, 5), False, (3, 5)), ([3, 5], False, (3, 5)), ((0, 0), False, (0, 0)),
    ((-1, -1), True, (-1, 0)), ((4, 9), True, (4, 0)), ((MAX_SEQLEN, 2), False, (-1, 2)),
    ((1, MAX_SEQLEN + 5), False, (1, -1)), ((MAX_SEQLEN - 1, 2), False, (MAX_SEQLEN - 1, 2)),
])
def test_window_size_accepted(window, causal, expected):
    assert check_window_size(window, causal) == expected


@pytest.mark.parametrize("window,exc,msg", [
    (5, TypeError, "window_size must be a tuple"),
    (None, TypeError, "window_size must be a tuple"),
    ((1, 2, 3), ValueError, "window_size must have two entries"),
    ((1,), ValueError, "window_size must have two entries"),
    ((1.0, 2), TypeError, "window_size left must be an int"),
    ((1, True), TypeError, "window_size right must be an int"),
    ((-2, 0), ValueError, r"window_size left must be >= -1"),
    ((0, -5), ValueError, r"window_size right must be >= -1"),
])
def test_window_size_errors(window, exc, msg):
    with pytest.raises(exc, match=msg):
        check_window_size(window)


def test_softcap():
    assert check_softcap(0) == 0.0 and check_softcap(30) == 30.0 and check_softcap(0.5) == 0.5
    for bad in ("1", True, None):
        with pytest.raises(TypeError, match="softcap must be a float"):
            check_softcap(bad)
    for bad in (-1.0, float("nan"), float("inf"), 1e-45, 1e39):
        with pytest.raises(ValueError, match="softcap must be 0 .off. or a positive finite normal float32"):
            check_softcap(bad)


def test_flag():
    assert check_flag("deterministic", True) is True and check_flag("deterministic", False) is False
    for bad in (1, None, "yes"):
        with pytest.raises(TypeError, match="deterministic must be a bool"):
            check_flag("deterministic", bad)


def test_alibi_slopes(fake):
    device = t(1).device
    assert check_alibi_slopes(None, 2, 4, device) is None
    for shape in ((4,), (2, 4)):
        s = t(*shape, dtype=torch.float32)
        assert check_alibi_slopes(s, 2, 4, device) is s
    cases = [
        ([0.1] * 4, TypeError, "alibi_slopes must be a torch.Tensor or None"),
        (t(4, dtype=torch.float16), TypeError, "alibi_slopes must be torch.float32"),
        (t(4, dtype=torch.float64), TypeError, "alibi_slopes must be torch.float32"),
        (t(4, dtype=torch.float32, device="cpu"), ValueError, "alibi_slopes must be on q's device"),
        (t(5, dtype=torch.float32), ValueError, r"shape \(nheads,\) = \(4,\) or \(batch, nheads\) = \(2, 4\)"),
        (t(3, 4, dtype=torch.float32), ValueError, "alibi_slopes must have shape"),
        (t(2, 4, 1, dtype=torch.float32), ValueError, "alibi_slopes must have shape"),
        (t(4, 2, dtype=torch.float32).T, ValueError, "alibi_slopes must be contiguous"),
    ]
    for slopes, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            check_alibi_slopes(slopes, 2, 4, device)


def test_max_seqlen():
    assert check_max_seqlen("max_seqlen_q", 0) == 0 and check_max_seqlen("max_seqlen_q", MAX_SEQLEN) == MAX_SEQLEN
    for bad in (3.0, True, torch.tensor(3), None):
        with pytest.raises(TypeError, match="max_seqlen_q must be a Python int"):
            check_max_seqlen("max_seqlen_q", bad)
    for bad in (-1, MAX_SEQLEN + 1):
        with pytest.raises(ValueError, match=r"max_seqlen_k must be in \[0, "):
            check_max_seqlen("max_seqlen_k", bad)


def _cu(*values, device="cpu"):
    return torch.tensor(values, dtype=torch.int32, device=device)


def test_cu_seqlens_values():
    check_cu_seqlens_values("cu_seqlens_q", _cu(0, 0, 5, 5, 9), 9, 5)       # empty sequences are fine
    check_cu_seqlens_values("cu_seqlens_q", _cu(0), 0, 0)                   # batch 0
    check_cu_seqlens_values("cu_seqlens_q", [0, 3, 4], 4, 100)              # values as a list, loose max
    cases = [
        (_cu(1, 5, 9), 9, 5, "cu_seqlens_q must start at 0, got cu_seqlens_q.0. = 1"),
        (_cu(0, 5, 4, 9), 9, 5, r"must be non-decreasing, got cu_seqlens_q\[1\] = 5 > cu_seqlens_q\[2\] = 4"),
        (_cu(0, 5, 9), 10, 5, r"cu_seqlens_q\[-1\] must equal the packed tensor's total tokens 10, got 9"),
        (_cu(0, 5, 11), 11, 5, r"max_seqlen_q must be >= the longest sequence in cu_seqlens_q \(6\), got 5"),
    ]
    for cu, total, max_seqlen, msg in cases:
        with pytest.raises(ValueError, match=msg):
            check_cu_seqlens_values("cu_seqlens_q", cu, total, max_seqlen, "max_seqlen_q")


def test_values_are_read_only_outside_compile(monkeypatch):
    assert values_readable(_cu(0, 1))
    assert not values_readable(torch.empty(2, dtype=torch.int32, device="meta"))
    with FakeTensorMode():
        assert not values_readable(_cu(0, 1, device="cuda"))
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert not values_readable(_cu(0, 1))


def _varlen(q, k, v, cu_q, cu_k, max_q=8, max_k=8, **kw):
    return check_varlen_inputs(q, k, v, cu_q, cu_k, max_q, max_k, (HDIM,), (DTYPE,), check_device=False, **kw)


def _good(total_q=8, total_k=12, nheads=4, nheads_k=2, batch=2):
    return (t(total_q, nheads, HDIM), t(total_k, nheads_k, HDIM), t(total_k, nheads_k, HDIM),
            _cu(*range(0, batch + 1), device="cuda"), _cu(*range(0, batch + 1), device="cuda"))


def test_varlen_inputs_accepted(fake):
    # fake tensors hold no values: the value checks are skipped (the cu_seqlens here are garbage)
    assert _varlen(*_good()) == (HDIM, 2)
    q, k, v, cu_q, cu_k = _good(total_q=0, total_k=0, batch=0)
    assert _varlen(q, k, v, cu_q[:1], cu_k[:1], 0, 0) == (HDIM, 0)


VARLEN_BAD = [
    # (description, builder -> (q, k, v, cu_q, cu_k), exception, message fragment)
    ("q 4-D", lambda: (t(1, 8, 4, HDIM),) + _good()[1:], ValueError,
     r"q must be 3-D \(total_tokens, nheads, headdim\), got shape \(1, 8, 4,"),
    ("k 2-D", lambda: (_good()[0], t(12, HDIM)) + _good()[2:], ValueError, "k must be 3-D"),
    ("cpu", lambda: (t(8, 4, HDIM, device="cpu"),) + _good()[1:], ValueError, "q must be a CUDA tensor"),
    ("float32", lambda: (t(8, 4, HDIM, dtype=torch.float32),) + _good()[1:], TypeError, "float16 or torch.bfloat16"),
    ("mixed dtypes", lambda: (t(8, 4, HDIM, dtype=OTHER_DTYPE),) + _good()[1:], TypeError, "share a dtype"),
    ("kv tokens", lambda: _good()[:2] + (t(13, 2, HDIM),) + _good()[3:], ValueError,
     "k and v must have the same number of tokens, got 12 and 13"),
    ("kv heads", lambda: _good()[:2] + (t(12, 1, HDIM),) + _good()[3:], ValueError, "same number of heads"),
    ("heads ratio", lambda: (t(8, 3, HDIM),) + _good()[1:], ValueError, "multiple of nheads"),
    ("head dims", lambda: (t(8, 4, HDIM + 8),) + _good()[1:], ValueError, "head dims differ"),
    ("misaligned", lambda: (t(8, 4, HDIM + 8)[..., 1:HDIM + 1],) + _good()[1:], ValueError,
     "q must be 16-byte aligned .storage offset and token/head strides"),
    ("cu not tensor", lambda: _good()[:3] + ([0, 1, 2], _good()[4]), TypeError,
     "cu_seqlens_q must be a torch.Tensor"),
    ("cu int64", lambda: _good()[:4] + (t(3, dtype=torch.int64),), TypeError, "cu_seqlens_k must be torch.int32"),
    ("cu 2-D", lambda: _good()[:3] + (t(1, 3, dtype=torch.int32), _good()[4]), ValueError,
     r"cu_seqlens_q must be 1-D of length batch \+ 1 >= 1, got shape \(1, 3\)"),
    ("cu empty", lambda: _good()[:3] + (t(0, dtype=torch.int32), _good()[4]), ValueError, "1-D of length"),
    ("cu cpu", lambda: _good()[:3] + (_cu(0, 1, 2),) + _good()[4:], ValueError, "cu_seqlens_q must be on q's device"),
    ("cu strided", lambda: _good()[:4] + (t(6, dtype=torch.int32)[::2],), ValueError,
     "cu_seqlens_k must be contiguous"),
    ("cu lengths", lambda: _good()[:4] + (t(4, dtype=torch.int32),), ValueError,
     "cu_seqlens_q and cu_seqlens_k must have the same length batch \\+ 1, got 3 and 4"),
    ("grid", lambda: _good()[:3] + (t(70000, dtype=torch.int32),) * 2, ValueError, "batch .69999. must be <= 65535"),
]


@pytest.mark.parametrize("desc,build,exc,msg", VARLEN_BAD, ids=[b[0] for b in VARLEN_BAD])
def test_varlen_bad_inputs_raise_one_clear_exception(fake, desc, build, exc, msg):
    with pytest.raises(exc, match=msg):
        _varlen(*build())


def test_varlen_max_seqlen_types_are_checked_on_fake_tensors(fake):
    with pytest.raises(TypeError, match="max_seqlen_q must be a Python int"):
        _varlen(*_good(), max_q=8.0)
    with pytest.raises(ValueError, match="max_seqlen_k must be in"):
        _varlen(*_good(), max_k=-1)


def test_varlen_value_checks_run_on_real_tensors(monkeypatch):
    """With readable cu_seqlens (real tensors, not compiling), check_varlen_inputs checks their
    contents and the max_seqlen bounds; check_values=False or compiling skips that. (CPU
    tensors, with the CUDA-only q/k/v checks stubbed out: no GPU here.)"""
    monkeypatch.setattr(_validate, "_check_qkv", lambda *args: HDIM)
    q, k, v = torch.empty(9, 2, 8), torch.empty(7, 2, 8), torch.empty(7, 2, 8)
    cu_q, cu_k = _cu(0, 0, 5, 9), _cu(0, 3, 3, 7)
    assert _varlen(q, k, v, cu_q, cu_k, 5, 4) == (HDIM, 3)
    with pytest.raises(ValueError, match=r"max_seqlen_q must be >= the longest sequence in cu_seqlens_q \(5\)"):
        _varlen(q, k, v, cu_q, cu_k, 4, 4)
    with pytest.raises(ValueError, match=r"cu_seqlens_k\[-1\] must equal the packed tensor's total tokens 7"):
        _varlen(q, k, v, cu_q, _cu(0, 3, 3, 6), 5, 4)
    assert _varlen(q, k, v, cu_q, cu_k, 4, 4, check_values=False) == (HDIM, 3)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert _varlen(q, k, v, cu_q, cu_k, 4, 4) == (HDIM, 3)


def test_varlen_values_checked_once_per_unmodified_pair(monkeypatch):
    """The layers of a model step reuse one cu_seqlens pair: its values are read (a stream sync
    on the GPU) on the first call only; again after an in-place write or with other sizes; never
    taken from an entry whose tensor died (a reused id); every call for inference tensors."""
    monkeypatch.setattr(_validate, "_check_qkv", lambda *args: HDIM)
    reads = []
    real = _validate.check_cu_seqlens_values
    monkeypatch.setattr(_validate, "check_cu_seqlens_values", lambda *a, **kw: (reads.append(a[0]), real(*a, **kw)))
    q, k, v = torch.empty(9, 2, 8), torch.empty(7, 2, 8), torch.empty(7, 2, 8)
    cu_q, cu_k = _cu(0, 0, 5, 9), _cu(0, 3, 3, 7)
    for _ in range(3):
        _varlen(q, k, v, cu_q, cu_k, 5, 4)
    assert reads == ["cu_seqlens_q", "cu_seqlens_k"]
    _varlen(q, k, v, cu_q, cu_k, 6, 4)  # other sizes: checked again
    assert len(reads) == 4
    cu_k[1] = 4  # in place: the version changes, the bad value is caught
    with pytest.raises(ValueError, match="non-decreasing"):
        _varlen(q, k, v, cu_q, cu_k, 5, 4)
    # An entry left by dead tensors under the ids of live ones (what id reuse would do) is ignored.
    table = _validate._checked_cu_seqlens
    dead_q, dead_k = _cu(0, 0, 5, 9), _cu(0, 3, 3, 7)
    table.add(dead_q, dead_k, (9, 7, 5, 4))
    entry = table._entries[(id(dead_q), id(dead_k))]
    del dead_q, dead_k
    fresh_q, fresh_k = _cu(0, 9, 9, 9), _cu(0, 7, 7, 7)
    table._entries[(id(fresh_q), id(fresh_k))] = entry
    assert not table.checked(fresh_q, fresh_k, (9, 7, 5, 4))
    with pytest.raises(ValueError, match="max_seqlen_q must be >= the longest sequence"):
        _varlen(q, k, v, fresh_q, fresh_k, 5, 4)
    # A pair refreshed in place many times keeps one entry (no growth).
    n = len(table._entries)
    for i in range(200):
        cu_k[1] = 3
        _varlen(q, k, v, cu_q, cu_k, 5, 4)
    assert len(table._entries) <= n + 1
    with torch.inference_mode():
        cu_q, cu_k = _cu(0, 0, 5, 9), _cu(0, 3, 3, 7)
        reads.clear()
        _varlen(q, k, v, cu_q, cu_k, 5, 4)
        _varlen(q, k, v, cu_q, cu_k, 5, 4)
        assert len(reads) == 4


def test_checks_trace_under_torch_compile():
    """The argument checks trace without graph breaks (fullgraph), and values_readable is False
    while compiling, so no value is read from a traced tensor."""
    def f(cu_q, cu_k, slopes):
        _validate.check_cu_seqlens("cu_seqlens_q", cu_q, cu_q.device)
        check_max_seqlen("max_seqlen_q", 5)
        check_alibi_slopes(slopes, 1, 2, cu_q.device)
        left, right = check_window_size((3, -1), True)
        cap = check_softcap(2.0)
        readable = values_readable(cu_q)
        return cu_q + cu_k + (100 if readable else 0) + left + right + int(cap)

    compiled = torch.compile(f, fullgraph=True, backend="eager")
    assert compiled(_cu(0, 2), _cu(0, 3), torch.zeros(2)).tolist() == [5, 10]
    assert f(_cu(0, 2), _cu(0, 3), torch.zeros(2)).tolist() == [105, 110]
