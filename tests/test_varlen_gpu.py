"""attention_varlen on the GPU: packed variable-length batches, forward and backward, against
the float32 reference run sequence by sequence (reference.attention_varlen_ref), with FA2's rule
(our max error <= 2 x PyTorch's low-precision error + 1e-4). Outputs are poisoned first."""
import pytest
import torch
from fa2_checks import assert_fa2_close, assert_grads_fa2_close, assert_lse_close, grads, poison
import flash_attn_cuda
from flash_attn_cuda import attention, attention_varlen
from flash_attn_cuda.reference import attention_varlen_ref

pytestmark = pytest.mark.gpu

# Without a GPU or the extension conftest skips every test here: the lists only need to exist.
HDIMS = flash_attn_cuda.compiled_head_dims() or (64,)
DTYPES = flash_attn_cuda.compiled_dtypes() or (torch.bfloat16,)
HAS_BACKWARD = flash_attn_cuda._ops.HAS_BACKWARD

# Without a GPU or the extension, conftest skips every test here for that reason alone.
needs_backward = pytest.mark.skipif(torch.cuda.is_available() and flash_attn_cuda._ops.HAS_EXTENSION and
                                    not HAS_BACKWARD, reason="this build has no backward (FLASH_ATTN_CUDA_BACKWARD=0)")

# (lengths_q, lengths_k): empty sequences, ragged tiles, one long sequence, more keys than queries
# and the reverse (causal rows that see no key), sequences longer than a 128-row scratch pad.
LENGTHS = [([5, 0, 300, 129], [7, 3, 300, 1000]), ([1000], [1000]), ([64, 64, 65], [200, 0, 65]),
           ([1, 257, 0, 383], [1, 257, 130, 0])]
# (causal, window_size, softcap, alibi)
OPTIONS = [(False, (-1, -1), 0.0, False), (True, (-1, -1), 0.0, False), (False, (50, 20), 0.0, False),
           (True, (64, -1), 0.0, True), (False, (-1, -1), 20.0, False)]


def _packed(lengths, nheads, hdim, dtype):
    """(total, nheads, hdim) random rows and int32 (batch + 1,) prefix sums on the GPU."""
    cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
    return torch.randn(sum(lengths), nheads, hdim, device="cuda", dtype=dtype), cu


def _inputs(lengths_q, lengths_k, hdim, dtype, nheads=4, nheads_k=2):
    torch.manual_seed(sum(lengths_q) * 7 + sum(lengths_k) + hdim)
    q, cu_q = _packed(lengths_q, nheads, hdim, dtype)     # (total_q, nheads, d)
    k, cu_k = _packed(lengths_k, nheads_k, hdim, dtype)   # (total_k, nheads_k, d)
    v = torch.randn_like(k)                               # (total_k, nheads_k, d)
    return q, k, v, cu_q, cu_k


def _options(lengths_q, nheads, window_size, softcap, alibi):
    slopes = torch.rand(len(lengths_q), nheads, device="cuda") if alibi else None  # (batch, nheads)
    return dict(window_size=window_size, softcap=softcap, alibi_slopes=slopes)


def check_varlen_forward(q, k, v, cu_q, cu_k, max_q, max_k, causal, opts):
    poison((q.shape, q.dtype))
    out, lse = attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=causal, return_lse=True, **opts)
    ref, ref_lse = attention_varlen_ref(q, k, v, cu_q, cu_k, causal, **opts)
    ref_lowp, _ = attention_varlen_ref(q, k, v, cu_q, cu_k, causal, compute_dtype=None, **opts)
    assert_fa2_close("out", out, ref, ref_lowp)
    assert lse.shape == (q.shape[1], q.shape[0])
    assert_lse_close(lse, ref_lse, rtol=2e-3 if opts["softcap"] else 1e-4)  # tanh.approx


def check_varlen_backward(q, k, v, cu_q, cu_k, max_q, max_k, causal, opts):
    """Gradients vs the reference; dq and the per-query-head dk/dv buffers are poisoned just
    before the backward runs (a hook on out's gradient), so rows it never writes show as NaN."""
    nheads, total_k, hdim = q.shape[1], k.shape[0], q.shape[2]

    def poison_grads(grad_out):
        poison((q.shape, q.dtype), ((total_k, nheads, hdim), q.dtype))

    def ours(a, b, c):
        out = attention_varlen(a, b, c, cu_q, cu_k, max_q, max_k, causal=causal, **opts)
        out.register_hook(poison_grads)
        return out

    assert_grads_fa2_close(
        ours, lambda a, b, c, dt: attention_varlen_ref(a, b, c, cu_q, cu_k, causal, compute_dtype=dt, **opts)[0],
        (q, k, v), torch.randn_like(q))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hdim", HDIMS)
@pytest.mark.parametrize("causal,window_size,softcap,alibi", OPTIONS, ids=str)
@pytest.mark.parametrize("lengths_q,lengths_k", LENGTHS, ids=str)
def test_varlen_forward(lengths_q, lengths_k, causal, window_size, softcap, alibi, hdim, dtype):
    q, k, v, cu_q, cu_k = _inputs(lengths_q, lengths_k, hdim, dtype)
    opts = _options(lengths_q, q.shape[1], window_size, softcap, alibi)
    check_varlen_forward(q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k), causal, opts)


@needs_backward
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hdim", HDIMS)
@pytest.mark.parametrize("causal,window_size,softcap,alibi", OPTIONS, ids=str)
@pytest.mark.parametrize("lengths_q,lengths_k", LENGTHS, ids=str)
def test_varlen_backward(lengths_q, lengths_k, causal, window_size, softcap, alibi, hdim, dtype):
    q, k, v, cu_q, cu_k = _inputs(lengths_q, lengths_k, hdim, dtype)
    opts = _options(lengths_q, q.shape[1], window_size, softcap, alibi)
    check_varlen_backward(q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k), causal, opts)


# Decode-like batches (every sequence max_seqlen_q query rows, rows x GQA group <= 16): fwd_varlen runs the
# KV-cache kernel (binding.cpp); ragged and empty key lengths, causal rows that see no key (3 queries, 1 key).
DECODE_LENGTHS = [([1] * 5, [1, 0, 4095, 300, 17]), ([3] * 4, [3, 700, 64, 1])]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hdim", HDIMS)
@pytest.mark.parametrize("causal,window_size,softcap,alibi", OPTIONS, ids=str)
@pytest.mark.parametrize("lengths_q,lengths_k", DECODE_LENGTHS, ids=str)
def test_varlen_decode_forward_and_backward(lengths_q, lengths_k, causal, window_size, softcap, alibi, hdim, dtype):
    q, k, v, cu_q, cu_k = _inputs(lengths_q, lengths_k, hdim, dtype, nheads=8, nheads_k=2)  # group 4
    opts = _options(lengths_q, q.shape[1], window_size, softcap, alibi)
    check_varlen_forward(q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k), causal, opts)
    # max_seqlen_q above every length: the same call on the prefill kernels (total_q != batch * max_seqlen_q)
    out_decode = attention_varlen(q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k), causal=causal, **opts)
    out_prefill = attention_varlen(q, k, v, cu_q, cu_k, max(lengths_q) + 1, max(lengths_k), causal=causal, **opts)
    ref_lowp, _ = attention_varlen_ref(q, k, v, cu_q, cu_k, causal, compute_dtype=None, **opts)
    ref, _ = attention_varlen_ref(q, k, v, cu_q, cu_k, causal, **opts)
    assert_fa2_close("prefill kernels", out_prefill, ref, ref_lowp)
    assert (out_decode - out_prefill).abs().max().item() <= 2 * (ref_lowp - ref).abs().max().item() + 1e-3
    if HAS_BACKWARD:
        check_varlen_backward(q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k), causal, opts)


@pytest.mark.parametrize("causal,window_size", [(False, (-1, -1)), (True, (-1, -1)), (False, (100, 250)),
                                                (True, (450, -1))], ids=str)
@pytest.mark.parametrize("extra", [200, "double"])
def test_varlen_max_seqlen_above_longest(extra, causal, window_size):
    """max_seqlen_q/k larger than every sequence (a grid with blocks past every end), window
    sides between the sequences' lengths and max_seqlen."""
    hdim, dtype = HDIMS[0], DTYPES[0]
    lengths_q, lengths_k = [300, 40, 0, 129], [200, 400, 17, 129]
    q, k, v, cu_q, cu_k = _inputs(lengths_q, lengths_k, hdim, dtype)
    max_q, max_k = ((2 * max(lengths_q), 2 * max(lengths_k)) if extra == "double"
                    else (max(lengths_q) + extra, max(lengths_k) + extra))
    opts = _options(lengths_q, q.shape[1], window_size, 0.0, False)
    check_varlen_forward(q, k, v, cu_q, cu_k, max_q, max_k, causal, opts)
    if HAS_BACKWARD:
        check_varlen_backward(q, k, v, cu_q, cu_k, max_q, max_k, causal, opts)


def test_varlen_strided_packed_inputs():
    """q, k, v as slices of one packed qkv projection (total, 3, nheads, d): read in place."""
    hdim, dtype = HDIMS[-1], DTYPES[-1]
    lengths = [100, 0, 257]
    torch.manual_seed(5)
    qkv = torch.randn(sum(lengths), 3, 4, hdim, device="cuda", dtype=dtype)   # (total, 3, nheads, d)
    q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]                                 # (total, nheads, d), strided
    cu = torch.tensor([0, 100, 100, 357], dtype=torch.int32, device="cuda")
    opts = _options(lengths, 4, (-1, -1), 0.0, False)
    check_varlen_forward(q, k, v, cu, cu, 257, 257, True, opts)
    if HAS_BACKWARD:
        check_varlen_backward(q, k, v, cu, cu, 257, 257, True, opts)


@needs_backward
@pytest.mark.parametrize("causal", [False, True])
def test_varlen_matches_padded_batch(causal):
    """Equal lengths: the packed batch is the padded batch reshaped; both paths agree closely."""
    hdim, dtype, batch, seqlen = HDIMS[-1], DTYPES[0], 3, 300
    torch.manual_seed(3)
    q, k, v = (torch.randn(batch, seqlen, 4, hdim, device="cuda", dtype=dtype) for _ in range(3))
    cu = torch.arange(0, (batch + 1) * seqlen, seqlen, dtype=torch.int32, device="cuda")
    dout = torch.randn_like(q)
    padded = grads(lambda a, b, c: attention(a, b, c, causal=causal), (q, k, v), dout)
    packed = grads(lambda a, b, c: attention_varlen(a, b, c, cu, cu, seqlen, seqlen, causal=causal),
                   [t.flatten(0, 1) for t in (q, k, v)], dout.flatten(0, 1))
    for a, b in zip(padded, packed):
        torch.testing.assert_close(a.flatten(0, 1), b, rtol=0, atol=2e-2)


@needs_backward
def test_varlen_deterministic_backward():
    hdim, dtype = HDIMS[0], DTYPES[0]
    lengths_q, lengths_k = [300, 0, 1000, 77], [500, 20, 1000, 77]
    q, k, v, cu_q, cu_k = _inputs(lengths_q, lengths_k, hdim, dtype)
    dout = torch.randn_like(q)

    def ours(a, b, c):
        return attention_varlen(a, b, c, cu_q, cu_k, 1000, 1000, causal=True, deterministic=True)

    assert_grads_fa2_close(ours, lambda a, b, c, dt: attention_varlen_ref(a, b, c, cu_q, cu_k, True,
                                                                         compute_dtype=dt)[0], (q, k, v), dout)
    runs = [grads(ours, (q, k, v), dout) for _ in range(3)]
    for later in runs[1:]:
        for a, b in zip(runs[0], later):
            assert torch.equal(a, b), "deterministic varlen gradients differ between runs"


@needs_backward
def test_varlen_compile_and_opcheck():
    hdim, dtype = HDIMS[0], DTYPES[0]
    q, k, v, cu_q, cu_k = _inputs([100, 0, 37], [64, 5, 200], hdim, dtype)

    def loss(a, b, c):  # deterministic: dq's float32 atomics would make the bits run-dependent
        out = attention_varlen(a, b, c, cu_q, cu_k, 100, 200, causal=True, deterministic=True)
        return out.float().square().sum()

    eager = grads(loss, (q, k, v), torch.tensor(1.0, device="cuda"))
    compiled = grads(torch.compile(loss, fullgraph=True), (q, k, v), torch.tensor(1.0, device="cuda"))
    for a, b in zip(eager, compiled):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    out, lse, _ = torch.ops.flash_attn_cuda.fwd_varlen(q, k, v, cu_q, cu_k, 100, 200, hdim ** -0.5, True)
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]  # opcheck tests autograd too
    torch.library.opcheck(torch.ops.flash_attn_cuda.fwd_varlen.default,
                          (*leaves, cu_q, cu_k, 100, 200, hdim ** -0.5, True))
    torch.library.opcheck(torch.ops.flash_attn_cuda.bwd_varlen.default,
                          (torch.randn_like(out), q, k, v, out, lse, cu_q, cu_k, 100, 200, hdim ** -0.5, True),
                          test_utils=("test_schema", "test_faketensor"))
