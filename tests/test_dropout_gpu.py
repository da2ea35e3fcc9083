"""Attention dropout on the GPU: outputs and gradients against a float32 reference that applies the
kernels' own mask (return_attn_probs' sign encoding, from the dropout_mask op on the call's
rng_state), FA2's rule; the mask's keep rate and independence; reproducibility from
torch.manual_seed; bit-identical deterministic backwards; torch.compile, opcheck and CUDA graphs.

The forward runs on both kernel families where it matters (the `family` fixture, tests/conftest.py:
sm80 always, sm90 on a compute capability 9.0 GPU with a 90a build, whose dropout variant serves
dense calls at d = 64/128/256 without softcap/ALiBi/left window); every call checks which family
served it. The backward regenerates the mask either forward drew, from its rng_state: the sm80
kernels, or with FLASH_ATTN_CUDA_FAMILY=sm90 the Hopper backward's dropout variant (head dims 64/128/256,
causal or none, without window/softcap/ALiBi/varlen/deterministic: those stay on sm80), checked by
last_bwd_family."""
import itertools
import math

import pytest
import torch
from fa2_checks import assert_fa2_close, assert_lse_close, expected_families, grads

import flash_attn_cuda
from flash_attn_cuda import attention, attention_varlen
from flash_attn_cuda.reference import attention_ref, attention_varlen_ref, dropout_keep_mask, dropout_keep_rate

pytestmark = pytest.mark.gpu

HDIMS = flash_attn_cuda.compiled_head_dims() or (64,)
DTYPE = (flash_attn_cuda.compiled_dtypes() or (torch.bfloat16,))[0]
HDIM = 128 if 128 in HDIMS else HDIMS[0]
ops = torch.ops.flash_attn_cuda


@pytest.fixture(autouse=True)
def _needs_backward_build():
    if not flash_attn_cuda._ops.HAS_BACKWARD or not flash_attn_cuda._ops.HAS_FEATURES:
        pytest.skip("needs the backward and the feature kernels")


def rand(*shape):
    return torch.randn(*shape, device="cuda", dtype=DTYPE)


def kept(probs):
    """return_attn_probs' mask: dropped elements carry a negative sign (also -0.0)."""
    return ~torch.signbit(probs)


def assert_served(family, q, k, sm90_options=True):
    """The last forward ran where FLASH_ATTN_CUDA_FAMILY=family sends a dropout call: as a plain call
    (fa2_checks.expected_families) when the sm90 kernel has its options (sm90_options), else sm80."""
    if family is None:
        return
    allowed = expected_families(family, q, k) - {"decode"} if sm90_options else {"sm80"}  # no dropout in decode
    served = flash_attn_cuda._ops.last_fwd_family()
    assert served in allowed, f"FLASH_ATTN_CUDA_FAMILY={family}: dropout forward ran on {served!r}, expected {allowed}"


def check_dense(q, k, v, p, causal=False, deterministic=False, family=None, sm90_options=True, **opts):
    """One call with return_attn_probs: out, lse and the gradients of that same call against the
    float32 reference with its mask; family: the forward must have run where that family sends it."""
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    out, lse, probs = attention(*leaves, p, None, causal, deterministic=deterministic, return_attn_probs=True, **opts)
    assert_served(family, q, k, sm90_options)
    assert probs.shape == (q.shape[0], q.shape[2], q.shape[1], k.shape[1]) and probs.dtype == torch.float32
    keep = kept(probs)

    def ref(a, b, c, dt):
        return attention_ref(a, b, c, causal, None, dt, dropout_mask=keep, dropout_p=p, **opts)

    ref_out, ref_lse = ref(q, k, v, torch.float32)
    assert_fa2_close("out", out, ref_out, ref(q, k, v, None)[0])
    assert_lse_close(lse, ref_lse)
    dout = torch.randn_like(q)
    ours = torch.autograd.grad(out, leaves, dout)
    ref_g = grads(lambda *a: ref(*a, torch.float32)[0], (q, k, v), dout.float())
    lowp_g = grads(lambda *a: ref(*a, None)[0], (q, k, v), dout)
    for name, g, r, l in zip(("dq", "dk", "dv"), ours, ref_g, lowp_g):
        assert_fa2_close(name, g, r, l)
    return keep


@pytest.mark.parametrize("hdim", HDIMS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seqlen_q,seqlen_k", [(200, 333), (385, 200)])
def test_output_and_gradients_match_the_masked_reference(seqlen_q, seqlen_k, hdim, causal, family):
    torch.manual_seed(0)
    # ragged against every tile: 16 x 64 dropout chunks, 64/128/192-row blocks (sm90: 64-row
    # warpgroups, 2 or 3 of them, 64/128-key blocks); 385 x 200 causal: rows with no key
    check_dense(rand(2, seqlen_q, 3, hdim), rand(2, seqlen_k, 3, hdim), rand(2, seqlen_k, 3, hdim), 0.17, causal,
                family=family)


@pytest.mark.parametrize("case", ["gqa_window", "softcap_alibi", "deterministic_causal", "high_p", "gqa_causal"])
def test_features_with_dropout(case, family):
    torch.manual_seed(1)
    q, k, v = rand(2, 150, 4, HDIM), rand(2, 260, 2, HDIM), rand(2, 260, 2, HDIM)
    if case == "gqa_window":
        check_dense(q, k, v, 0.3, window_size=(70, 20), family=family, sm90_options=False)
    elif case == "softcap_alibi":
        slopes = torch.rand(4, device="cuda", dtype=torch.float32) * 0.1
        check_dense(q, k, v, 0.2, softcap=8.0, alibi_slopes=slopes, family=family, sm90_options=False)
    elif case == "deterministic_causal":
        check_dense(q, k, v, 0.1, causal=True, deterministic=True, family=family)
    elif case == "gqa_causal":  # more keys than queries: causal rows end at seqlen_k - seqlen_q + row
        check_dense(q, k, v, 0.25, causal=True, family=family)
    else:
        check_dense(q, k, v, 0.9, family=family)


SM90_BWD_HDIMS = [d for d in (64, 128, 256) if d in HDIMS]  # csrc/sm90/bwd_tile_table.h


@pytest.fixture
def sm90_backward(monkeypatch):
    """FLASH_ATTN_CUDA_FAMILY=sm90 (both directions); skipped where the sm90 backward cannot run."""
    if not flash_attn_cuda._ops.HAS_SM90 or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the sm90 backward needs 90a in the build and a compute capability 9.0 GPU")
    if not SM90_BWD_HDIMS:
        pytest.skip("no sm90 backward head dim (64, 128, 256) in this build")
    monkeypatch.setenv("FLASH_ATTN_CUDA_FAMILY", "sm90")


# sm90 backward tiles: 64 queries per step, 64 keys per consumer warpgroup, 128 per CTA (d = 256, the
# role-split tile: 64 keys per CTA, consumer 0 makes the mask, consumer 1 reads it from P^T's sign); the Philox
# chunks are 16 queries x 64 keys (bwd_dropout.h): every edge, and seqlen_q > / < seqlen_k (causal
# bottom-right). Not (1, 1): with one key the exact dQ is 0 and the low-precision autograd reference
# returns exactly 0 (softmax of one element), while FA2's algebra, dS = P (dP o M / (1 - p) - D) with
# D from the bf16-rounded dropped O, leaves a rounding residual (1.7e-2 on the H200, both families'
# algebra): FA2's relative rule has no error of PyTorch's to scale there. (1, 3) keeps the one-row tile.
SM90_DROPOUT_SEQLENS = [(1, 3), (63, 65), (65, 63), (127, 129), (129, 127), (200, 1000), (1000, 200)]


@pytest.mark.parametrize("hdim", SM90_BWD_HDIMS or [64])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seqlen_q,seqlen_k", SM90_DROPOUT_SEQLENS)
def test_sm90_backward_with_dropout(seqlen_q, seqlen_k, causal, hdim, sm90_backward):
    """Gradients of the sm90 backward's dropout variant against the reference with the forward's own
    mask (return_attn_probs), and the sm90 main kernel really ran."""
    torch.manual_seed(seqlen_q * 3 + seqlen_k + hdim + causal)
    q, k, v = rand(2, seqlen_q, 3, hdim), rand(2, seqlen_k, 3, hdim), rand(2, seqlen_k, 3, hdim)
    keep = check_dense(q, k, v, 0.17, causal, family="sm90")
    assert flash_attn_cuda._ops.last_bwd_family() == "sm90", flash_attn_cuda._ops.last_bwd_family()
    if seqlen_q * seqlen_k >= 10000:  # the mask really drops (a no-op dropout would pass the gradients)
        assert not keep.all()


@pytest.mark.parametrize("hdim", SM90_BWD_HDIMS or [64])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("nheads,nheads_k", [(8, 2), (6, 1)])
def test_sm90_backward_with_dropout_gqa(nheads, nheads_k, causal, hdim, sm90_backward):
    """GQA: the mask is per query head (dropout.h dropout_rng), dK/dV summed over the group."""
    torch.manual_seed(nheads + nheads_k + hdim)
    q, k, v = rand(2, 150, nheads, hdim), rand(2, 333, nheads_k, hdim), rand(2, 333, nheads_k, hdim)
    check_dense(q, k, v, 0.3, causal, family="sm90")
    assert flash_attn_cuda._ops.last_bwd_family() == "sm90", flash_attn_cuda._ops.last_bwd_family()


@pytest.mark.parametrize("case", ["window", "softcap"])
def test_sm90_backward_leaves_the_rest_of_dropout_to_sm80(case, sm90_backward):
    """Dropout with an option the sm90 backward lacks runs the sm80 kernels (never an error, never a
    wrong gradient)."""
    torch.manual_seed(9)
    hdim = SM90_BWD_HDIMS[0]
    q, k, v = rand(2, 150, 4, hdim), rand(2, 260, 2, hdim), rand(2, 260, 2, hdim)
    opts = {"window": dict(window_size=(70, 20)), "softcap": dict(softcap=8.0)}[case]
    check_dense(q, k, v, 0.2, family="sm90", sm90_options=False, **opts)
    assert flash_attn_cuda._ops.last_bwd_family() == "sm80", flash_attn_cuda._ops.last_bwd_family()


def test_sm90_deterministic_dropout_is_bit_identical(sm90_backward):
    """Dropout with deterministic=True: d = 64/128 on the sm90 backward (dQ adds in K/V block order),
    d = 256 on the sm80 kernels; right against the reference with the call's mask, and the same seed
    gives the same gradients bit for bit."""
    for hdim in SM90_BWD_HDIMS:
        torch.manual_seed(9 + hdim)
        q, k, v = rand(2, 150, 4, hdim), rand(2, 260, 2, hdim), rand(2, 260, 2, hdim)
        torch.manual_seed(5)
        check_dense(q, k, v, 0.2, causal=True, deterministic=True, family="sm90")
        want = "sm80" if hdim == 256 else "sm90"
        assert flash_attn_cuda._ops.last_bwd_family() == want, (hdim, flash_attn_cuda._ops.last_bwd_family())
        dout = torch.randn_like(q)
        runs = []
        for _ in range(2):
            torch.manual_seed(5)
            runs.append(grads(lambda a, b, c: attention(a, b, c, 0.2, None, True, deterministic=True), (q, k, v), dout))
        for name, a, b in zip(("dq", "dk", "dv"), *runs):
            assert torch.equal(a, b), f"d = {hdim}: {name} differs between runs with the same seed"


def test_d256_dropout_backward_runs_sm90_by_default(monkeypatch):
    """d = 256's sm90 dropout backward (the role-split tile, params.h kSm90BwdHdim256DropoutByDefault)
    runs with the family unset: a d = 256 dropout call's backward runs sm90, right (the plain
    d = 256 backward's default: test_sm90_bwd_gpu.py::test_d256_runs_sm90_by_default)."""
    if 256 not in HDIMS:
        pytest.skip("needs d = 256 in the build")
    if not flash_attn_cuda._ops.HAS_SM90 or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs the sm90 family in the build and a compute capability 9.0 GPU")
    monkeypatch.delenv("FLASH_ATTN_CUDA_FAMILY", raising=False)
    torch.manual_seed(21)
    q, k, v = rand(2, 150, 4, 256), rand(2, 260, 2, 256), rand(2, 260, 2, 256)
    check_dense(q, k, v, 0.2, causal=True)
    assert flash_attn_cuda._ops.last_bwd_family() == "sm90", flash_attn_cuda._ops.last_bwd_family()


def test_families_draw_the_same_mask(family):
    """Same seed, one call per family: the same rng_state (so the same mask, a function of it), and
    each output matches the reference with that mask: the sm90 forward applies philox.h's mask."""
    q, k, v = rand(2, 384, 4, HDIM), rand(2, 384, 4, HDIM), rand(2, 384, 4, HDIM)
    torch.manual_seed(11)
    out, _, rng = fwd_rng(q, k, v, 0.2, causal=True)
    assert_served(family, q, k)
    torch.manual_seed(11)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FLASH_ATTN_CUDA_FAMILY", "sm80")
        out80, _, rng80 = fwd_rng(q, k, v, 0.2, causal=True)
    assert torch.equal(rng, rng80)
    mask = ops.dropout_mask(rng, 2, 4, 384, 384, 0.2)
    ref = attention_ref(q, k, v, True, None, torch.float32, dropout_mask=mask, dropout_p=0.2)[0]
    low = attention_ref(q, k, v, True, None, None, dropout_mask=mask, dropout_p=0.2)[0]
    assert_fa2_close("out", out, ref, low)
    assert_fa2_close("sm80 out", out80, ref, low)


def test_varlen_output_and_gradients():
    torch.manual_seed(2)
    lens_q, lens_k = [37, 0, 130, 64], [80, 5, 130, 17]
    cu_q = torch.tensor([0, *itertools.accumulate(lens_q)], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, *itertools.accumulate(lens_k)], dtype=torch.int32, device="cuda")
    q, k, v = rand(sum(lens_q), 4, HDIM), rand(sum(lens_k), 2, HDIM), rand(sum(lens_k), 2, HDIM)
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    p = 0.25
    out, lse, probs = attention_varlen(*leaves, cu_q, cu_k, max(lens_q), max(lens_k), p, causal=True,
                                       return_attn_probs=True)
    keep = kept(probs)

    def ref(a, b, c, dt):
        return attention_varlen_ref(a, b, c, cu_q, cu_k, True, None, dt, dropout_mask=keep, dropout_p=p)

    assert_fa2_close("out", out, ref(q, k, v, torch.float32)[0], ref(q, k, v, None)[0])
    dout = torch.randn_like(q)
    ours = torch.autograd.grad(out, leaves, dout)
    for name, g, r, l in zip(("dq", "dk", "dv"), ours, grads(lambda *a: ref(*a, torch.float32)[0], (q, k, v),
                                                              dout.float()),
                             grads(lambda *a: ref(*a, None)[0], (q, k, v), dout)):
        assert_fa2_close(name, g, r, l)


def fwd_rng(q, k, v, p, causal=False):
    """The raw op: (out, lse, rng_state)."""
    return ops.fwd(q, k, v, q.shape[-1] ** -0.5, causal, False, -1, -1, 0.0, None, p)


def test_dropout_mask_op_is_the_reference_function():
    q = rand(2, 100, 3, HDIM)
    _, _, rng = fwd_rng(q, q, q, 0.4)
    seed, offset = rng.tolist()
    mask = ops.dropout_mask(rng, 2, 3, 100, 170, 0.4).cpu()
    assert torch.equal(mask, dropout_keep_mask(seed, offset, 2, 3, 100, 170, 0.4))


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_keep_rate_and_independence(p):
    torch.manual_seed(3)
    batch, nheads, seqlen = 4, 8, 1024
    q = rand(batch, seqlen, nheads, HDIM)
    _, _, rng = fwd_rng(q, q, q, p)
    keep = ops.dropout_mask(rng, batch, nheads, seqlen, seqlen, p).float()
    n = keep.numel()
    rate = keep.mean().item()
    keep_rate = dropout_keep_rate(p)  # t / 256, what the kernels claim (0.8984 at p = 0.1)
    assert abs(rate - keep_rate) < 5 * math.sqrt(keep_rate * (1 - keep_rate) / n), rate
    # pairs of heads / batches / neighbouring rows and columns: both kept at rate keep_rate^2
    flat = keep.view(batch * nheads, seqlen, seqlen)
    pairs = [(flat[0], flat[1]), (flat[0], flat[nheads]), (flat[2, :-1], flat[2, 1:]), (flat[3, :, :-1], flat[3, :, 1:])]
    for a, b in pairs:
        both = (a * b).mean().item()
        m = a.numel()
        s = keep_rate ** 2
        assert abs(both - s) < 5 * math.sqrt(s * (1 - s) / m), both


def test_same_seed_same_bits_and_calls_differ(family):
    q, k, v = rand(2, 256, 4, HDIM), rand(2, 256, 4, HDIM), rand(2, 256, 4, HDIM)
    torch.manual_seed(10)
    out1, _, rng1 = fwd_rng(q, k, v, 0.3)
    assert_served(family, q, k)
    out2, _, rng2 = fwd_rng(q, k, v, 0.3)
    torch.manual_seed(10)
    out3, _, rng3 = fwd_rng(q, k, v, 0.3)
    assert torch.equal(out1, out3) and torch.equal(rng1, rng3)
    assert not torch.equal(out1, out2) and rng2[1] > rng1[1]  # the generator's offset advanced
    m1 = ops.dropout_mask(rng1, 2, 4, 256, 256, 0.3)
    m2 = ops.dropout_mask(rng2, 2, 4, 256, 256, 0.3)
    assert 0.5 < (m1 == m2).float().mean().item() < 0.65  # independent masks agree at p^2 + (1 - p)^2 = 0.58
    assert not torch.equal(m1[0, 0], m1[0, 1]) and not torch.equal(m1[0, 0], m1[1, 0])
    # dropout_p == 0: no rng_state, the plain path
    out0, _, rng0 = fwd_rng(q, k, v, 0.0)
    assert rng0.numel() == 0 and torch.equal(out0, attention(q, k, v))


@pytest.mark.parametrize("case", ["causal", "window", "gqa", "varlen"])
def test_deterministic_backward_is_bit_identical(case, family):
    torch.manual_seed(4)
    if case == "varlen":
        cu = torch.tensor([0, 300, 700], dtype=torch.int32, device="cuda")
        q, k, v = rand(700, 4, HDIM), rand(700, 4, HDIM), rand(700, 4, HDIM)
        run = lambda a, b, c: attention_varlen(a, b, c, cu, cu, 400, 400, 0.2, deterministic=True)  # noqa: E731
    else:
        hk = 2 if case == "gqa" else 4
        q, k, v = rand(2, 700, 4, HDIM), rand(2, 700, hk, HDIM), rand(2, 700, hk, HDIM)
        opts = dict(causal=case == "causal", window_size=(100, 50) if case == "window" else (-1, -1))
        run = lambda a, b, c: attention(a, b, c, 0.2, deterministic=True, **opts)  # noqa: E731
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    out = run(*leaves)
    assert_served(family, q, k, sm90_options=case in ("causal", "gqa"))
    dout = torch.randn_like(out)
    first = torch.autograd.grad(out, leaves, dout, retain_graph=True)
    second = torch.autograd.grad(out, leaves, dout)
    for a, b in zip(first, second):
        assert torch.equal(a, b)
    # and the whole step again from the same seed: same forward mask, same bits
    torch.manual_seed(5)
    out_a = run(*leaves)
    torch.manual_seed(5)
    out_b = run(*leaves)
    assert torch.equal(out_a, out_b)


def test_opcheck_with_dropout():
    q = rand(2, 64, 2, HDIM)
    utils = ("test_schema", "test_autograd_registration", "test_faketensor")  # random outputs: no aot compare
    torch.library.opcheck(ops.fwd.default, (q, q, q, 0.125, True, False, -1, -1, 0.0, None, 0.2), test_utils=utils)
    out, lse, rng = fwd_rng(q, q, q, 0.2)
    torch.library.opcheck(ops.bwd.default, (out, q, q, q, out, lse, HDIM ** -0.5, False, False, -1, -1, 0.0, None,
                                            0.2, rng), test_utils=utils)
    torch.library.opcheck(ops.dropout_mask.default, (rng, 2, 2, 64, 64, 0.2), test_utils=utils)


def test_torch_compile_matches_eager():
    """The compiled graph draws the same generator counters as eager: same seed, same bits (the
    deterministic backward, so the gradients compare bitwise too)."""
    q, k, v = (rand(2, 128, 4, HDIM).requires_grad_(True) for _ in range(3))
    dout = rand(2, 128, 4, HDIM)

    def step(a, b, c):
        return attention(a, b, c, 0.15, causal=True, deterministic=True)

    compiled = torch.compile(step, fullgraph=True)
    results = []
    for fn in (compiled, step):
        torch.manual_seed(6)
        out = fn(q, k, v)
        results.append((out, *torch.autograd.grad(out, (q, k, v), dout)))
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_cuda_graph_replays_draw_fresh_masks(family):
    """Forward and backward captured in one graph: each replay advances the generator (new mask), and
    the captured backward uses its replay's mask (= an eager deterministic backward on that rng_state).
    The forward reads seed and offset on the device at replay (dropout.h) on either family."""
    torch.manual_seed(7)
    q, k, v, dout = (rand(2, 192, 4, HDIM) for _ in range(4))
    scale = HDIM ** -0.5

    def step():
        out, lse, rng = ops.fwd(q, k, v, scale, False, True, -1, -1, 0.0, None, 0.3)
        dq, dk, dv = ops.bwd(dout, q, k, v, out, lse, scale, False, True, -1, -1, 0.0, None, 0.3, rng)
        return out, lse, rng, dq, dk, dv

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()                                  # warm-up outside capture
    assert_served(family, q, k)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = step()
    seen = []
    for _ in range(2):
        graph.replay()
        torch.cuda.synchronize()
        out, lse, rng, dq, dk, dv = (t.clone() for t in static)
        seen.append(rng.tolist())
        mask = ops.dropout_mask(rng, 2, 4, 192, 192, 0.3)
        ref = attention_ref(q, k, v, False, None, torch.float32, dropout_mask=mask, dropout_p=0.3)[0]
        low = attention_ref(q, k, v, False, None, None, dropout_mask=mask, dropout_p=0.3)[0]
        assert_fa2_close("replayed out", out, ref, low)
        eager = ops.bwd(dout, q, k, v, out, lse, scale, False, True, -1, -1, 0.0, None, 0.3, rng)
        for a, b in zip((dq, dk, dv), eager):
            assert torch.equal(a, b)
    assert seen[0] != seen[1], "each replay must draw a new offset"


def test_sdpa_serves_dropout_with_the_same_mask():
    import torch.nn.attention as registry
    if not hasattr(registry, "activate_flash_attention_impl"):
        pytest.skip("PyTorch without the flash registry (< 2.11)")
    activate_flash_attention_impl, restore_flash_attention_impl = (registry.activate_flash_attention_impl,
                                                                   registry.restore_flash_attention_impl)
    q, k, v = (rand(2, 4, 128, HDIM) for _ in range(3))   # (batch, nheads, seqlen, d)
    activate_flash_attention_impl("flash_attn_cuda")
    try:
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
            torch.manual_seed(8)
            ours_sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.25)
    finally:
        restore_flash_attention_impl()
    torch.manual_seed(8)
    ours = attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), 0.25).transpose(1, 2)
    assert torch.equal(ours_sdpa, ours)
