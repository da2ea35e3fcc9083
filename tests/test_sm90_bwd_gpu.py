"""The Hopper (sm90) backward: gradients vs autograd through a float32 reference (FA2's rule: each of
dq, dk, dv within twice PyTorch's own low-precision error + 1e-4), on shapes that cross every tile
boundary of its tiles (64/80/128 query rows per step, 128 keys per CTA; d = 256: 64 x 64, the role-split tile), causal both ways, GQA, strided
inputs, and the check that the sm90 main kernel really ran (last_bwd_family). Runs with
FLASH_ATTN_CUDA_FAMILY=sm90 (both directions then ask for sm90); skipped where it cannot run.
"""
import pytest
import torch
from fa2_checks import assert_grads_fa2_close, grads
import flash_attn_cuda
from flash_attn_cuda import attention
from flash_attn_cuda.reference import attention_ref

pytestmark = pytest.mark.gpu

SM90_BWD_HDIMS = (64, 128, 256)  # csrc/sm90/bwd_tile_table.h
HDIMS = [d for d in SM90_BWD_HDIMS if d in (flash_attn_cuda.compiled_head_dims() or ())] or [128]
DTYPES = flash_attn_cuda.compiled_dtypes() or (torch.bfloat16,)


@pytest.fixture(autouse=True)
def _sm90(monkeypatch):
    if not flash_attn_cuda._ops.HAS_BACKWARD:
        pytest.skip("built with FLASH_ATTN_CUDA_BACKWARD=0")
    if not flash_attn_cuda._ops.HAS_SM90 or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the sm90 family needs 90a in the build and a compute capability 9.0 GPU")
    monkeypatch.setenv("FLASH_ATTN_CUDA_FAMILY", "sm90")


def check(q, k, v, causal, expect_sm90=True):
    assert_grads_fa2_close(lambda a, b, c: attention(a, b, c, causal=causal),
                           lambda a, b, c, dt: attention_ref(a, b, c, causal, compute_dtype=dt)[0],
                           (q, k, v), torch.randn_like(q))
    if expect_sm90:
        assert flash_attn_cuda._ops.last_bwd_family() == "sm90", flash_attn_cuda._ops.last_bwd_family()


def rand(*shape, dtype):
    return torch.randn(*shape, device="cuda", dtype=dtype)


# Tile edges: 1, 63/64/65, 79/80/81, 127/128/129 rows or keys; seqlen_q > seqlen_k and < (causal is
# bottom-right). 80-row tiles (FLASH_ATTN_CUDA_SM90_BWD128_NC_BLOCK_M=80) reach past the 128-row padding
# of the scratch at 81 / 127 / 1000 query rows (bwd_kernel.h copy_scratch_rows).
SEQLENS = [(1, 1), (64, 128), (65, 129), (127, 63), (63, 65), (79, 81), (81, 80), (129, 257), (200, 1000),
           (1000, 200), (1024, 1024)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hdim", HDIMS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seqlen_q,seqlen_k", SEQLENS)
def test_sm90_gradients(seqlen_q, seqlen_k, causal, hdim, dtype):
    torch.manual_seed(seqlen_q * 7 + seqlen_k + hdim)
    q = rand(2, seqlen_q, 3, hdim, dtype=dtype)
    k = rand(2, seqlen_k, 3, hdim, dtype=dtype)
    v = rand(2, seqlen_k, 3, hdim, dtype=dtype)
    check(q, k, v, causal)


# (batch, seqlen_q, seqlen_k, nheads, nheads_k): ragged tile edges; rows that see no key when causal
# (1000, 200); GQA; and many CTAs per dQ tile (32 K/V blocks of 128 keys adding into every tile, 512
# CTAs against 132 SMs), where an add that overtook a tile's first store would lose a block's part.
POISON_SHAPES = [(2, 65, 129, 3, 3), (2, 1000, 200, 3, 3), (2, 200, 1000, 3, 3), (2, 300, 300, 3, 3),
                 (2, 150, 333, 8, 2), (2, 1024, 4096, 8, 8)]


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("hdim", HDIMS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", POISON_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_sm90_gradients_on_poisoned_scratch(shape, causal, hdim, deterministic, monkeypatch):
    """dq_accum filled with NaN before every launch (FLASH_ATTN_CUDA_POISON_SCRATCH=1): whoever initialises
    it (the pre-pass's zeros, or in the store-first kernels, bwd_api.h, each tile's first K/V block), no
    tile is read uninitialised (NaN in dq) nor added to before it was stored (a lost part: dq off the
    reference)."""
    if deterministic and hdim == 256:
        pytest.skip("deterministic d = 256 runs the sm80 kernels (sm90/bwd_supports.h)")
    monkeypatch.setenv("FLASH_ATTN_CUDA_POISON_SCRATCH", "1")
    batch, seqlen_q, seqlen_k, nheads, nheads_k = shape
    torch.manual_seed(seqlen_q + 3 * seqlen_k + hdim + nheads_k)
    dtype = DTYPES[0]
    q = rand(batch, seqlen_q, nheads, hdim, dtype=dtype)
    k = rand(batch, seqlen_k, nheads_k, hdim, dtype=dtype)
    v = rand(batch, seqlen_k, nheads_k, hdim, dtype=dtype)
    assert_grads_fa2_close(lambda a, b, c: attention(a, b, c, causal=causal, deterministic=deterministic),
                           lambda a, b, c, dt: attention_ref(a, b, c, causal, compute_dtype=dt)[0],
                           (q, k, v), torch.randn_like(q))
    assert flash_attn_cuda._ops.last_bwd_family() == "sm90", flash_attn_cuda._ops.last_bwd_family()


@pytest.mark.parametrize("hdim", HDIMS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("nheads,nheads_k", [(8, 2), (6, 1)])
def test_sm90_gqa_gradients(nheads, nheads_k, causal, hdim):
    torch.manual_seed(nheads_k + hdim)
    dtype = DTYPES[0]
    q = rand(2, 150, nheads, hdim, dtype=dtype)
    k = rand(2, 333, nheads_k, hdim, dtype=dtype)
    v = rand(2, 333, nheads_k, hdim, dtype=dtype)
    check(q, k, v, causal)


def sm90_bwd_block_n(hdim):
    """Keys per CTA of the sm90 backward (csrc/sm90/bwd_tile_table.h): one tile = one K/V block of one head."""
    return 64 if hdim == 256 else 128


@pytest.mark.parametrize("hdim", HDIMS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("layout", ["sms_plus_one", "gqa_many"])
def test_sm90_more_tiles_than_sms(layout, causal, hdim):
    """More tiles than SMs, so a persistent grid (bwd_kernel.h kPersistent) walks several tiles per CTA and
    its carried pipeline phases matter: SMs + 1 tiles (one CTA takes two, the others one), or a GQA grid of
    a few tiles per SM; 300 query rows = an odd number of 64- and of 128-row blocks; causal with sq != sk."""
    torch.manual_seed(hdim + causal)
    dtype, sms = DTYPES[0], torch.cuda.get_device_properties(0).multi_processor_count
    if layout == "sms_plus_one":  # batch = SMs + 1, one head, one partial K/V block each
        batch, nheads, nheads_k, seqlen_k = sms + 1, 1, 1, sm90_bwd_block_n(hdim) - 3
    else:  # 2 x 8 heads x ceil(1100 / block_n) K/V blocks: 144 (d = 64 / 128) or 288 (d = 256) tiles
        batch, nheads, nheads_k, seqlen_k = 2, 8, 2, 1100
    q = rand(batch, 300, nheads, hdim, dtype=dtype)
    k = rand(batch, seqlen_k, nheads_k, hdim, dtype=dtype)
    v = rand(batch, seqlen_k, nheads_k, hdim, dtype=dtype)
    check(q, k, v, causal)


@pytest.mark.parametrize("hdim", [d for d in HDIMS if d in (128, 256)])
def test_sm90_causal_long_sequences_many_heads(hdim):
    """Long causal sequences (35-70 K/V blocks of very unequal length per head), 7 heads, seqlen_k !=
    seqlen_q: the shapes a reordering of the causal tiles (NOTES "Thirteenth session": longest first
    in head groups, tried and not kept) has to get right."""
    torch.manual_seed(hdim)
    seqlen_q = 4400 if hdim == 128 else 2200
    dtype = DTYPES[0]
    q = rand(1, seqlen_q, 7, hdim, dtype=dtype)
    k = rand(1, seqlen_q + 100, 7, hdim, dtype=dtype)
    v = rand(1, seqlen_q + 100, 7, hdim, dtype=dtype)
    check(q, k, v, causal=True)


@pytest.mark.parametrize("hdim", HDIMS)
def test_sm90_strided_gradients(hdim):
    qkv = rand(2, 300, 3, 4, hdim, dtype=DTYPES[-1])  # q, k, v interleaved: row stride 3 * 4 * hdim
    check(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], causal=True)


def test_sm90_leaves_unsupported_calls_to_sm80():
    """Options the sm90 backward lacks (here a sliding window) run the sm80 kernels, right."""
    if not flash_attn_cuda._ops.HAS_FEATURES:
        pytest.skip("built with FLASH_ATTN_CUDA_FEATURES=0: a window raises")
    hdim, dtype = HDIMS[0], DTYPES[0]
    q, k, v = (rand(1, 200, 2, hdim, dtype=dtype) for _ in range(3))
    assert_grads_fa2_close(lambda a, b, c: attention(a, b, c, causal=True, window_size=(32, 0)),
                           lambda a, b, c, dt: attention_ref(a, b, c, True, window_size=(32, 0), compute_dtype=dt)[0],
                           (q, k, v), torch.randn_like(q))
    assert flash_attn_cuda._ops.last_bwd_family() == "sm80"


def test_d256_runs_sm90_by_default(monkeypatch):
    """d = 256's sm90 backward (the role-split tile) is on by default (params.h kSm90BwdHdim256ByDefault):
    with the family unset a bf16 d = 256 backward runs it, right."""
    if 256 not in HDIMS or torch.bfloat16 not in DTYPES:
        pytest.skip("d = 256 bf16 not in this build")
    monkeypatch.delenv("FLASH_ATTN_CUDA_FAMILY", raising=False)
    q, k, v = (rand(1, 200, 2, 256, dtype=torch.bfloat16) for _ in range(3))
    check(q, k, v, True)
    assert flash_attn_cuda._ops.last_bwd_family() == "sm90", flash_attn_cuda._ops.last_bwd_family()


def test_fp16_runs_sm90_by_default(monkeypatch):
    """fp16 takes the sm90 backward by default too (params.h kSm90BwdByDefault, bwd_dispatch.cu
    bwd_family: no dtype condition since the fp16 build ran on the H200): right gradients, sm90 ran."""
    if torch.float16 not in DTYPES:
        pytest.skip("fp16 not in this build")
    monkeypatch.delenv("FLASH_ATTN_CUDA_FAMILY", raising=False)
    q, k, v = (rand(2, 190, 2, HDIMS[0], dtype=torch.float16) for _ in range(3))
    check(q, k, v, False)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(2, 1000, 3, 1, 1500), (1, 2048, 2, 2, 2048), (3, 257, 4, 2, 129)], ids=str)
def test_deterministic_is_bit_identical_on_sm90(shape, causal):
    """deterministic=True at d = 64/128 runs the sm90 backward, its dQ tiles taking the K/V blocks'
    adds in block order (csrc/sm90/dq_turns.h): three runs give the same bits and the gradients pass
    the reference check; d = 256 (dQ by atomics in the role-split tile) runs the sm80 kernels."""
    batch, seqlen_q, nheads, nheads_k, seqlen_k = shape
    dtype = DTYPES[0]
    for hdim in HDIMS:
        torch.manual_seed(seqlen_q + hdim)
        q = rand(batch, seqlen_q, nheads, hdim, dtype=dtype)
        k, v = (rand(batch, seqlen_k, nheads_k, hdim, dtype=dtype) for _ in range(2))
        dout = torch.randn_like(q)
        runs = []
        for _ in range(3):
            runs.append(grads(lambda a, b, c: attention(a, b, c, causal=causal, deterministic=True), (q, k, v), dout))
            want = "sm80" if hdim == 256 else "sm90"
            assert flash_attn_cuda._ops.last_bwd_family() == want, (hdim, flash_attn_cuda._ops.last_bwd_family())
        for later in runs[1:]:
            for name, a, b in zip(("dq", "dk", "dv"), runs[0], later):
                assert torch.equal(a, b), f"d = {hdim}: {name} differs between deterministic runs"
        assert_grads_fa2_close(lambda a, b, c: attention(a, b, c, causal=causal, deterministic=True),
                               lambda a, b, c, dt: attention_ref(a, b, c, causal, compute_dtype=dt)[0],
                               (q, k, v), dout)

