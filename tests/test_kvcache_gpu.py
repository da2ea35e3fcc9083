"""attention_with_kvcache on the GPU (decode kernel, split-KV, GQA packing, paged caches, in-place
append, rotary) against the float32 reference (reference.kvcache_reference) with FA2's rule: our
max error <= 2 x PyTorch's low-precision error + 1e-4. Outputs are poisoned first; caches are
compared slot by slot after the append."""
import pytest
import torch
from fa2_checks import assert_fa2_close, assert_lse_close, poison

pytestmark = pytest.mark.gpu

if torch.cuda.is_available():
    import flash_attn_cuda
    from flash_attn_cuda import attention, attention_with_kvcache
    from flash_attn_cuda.reference import attention_ref, kvcache_reference

    HDIMS = flash_attn_cuda.compiled_head_dims()
    DTYPES = flash_attn_cuda.compiled_dtypes()
else:
    HDIMS, DTYPES = (64,), (torch.bfloat16,)

DTYPE = torch.bfloat16 if torch.bfloat16 in DTYPES else DTYPES[0]
# Head dims the tests sweep: the compiled ones among 64/128/256 (all the kernel's tile shapes).
SWEEP_HDIMS = [d for d in (64, 128, 256) if d in HDIMS] or list(HDIMS[:1])


def _capture(call, k_cache, v_cache):
    """call(k_cache, v_cache) captured in a CUDA graph after one warm-up call on copies of the caches
    (side stream, outside the capture): (graph, the outputs the graph writes)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        call(k_cache.clone(), v_cache.clone())
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call(k_cache, v_cache)
    return graph, out


# Ragged cache lengths (tokens already cached per sequence).
RAGGED = [0, 1, 17, 4095, 300, 64, 65, 2000]


def _cache(batch, capacity, nheads_k, hdim, page_size=None, seed=0, dtype=None):
    """Random K/V caches: contiguous (batch, capacity, hk, d), or paged (pages, page, hk, d) with a
    block_table of shuffled pages (plus two spare pages) so sequences are scattered."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    dtype = dtype or DTYPE
    if page_size is None:
        shape = (batch, capacity, nheads_k, hdim)
        return (torch.randn(shape, device="cuda", dtype=dtype, generator=g),
                torch.randn(shape, device="cuda", dtype=dtype, generator=g), None)
    pages_per_seq = -(-capacity // page_size)
    num_pages = batch * pages_per_seq + 2
    shape = (num_pages, page_size, nheads_k, hdim)
    perm = torch.randperm(num_pages, device="cuda", generator=g)[:batch * pages_per_seq]
    block_table = perm.view(batch, pages_per_seq).to(torch.int32)
    return (torch.randn(shape, device="cuda", dtype=dtype, generator=g),
            torch.randn(shape, device="cuda", dtype=dtype, generator=g), block_table)


def _check(q, k_cache, v_cache, **kw):
    """Runs ours on the caches (in place) and the reference on copies; FA2's rule for out, LSE
    within 1e-4, caches equal to the reference's after the append."""
    ref = kvcache_reference(q, k_cache, v_cache, **kw)
    lowp = kvcache_reference(q, k_cache, v_cache, compute_dtype=None, **kw)
    poison((q.shape, q.dtype))
    k_before = k_cache.clone()
    out, lse = attention_with_kvcache(q, k_cache, v_cache, return_softmax_lse=True, **kw)
    assert_fa2_close("out", out, ref.out, lowp.out)
    assert_lse_close(lse, ref.lse, rtol=2e-3 if kw.get("softcap") else 1e-4)
    assert torch.equal(v_cache, ref.v_cache), "v_cache after the append differs from the reference"
    if kw.get("rotary_cos") is None:
        assert torch.equal(k_cache, ref.k_cache), "k_cache after the append differs from the reference"
    else:  # rotated keys: fp32 rounding order may move the stored value by one ulp; other slots exact
        differ = k_cache != ref.k_cache
        assert torch.equal(differ, differ & (k_cache != k_before)), "k_cache changed outside the appended slots"
        torch.testing.assert_close(k_cache, ref.k_cache, rtol=2 * torch.finfo(DTYPE).eps, atol=1e-5)
    return out, lse


@pytest.mark.parametrize("hdim", SWEEP_HDIMS)
@pytest.mark.parametrize("nheads,nheads_k", [(8, 8), (8, 2), (16, 1), (32, 2)])
@pytest.mark.parametrize("seqlen_q,causal", [(1, False), (3, True), (5, False), (16, True)])
@pytest.mark.parametrize("page_size", [None, 16, 256])
def test_decode_matches_reference(hdim, nheads, nheads_k, seqlen_q, causal, page_size):
    batch, capacity = len(RAGGED), 4096 + 64
    torch.manual_seed(hdim + nheads * 7 + seqlen_q)
    k_cache, v_cache, block_table = _cache(batch, capacity, nheads_k, hdim, page_size, seed=hdim)
    q = torch.randn(batch, seqlen_q, nheads, hdim, device="cuda", dtype=DTYPE)
    lengths = torch.tensor(RAGGED, dtype=torch.int32, device="cuda")
    _check(q, k_cache, v_cache, cache_seqlens=lengths, block_table=block_table, causal=causal)


# Issue 10's grid: cached lengths up to 32k, GQA ratios 1 / 4 / 8 / 16 and MQA, every query count from 1
# to 16 (one 16-row tile holds seqlen_q x group rows up to 16, more take several), both dtypes.
LONG_RAGGED = [0, 1, 17, 4095, 32768, 129]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("nheads,nheads_k", [(8, 8), (16, 4), (16, 2), (32, 2), (8, 1)],
                         ids=["mha", "gqa4", "gqa8", "gqa16", "mqa"])
@pytest.mark.parametrize("causal", [False, True])
def test_long_ragged_caches_every_group_and_query_count(dtype, nheads, nheads_k, causal):
    hdim = 128 if 128 in HDIMS else SWEEP_HDIMS[0]
    batch, capacity = len(LONG_RAGGED), 32768 + 16
    k_cache, v_cache, _ = _cache(batch, capacity, nheads_k, hdim, seed=nheads_k, dtype=dtype)
    lengths = torch.tensor(LONG_RAGGED, dtype=torch.int32, device="cuda")
    torch.manual_seed(nheads * 3 + nheads_k)
    for seqlen_q in range(1, 17):
        q = torch.randn(batch, seqlen_q, nheads, hdim, device="cuda", dtype=dtype)
        _check(q, k_cache, v_cache, cache_seqlens=lengths, causal=causal)


@pytest.mark.parametrize("seqlen_q", [17, 64, 200])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("page_size", [None, 16])
def test_many_query_tokens(seqlen_q, causal, page_size):
    """Chunked prefill / speculative decoding: a few hundred query tokens (group 4: up to 800 packed
    rows, 50 tiles of 16) against ragged caches, some shorter than seqlen_q (causal rows that see no
    key: O = 0, LSE = -inf), with an append of the new tokens."""
    batch, capacity, nheads, nheads_k, hdim = 4, 4096 + 256, 8, 2, SWEEP_HDIMS[0]
    torch.manual_seed(seqlen_q)
    k_cache, v_cache, block_table = _cache(batch, capacity, nheads_k, hdim, page_size, seed=seqlen_q)
    q = torch.randn(batch, seqlen_q, nheads, hdim, device="cuda", dtype=DTYPE)
    k = torch.randn(batch, seqlen_q, nheads_k, hdim, device="cuda", dtype=DTYPE)
    v = torch.randn_like(k)
    lengths = torch.tensor([0, 5, 300, 4095], dtype=torch.int32, device="cuda")
    _check(q, k_cache, v_cache, k=k, v=v, cache_seqlens=lengths, block_table=block_table, causal=causal)


@pytest.mark.parametrize("page_size", [None, 16, 32, 64, 128, 256])
@pytest.mark.parametrize("rotary", [None, "interleaved", "neox"])
def test_append_and_rotary(page_size, rotary):
    batch, capacity, nheads, nheads_k, hdim, seqlen_new = 5, 512, 8, 2, SWEEP_HDIMS[0], 3
    torch.manual_seed(3)
    k_cache, v_cache, block_table = _cache(batch, capacity, nheads_k, hdim, page_size, seed=5)
    q = torch.randn(batch, seqlen_new, nheads, hdim, device="cuda", dtype=DTYPE)
    k = torch.randn(batch, seqlen_new, nheads_k, hdim, device="cuda", dtype=DTYPE)
    v = torch.randn_like(k)
    lengths = torch.tensor([0, 1, 100, 255, capacity - seqlen_new], dtype=torch.int32, device="cuda")
    kw = dict(k=k, v=v, cache_seqlens=lengths, block_table=block_table, causal=True)
    if rotary is not None:
        rotary_dim = hdim // 2
        angles = torch.rand(capacity, rotary_dim // 2, device="cuda") * 6.3
        kw.update(rotary_cos=angles.cos().to(DTYPE), rotary_sin=angles.sin().to(DTYPE),
                  rotary_interleaved=rotary == "interleaved")
    _check(q, k_cache, v_cache, **kw)


@pytest.mark.parametrize("causal", [False, True])
def test_rotary_query_positions_without_causal(causal):
    # Non-causal, non-local: every query token rotates at cache_seqlens (flash-attn's rule).
    batch, capacity, nheads, hdim = 2, 256, 4, SWEEP_HDIMS[0]
    k_cache, v_cache, _ = _cache(batch, capacity, nheads, hdim, seed=9)
    q = torch.randn(batch, 4, nheads, hdim, device="cuda", dtype=DTYPE)
    k = torch.randn(batch, 4, nheads, hdim, device="cuda", dtype=DTYPE)
    v = torch.randn_like(k)
    angles = torch.rand(capacity, hdim // 2, device="cuda") * 6.3
    _check(q, k_cache, v_cache, k=k, v=v, cache_seqlens=37, rotary_cos=angles.cos().to(DTYPE),
           rotary_sin=angles.sin().to(DTYPE), rotary_interleaved=False, causal=causal)


def _option_kwargs(option, nheads, window, leftpad):
    """attention_with_kvcache's keyword arguments for one option of a batch of 4 (cache rows 0-5): a left
    window of `window` keys, softcap 5, ALiBi slopes, cache_leftpad `leftpad`, or cache_batch_idx; {} for
    any other option."""
    if option == "window":
        return dict(window_size=(window, 0))
    if option == "softcap":
        return dict(softcap=5.0)
    if option == "alibi":
        return dict(alibi_slopes=torch.rand(4, nheads, device="cuda"))
    if option == "leftpad":
        return dict(cache_leftpad=torch.tensor(leftpad, dtype=torch.int32, device="cuda"))
    if option == "batch_idx":
        return dict(cache_batch_idx=torch.tensor([5, 0, 3, 1], dtype=torch.int32, device="cuda"))
    return {}


@pytest.mark.parametrize("option", ["window", "softcap", "alibi", "leftpad", "batch_idx"])
def test_options(option):
    batch, capacity, nheads, nheads_k, hdim = 4, 1024, 8, 2, SWEEP_HDIMS[-1]
    torch.manual_seed(11)
    k_cache, v_cache, _ = _cache(batch + 2, capacity, nheads_k, hdim, seed=11)
    q = torch.randn(batch, 2, nheads, hdim, device="cuda", dtype=DTYPE)
    lengths = torch.tensor([5, 700, 1000, 130], dtype=torch.int32, device="cuda")
    _check(q, k_cache, v_cache, cache_seqlens=lengths, causal=True,
           **_option_kwargs(option, nheads, window=100, leftpad=[0, 300, 999, 2]))


def test_every_num_splits_and_paged_equals_contiguous():
    batch, capacity, nheads, nheads_k, hdim, page = 3, 2048, 8, 2, SWEEP_HDIMS[0], 64
    torch.manual_seed(13)
    k_cache, v_cache, _ = _cache(batch, capacity, nheads_k, hdim, seed=13)
    pk, pv, block_table = _cache(batch, capacity, nheads_k, hdim, page, seed=14)
    for b in range(batch):  # the same data in the paged cache
        for p in range(capacity // page):
            pk[block_table[b, p]] = k_cache[b, p * page:(p + 1) * page]
            pv[block_table[b, p]] = v_cache[b, p * page:(p + 1) * page]
    q = torch.randn(batch, 1, nheads, hdim, device="cuda", dtype=DTYPE)
    lengths = torch.tensor([2048, 1, 999], dtype=torch.int32, device="cuda")
    max_splits = capacity // 64  # one K/V block (64 keys) per split
    for num_splits in list(range(1, max_splits + 1)) + [128]:
        out = _check(q, k_cache, v_cache, cache_seqlens=lengths, num_splits=num_splits)[0]
        paged = attention_with_kvcache(q, pk, pv, cache_seqlens=lengths, block_table=block_table,
                                       num_splits=num_splits)
        assert torch.equal(out, paged), f"paged != contiguous at num_splits={num_splits}"


def _paged_like(k_cache, v_cache, page_size, seed):
    """The contiguous caches' rows in a paged cache of page_size (shuffled pages, two spare ones)
    and its block_table; the capacity must be a multiple of page_size."""
    batch, capacity, nheads_k, hdim = k_cache.shape
    assert capacity % page_size == 0
    pk, pv, block_table = _cache(batch, capacity, nheads_k, hdim, page_size, seed=seed)
    pages = block_table.flatten().long()
    pk[pages] = k_cache.reshape(-1, page_size, nheads_k, hdim)
    pv[pages] = v_cache.reshape(-1, page_size, nheads_k, hdim)
    return pk, pv, block_table


@pytest.mark.parametrize("page_size", [16, 48, 96, 128, 256])  # the API takes multiples of 16
def test_paged_any_page_size_equals_contiguous(page_size):
    """Pages smaller than a 64-key tile (a tile spans several), not powers of two (division path),
    larger than a tile; ragged lengths and split starts put tiles across page boundaries. Every
    (page size, num_splits) gives the contiguous cache's output and LSE bit for bit."""
    batch, nheads, nheads_k, hdim = 4, 8, 2, SWEEP_HDIMS[0]
    capacity = page_size * -(-1536 // page_size)
    torch.manual_seed(31)
    k_cache, v_cache, _ = _cache(batch, capacity, nheads_k, hdim, seed=31)
    pk, pv, block_table = _paged_like(k_cache, v_cache, page_size, seed=32)
    q = torch.randn(batch, 2, nheads, hdim, device="cuda", dtype=DTYPE)
    lengths = torch.tensor([capacity, 1, 999, 0], dtype=torch.int32, device="cuda")
    for num_splits in (1, 3, 0):  # (a paged cache takes no cache_leftpad, as flash-attn)
        kw = dict(cache_seqlens=lengths, causal=True, num_splits=num_splits)
        out, lse = _check(q, k_cache, v_cache, **kw)
        paged, paged_lse = attention_with_kvcache(q, pk, pv, block_table=block_table, return_softmax_lse=True, **kw)
        assert torch.equal(out, paged), f"page {page_size}: paged out != contiguous at num_splits={num_splits}"
        assert torch.equal(lse, paged_lse), f"page {page_size}: paged lse != contiguous at num_splits={num_splits}"


# The decode kernel's two tiles at d = 128 (csrc/decode_traits.h kWide; FLASH_ATTN_CUDA_DECODE_WIDE forces one):
# each against the reference, paged caches (pages smaller than, not dividing, and larger than a tile)
# bit for bit equal to the contiguous one at the same num_splits, ragged lengths up to the capacity.
WIDE_RAGGED = [0, 1, 17, 4095, 6144, 129]
# The wide tile's 134 KB of shared memory fit only where an SM has >= 135 KB (sm80, sm90; not sm86 / sm89 /
# sm120, which run the base tile even when it is forced).
WIDE_FITS = torch.cuda.is_available() and torch.cuda.get_device_properties(0).shared_memory_per_multiprocessor >= 137792


# FLASH_ATTN_CUDA_DECODE_WIDE values: the base tile, the wide tile (where it fits).
TILES = pytest.mark.parametrize("tile", ["0", pytest.param("1", marks=pytest.mark.skipif(
    not WIDE_FITS, reason="the wide decode tile does not fit this GPU's shared memory"))], ids=["base", "wide"])


@pytest.mark.skipif(128 not in HDIMS, reason="the wide decode tile exists at d = 128 only; not in this build")
@TILES
@pytest.mark.parametrize("nheads,nheads_k,seqlen_q,causal", [(8, 2, 1, False), (8, 2, 4, True), (16, 1, 1, False)],
                         ids=["gqa4", "gqa4-q4-causal", "mqa"])
def test_decode_tiles_match_reference_and_paged_equals_contiguous(monkeypatch, tile, nheads, nheads_k, seqlen_q,
                                                                   causal):
    monkeypatch.setenv("FLASH_ATTN_CUDA_DECODE_WIDE", tile)
    batch, capacity, hdim = len(WIDE_RAGGED), 6144, 128
    torch.manual_seed(nheads + seqlen_q)
    k_cache, v_cache, _ = _cache(batch, capacity, nheads_k, hdim, seed=41)
    q = torch.randn(batch, seqlen_q, nheads, hdim, device="cuda", dtype=DTYPE)
    lengths = torch.tensor(WIDE_RAGGED, dtype=torch.int32, device="cuda")
    paged = {page: _paged_like(k_cache, v_cache, page, seed=42 + page) for page in (16, 48, 256)}
    for num_splits in (0, 1, 3, 7):
        out, lse = _check(q, k_cache, v_cache, cache_seqlens=lengths, causal=causal, num_splits=num_splits)
        for page, (pk, pv, block_table) in paged.items():
            p_out, p_lse = attention_with_kvcache(q, pk, pv, cache_seqlens=lengths, block_table=block_table,
                                                  causal=causal, num_splits=num_splits, return_softmax_lse=True)
            assert torch.equal(out, p_out) and torch.equal(lse, p_lse), \
                f"tile {tile}: paged{page} != contiguous at num_splits={num_splits}"


@pytest.mark.skipif(128 not in HDIMS, reason="the wide decode tile exists at d = 128 only; not in this build")
@TILES
@pytest.mark.parametrize("option", ["window", "softcap", "alibi", "leftpad", "batch_idx", "rotary_append",
                                    "paged_rotary_append"])
def test_decode_tiles_with_options(monkeypatch, tile, option):
    """Both d = 128 tiles with each option of the kernel (the masks, score mods and index paths read per
    K/V block: a window that skips whole 128-key blocks and cuts through others, softcap, ALiBi on
    packed GQA rows, leftpad, cache_batch_idx, rotary with an in-place append, contiguous and paged 16),
    unsplit, split 3 ways and by the heuristic, against the reference."""
    monkeypatch.setenv("FLASH_ATTN_CUDA_DECODE_WIDE", tile)
    batch, capacity, nheads, nheads_k, hdim, seqlen_q = 4, 2048, 8, 2, 128, 2
    torch.manual_seed(17)
    paged = option.startswith("paged")
    k_cache, v_cache, block_table = _cache(batch + 2, capacity, nheads_k, hdim, 16 if paged else None, seed=17)
    if paged:
        block_table = block_table[:batch]
    q = torch.randn(batch, seqlen_q, nheads, hdim, device="cuda", dtype=DTYPE)
    lengths = torch.tensor([5, 700, capacity - seqlen_q, 130], dtype=torch.int32, device="cuda")
    kw = dict(cache_seqlens=lengths, causal=True, block_table=block_table,
              **_option_kwargs(option, nheads, window=300, leftpad=[0, 300, 1999, 2]))
    if option.endswith("rotary_append"):  # rotary (GPT-NeoX halves) on q and the appended keys
        angles = torch.rand(capacity, hdim // 4, device="cuda") * 6.3
        kw.update(k=torch.randn(batch, seqlen_q, nheads_k, hdim, device="cuda", dtype=DTYPE),
                  v=torch.randn(batch, seqlen_q, nheads_k, hdim, device="cuda", dtype=DTYPE),
                  rotary_cos=angles.cos().to(DTYPE), rotary_sin=angles.sin().to(DTYPE), rotary_interleaved=False)
    for num_splits in (1, 3, 0):
        _check(q, k_cache.clone(), v_cache.clone(), num_splits=num_splits, **kw)


@pytest.mark.skipif(128 not in HDIMS, reason="the wide decode tile exists at d = 128 only; not in this build")
@pytest.mark.skipif(not WIDE_FITS or torch.cuda.get_device_properties(0).multi_processor_count != 132,
                    reason="the cases are the rule's picks on a 132-SM GPU with room for the wide tile (H100 SXM, H200)")
@pytest.mark.parametrize("batch,capacity,wide", [(1, 32768, True), (1, 4096, False), (32, 1024, False)],
                         ids=["1x32k-wide", "1x4k-base", "32x1k-base"])
def test_decode_tile_rule_picks_the_tile(monkeypatch, batch, capacity, wide):
    """Without the override the call runs the tile heuristics.h decode_pick_wide names (GQA 32/8, one token):
    bit for bit the forced tile's output, and not the other's."""
    nheads, nheads_k, hdim = 32, 8, 128
    torch.manual_seed(batch)
    k_cache, v_cache, _ = _cache(batch, capacity, nheads_k, hdim, seed=batch)
    q = torch.randn(batch, 1, nheads, hdim, device="cuda", dtype=DTYPE)
    lengths = torch.full((batch,), capacity, dtype=torch.int32, device="cuda")
    outs = {}
    for tile in ("auto", "0", "1"):
        if tile == "auto":
            monkeypatch.delenv("FLASH_ATTN_CUDA_DECODE_WIDE", raising=False)
        else:
            monkeypatch.setenv("FLASH_ATTN_CUDA_DECODE_WIDE", tile)
        outs[tile] = attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, num_splits=1)
    # num_splits=1: the same split for both tiles, so only the tile's summation order tells them apart
    picked, other = ("1", "0") if wide else ("0", "1")
    assert torch.equal(outs["auto"], outs[picked])
    assert not torch.equal(outs["auto"], outs[other]), "both tiles gave the same bits: the test cannot tell them apart"


@pytest.mark.parametrize("num_splits", [1, 4])
def test_bad_block_table_is_clamped(num_splits):
    """block_table entries below 0 or past the last page read (and the append writes) the clamped
    page: the same output and caches as the clamped table; an access outside the cache would fault
    at the synchronize (compute-sanitizer sees it too)."""
    batch, capacity, nheads, nheads_k, hdim, page = 2, 512, 8, 2, SWEEP_HDIMS[0], 16
    torch.manual_seed(41)
    k_cache, v_cache, block_table = _cache(batch, capacity, nheads_k, hdim, page, seed=41)
    num_pages = k_cache.shape[0]
    bad = block_table.clone()
    bad[0, 3], bad[0, 7], bad[1, 0], bad[1, 20] = -1, num_pages, -(2 ** 31), 2 ** 31 - 1
    bad[1, 31] = num_pages + 1000  # the page the append of sequence 1 writes into (slot 500)
    clamped = bad.clamp(0, num_pages - 1)
    q = torch.randn(batch, 1, nheads, hdim, device="cuda", dtype=DTYPE)
    k_new = torch.randn(batch, 1, nheads_k, hdim, device="cuda", dtype=DTYPE)
    v_new = torch.randn_like(k_new)
    lengths = torch.tensor([300, 500], dtype=torch.int32, device="cuda")
    results = []
    for table in (bad, clamped):
        kc, vc = k_cache.clone(), v_cache.clone()
        out = attention_with_kvcache(q, kc, vc, k_new, v_new, cache_seqlens=lengths, block_table=table,
                                     num_splits=num_splits)
        torch.cuda.synchronize()
        results.append((out, kc, vc))
    (out_bad, kc_bad, vc_bad), (out_ok, kc_ok, vc_ok) = results
    assert torch.isfinite(out_bad).all()
    assert torch.equal(out_bad, out_ok), "a bad block_table entry is not read as its clamped page"
    assert torch.equal(kc_bad, kc_ok) and torch.equal(vc_bad, vc_ok), "the append did not clamp the bad page"


def test_cuda_graph_generate_loop():
    """8 decode steps captured once and replayed while cache_seqlens, the new k/v, q and the
    block_table (its rows shuffled: other pages for each sequence) change."""
    batch, capacity, nheads, nheads_k, hdim = 3, 1024, 8, 2, SWEEP_HDIMS[0]
    torch.manual_seed(17)
    k_cache, v_cache, block_table = _cache(batch, capacity, nheads_k, hdim, 16, seed=17)
    k_eager, v_eager = k_cache.clone(), v_cache.clone()
    q = torch.randn(batch, 1, nheads, hdim, device="cuda", dtype=DTYPE)
    k_new = torch.randn(batch, 1, nheads_k, hdim, device="cuda", dtype=DTYPE)
    v_new = torch.randn_like(k_new)
    lengths = torch.tensor([10, 500, 900], dtype=torch.int32, device="cuda")
    call = lambda kc, vc: attention_with_kvcache(q, kc, vc, k_new, v_new, cache_seqlens=lengths,  # noqa: E731
                                                 block_table=block_table, causal=True)
    graph, out_graph = _capture(call, k_cache, v_cache)
    for step in range(8):
        q.normal_(), k_new.normal_(), v_new.normal_()
        graph.replay()
        out_eager = call(k_eager, v_eager)
        torch.cuda.synchronize()
        assert torch.equal(out_graph, out_eager), f"step {step}: replay differs from eager"
        assert torch.equal(k_cache, k_eager) and torch.equal(v_cache, v_eager), f"step {step}: caches differ"
        lengths += 1
        block_table.copy_(block_table[torch.randperm(batch, device="cuda")])


def _graph_chain_equals_eager_without_pdl(monkeypatch, chain, k_cache, v_cache):
    """chain(kc, vc) -> list of outputs: run eagerly with FLASH_ATTN_CUDA_DECODE_PDL=0 on copies of
    the caches, then captured (PDL on) and replayed on the caches themselves; every output and both
    caches bit-identical."""
    monkeypatch.setenv("FLASH_ATTN_CUDA_DECODE_PDL", "0")
    k_eager, v_eager = k_cache.clone(), v_cache.clone()
    want = chain(k_eager, v_eager)
    monkeypatch.delenv("FLASH_ATTN_CUDA_DECODE_PDL")
    graph, got = _capture(chain, k_cache, v_cache)
    graph.replay()
    torch.cuda.synchronize()
    for i, (a, b) in enumerate(zip(got, want)):
        assert torch.equal(a, b), f"step {i}: graph (PDL) differs from eager without it"
    assert torch.equal(k_cache, k_eager) and torch.equal(v_cache, v_eager)


@pytest.mark.parametrize("page_size", [None, 16], ids=["contiguous", "paged16"])
@pytest.mark.parametrize("num_splits", [1, 4])
def test_dependent_chain_in_graph_equals_eager_without_pdl(monkeypatch, num_splits, page_size):
    """Six calls captured in one graph, each call's q the previous call's output and each appending a
    key: on sm90 the decode kernel starts while the previous grid drains (programmatic dependent
    launch) and must not read q, the appended K/V or cache_seqlens before that grid's writes land
    (it only guesses its first K/V rows from them for an L2 prefetch, decode_kernel.h; the first
    sequence's appended key is among the rows it prefetches). Bit-identical to the same chain run
    eagerly with FLASH_ATTN_CUDA_DECODE_PDL=0 (no prefetch either)."""
    batch, capacity, nheads, nheads_k, hdim, steps = 3, 2048, 8, 2, SWEEP_HDIMS[0], 6
    torch.manual_seed(23)
    k_cache, v_cache, block_table = _cache(batch, capacity, nheads_k, hdim, page_size, seed=23)
    q0 = torch.randn(batch, 1, nheads, hdim, device="cuda", dtype=DTYPE)
    k_new = torch.randn(steps, batch, 1, nheads_k, hdim, device="cuda", dtype=DTYPE)
    v_new = torch.randn_like(k_new)
    lengths = [torch.tensor([5 + i, 1000 + i, 1900 + i], dtype=torch.int32, device="cuda") for i in range(steps)]

    def chain(kc, vc):
        outs, q = [], q0
        for i in range(steps):
            q = attention_with_kvcache(q, kc, vc, k_new[i], v_new[i], cache_seqlens=lengths[i], causal=True,
                                       block_table=block_table, num_splits=num_splits)
            outs.append(q)
        return outs

    _graph_chain_equals_eager_without_pdl(monkeypatch, chain, k_cache, v_cache)


@pytest.mark.parametrize("page_size", [None, 16], ids=["contiguous", "paged16"])
def test_graph_chain_rewriting_indices_equals_eager_without_pdl(monkeypatch, page_size):
    """Six calls in one graph without an append, each after kernels that rewrite cache_seqlens and
    cache_batch_idx (contiguous) or block_table (paged) in place: the decode kernel guesses its
    first K/V rows from those arrays before griddep_wait (an L2 prefetch, reads through L2 only) and
    must use only what it reads after the wait. Bit-identical to the eager chain without PDL."""
    batch, capacity, nheads, nheads_k, hdim, steps = 3, 2048, 8, 2, SWEEP_HDIMS[0], 6
    torch.manual_seed(29)
    k_cache, v_cache, table0 = _cache(batch, capacity, nheads_k, hdim, page_size, seed=29)
    q0 = torch.randn(batch, 1, nheads, hdim, device="cuda", dtype=DTYPE)
    step_lengths = [torch.randint(1, capacity + 1, (batch,), dtype=torch.int32, device="cuda") for _ in range(steps)]
    step_index = [torch.randperm(batch, device="cuda").to(torch.int32) for _ in range(steps)]
    step_tables = [table0[torch.randperm(batch, device="cuda")] if table0 is not None else None for _ in range(steps)]
    lengths = step_lengths[-1].clone()
    batch_idx = step_index[-1].clone() if table0 is None else None
    table = step_tables[-1].clone() if table0 is not None else None

    def chain(kc, vc):
        outs, q = [], q0
        for i in range(steps):
            lengths.copy_(step_lengths[i])
            if table is None:
                batch_idx.copy_(step_index[i])
            else:
                table.copy_(step_tables[i])
            q = attention_with_kvcache(q, kc, vc, cache_seqlens=lengths, cache_batch_idx=batch_idx,
                                       block_table=table, num_splits=4)
            outs.append(q.clone())
        return outs

    _graph_chain_equals_eager_without_pdl(monkeypatch, chain, k_cache, v_cache)


def test_compile_and_opcheck():
    batch, capacity, nheads, nheads_k, hdim = 2, 256, 4, 2, SWEEP_HDIMS[0]
    k_cache, v_cache, _ = _cache(batch, capacity, nheads_k, hdim, seed=21)
    q = torch.randn(batch, 1, nheads, hdim, device="cuda", dtype=DTYPE)
    k = torch.randn(batch, 1, nheads_k, hdim, device="cuda", dtype=DTYPE)
    v = torch.randn_like(k)
    lengths = torch.tensor([3, 200], dtype=torch.int32, device="cuda")
    kc, vc = k_cache.clone(), v_cache.clone()
    eager = attention_with_kvcache(q, kc, vc, k, v, cache_seqlens=lengths)
    compiled = torch.compile(attention_with_kvcache, fullgraph=True)
    kc2, vc2 = k_cache.clone(), v_cache.clone()
    assert torch.equal(compiled(q, kc2, vc2, k, v, cache_seqlens=lengths), eager)
    assert torch.equal(kc2, kc) and torch.equal(vc2, vc)
    torch.library.opcheck(torch.ops.flash_attn_cuda.fwd_kvcache,
                          (q, k_cache.clone(), v_cache.clone(), k, v, None, None, lengths, None, None, None,
                           hdim ** -0.5, False, -1, -1, 0.0, True, None, 0))


def test_one_token_attention_runs_the_kvcache_kernel():
    """attention() with one query token (seqlen_q x group <= 16) runs on the KV-cache kernel (binding.cpp
    use_decode_forward; _ops.last_fwd_family() says what served the call) and gives what
    attention_with_kvcache gives on the same keys, bit for bit (same kernel, same split count)."""
    batch, seqlen_k, nheads, nheads_k, hdim = 3, 3000, 8, 2, SWEEP_HDIMS[0]
    torch.manual_seed(37)
    q = torch.randn(batch, 1, nheads, hdim, device="cuda", dtype=DTYPE)
    k = torch.randn(batch, seqlen_k, nheads_k, hdim, device="cuda", dtype=DTYPE)
    v = torch.randn_like(k)
    poison((q.shape, q.dtype))
    out = attention(q, k, v, causal=True)
    assert flash_attn_cuda._ops.last_fwd_family() == "decode"
    ref, _ = attention_ref(q, k, v, causal=True)
    lowp, _ = attention_ref(q, k, v, causal=True, compute_dtype=None)
    assert_fa2_close("out", out, ref, lowp)
    cached = attention_with_kvcache(q, k.clone(), v.clone(), cache_seqlens=seqlen_k, causal=True)
    assert torch.equal(out, cached), "attention() and attention_with_kvcache differ on the same keys"
