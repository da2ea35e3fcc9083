"""attention_with_kvcache (flash-attn 2's flash_attn_with_kvcache) on the CPU: the pure-PyTorch
reference in float64 (rotary, append, paged == contiguous, left padding, split-KV combine)
against direct formulas and attention_ref, and every validation error of the public function on
fake CUDA tensors, plus the op's schema and fake implementation under torch.library.opcheck."""
import inspect
import math

import pytest
import torch


from flash_attn_cuda import kvcache, reference  # noqa: E402  (the package imports without _C)
attention_ref = reference.attention_ref
kvcache_reference = reference.kvcache_reference

# Tolerance rule (float64: the algebra is exact up to rounding), written once.
TOL = dict(rtol=1e-9, atol=1e-9)
F64 = torch.float64


def randn(*shape, dtype=F64, gen=None):
    return torch.randn(*shape, dtype=dtype, generator=gen)


def rotary_tables(seqlen_ro, rotary_dim, gen=None):
    angle = torch.rand(seqlen_ro, rotary_dim // 2, dtype=F64, generator=gen) * 2 * math.pi
    return angle.cos(), angle.sin()


def to_paged(cache, page_size, gen):
    """A contiguous cache (batch, capacity, hk, d) scattered into shuffled pages, plus spare
    pages of noise: returns (paged (num_pages, page_size, hk, d), block_table int32 (batch, pages))."""
    batch, capacity = cache.shape[:2]
    pages_per_seq = capacity // page_size
    num_pages = batch * pages_per_seq + 3
    paged = randn(num_pages, page_size, *cache.shape[2:], gen=gen)
    block_table = torch.randperm(num_pages, generator=gen)[:batch * pages_per_seq].view(batch, pages_per_seq)
    paged[block_table.flatten()] = cache.reshape(batch * pages_per_seq, page_size, *cache.shape[2:])
    return paged, block_table.to(torch.int32)


# ---------------------------------------------------------------- rotary

def rotary_direct(x, cos, sin, positions, interleaved):
    """Pair by pair, as the formula reads (x: (b, s, h, d), positions (b, s))."""
    out = x.clone()
    half = cos.shape[1]
    for i in range(half):
        a, b = (2 * i, 2 * i + 1) if interleaved else (i, i + half)
        c, s = cos[positions, i][..., None], sin[positions, i][..., None]     # (b, s, 1)
        out[..., a] = x[..., a] * c - x[..., b] * s
        out[..., b] = x[..., a] * s + x[..., b] * c
    return out


@pytest.mark.parametrize("interleaved", [True, False])
@pytest.mark.parametrize("rotary_dim", [16, 32, 48])
def test_rotary_matches_the_formula(interleaved, rotary_dim):
    gen = torch.Generator().manual_seed(rotary_dim)
    x = randn(2, 5, 3, 48, gen=gen)
    cos, sin = rotary_tables(20, rotary_dim, gen)
    positions = torch.randint(0, 20, (2, 5), generator=gen)
    got = reference.apply_rotary_reference(x, cos, sin, positions, interleaved)
    torch.testing.assert_close(got, rotary_direct(x, cos, sin, positions, interleaved), **TOL)
    assert torch.equal(got[..., rotary_dim:], x[..., rotary_dim:])         # the rest is untouched


def test_rotary_interleaved_is_complex_multiplication_and_neox_its_permutation():
    gen = torch.Generator().manual_seed(1)
    x = randn(1, 6, 2, 32, gen=gen)
    cos, sin = rotary_tables(6, 32, gen)
    positions = torch.arange(6)[None]
    got = reference.apply_rotary_reference(x, cos, sin, positions, True)
    phase = torch.polar(torch.ones_like(cos), torch.atan2(sin, cos))[positions][..., None, :]   # (1, 6, 1, 16)
    expected = torch.view_as_real(torch.view_as_complex(x.reshape(1, 6, 2, 16, 2).contiguous()) * phase)
    torch.testing.assert_close(got, expected.reshape(x.shape), **TOL)
    perm = torch.cat((torch.arange(0, 32, 2), torch.arange(1, 32, 2)))      # interleaved -> halves
    neox = reference.apply_rotary_reference(x[..., perm], cos, sin, positions, False)
    torch.testing.assert_close(neox, got[..., perm], **TOL)


def test_rotary_rounds_to_the_input_dtype():
    x = torch.randn(1, 3, 1, 16).to(torch.float16)
    cos, sin = rotary_tables(3, 16)
    got = reference.apply_rotary_reference(x, cos.half(), sin.half(), torch.arange(3)[None], True)
    assert got.dtype == torch.float16


# ---------------------------------------------------------------- kvcache_reference == attention_ref

OPTIONS = [
    dict(),
    dict(causal=True),
    dict(window_size=(5, 2)),
    dict(causal=True, window_size=(7, -1)),
    dict(softcap=3.0),
    dict(alibi_slopes=torch.tensor([0.3, 0.1, 0.05, 0.2], dtype=F64)),
    dict(alibi_slopes=torch.rand(4, 4, dtype=F64), causal=True),
]
OPTION_IDS = ["plain", "causal", "window", "causal_window", "softcap", "alibi", "alibi_batch_causal"]


def slopes_of(options, b):
    slopes = options.get("alibi_slopes")
    return slopes if slopes is None or slopes.dim() == 1 else slopes[b:b + 1]


def per_sequence_ref(q, keys, values, options, b):
    """attention_ref on one sequence's visible keys (the definition the kv-cache call must meet)."""
    kw = {k: v for k, v in options.items() if k != "alibi_slopes"}
    return attention_ref(q[b:b + 1], keys, values, compute_dtype=F64, alibi_slopes=slopes_of(options, b), **kw)


@pytest.mark.parametrize("options", OPTIONS, ids=OPTION_IDS)
@pytest.mark.parametrize("seqlen_q", [1, 3])
def test_no_append_equals_attention_on_the_sliced_cache(options, seqlen_q):
    gen = torch.Generator().manual_seed(seqlen_q)
    seqlens = [0, 1, 17, 40]
    q, k_cache, v_cache = randn(4, seqlen_q, 4, 16, gen=gen), randn(4, 40, 2, 16, gen=gen), randn(4, 40, 2, 16, gen=gen)
    res = kvcache_reference(q, k_cache, v_cache, cache_seqlens=torch.tensor(seqlens, dtype=torch.int32),
                            compute_dtype=F64, **options)
    for b, n in enumerate(seqlens):
        out, lse = per_sequence_ref(q, k_cache[b:b + 1, :n], v_cache[b:b + 1, :n], options, b)
        torch.testing.assert_close(res.out[b:b + 1], out, **TOL)
        torch.testing.assert_close(res.lse[b:b + 1], lse, **TOL)
    assert torch.equal(res.out[0], torch.zeros_like(res.out[0])) and res.lse[0].eq(float("-inf")).all()
    assert torch.equal(res.k_cache, k_cache) and torch.equal(res.v_cache, v_cache)


def test_without_cache_seqlens_the_whole_cache_is_attended():
    gen = torch.Generator().manual_seed(2)
    q, k_cache, v_cache = randn(2, 3, 4, 16, gen=gen), randn(2, 24, 4, 16, gen=gen), randn(2, 24, 4, 16, gen=gen)
    res = kvcache_reference(q, k_cache, v_cache, causal=True, compute_dtype=F64)
    out, lse = attention_ref(q, k_cache, v_cache, causal=True, compute_dtype=F64)
    torch.testing.assert_close(res.out, out, **TOL)
    torch.testing.assert_close(res.lse, lse, **TOL)


def test_cache_batch_idx_picks_cache_rows():
    gen = torch.Generator().manual_seed(3)
    q, k_cache, v_cache = randn(2, 2, 2, 16, gen=gen), randn(5, 30, 2, 16, gen=gen), randn(5, 30, 2, 16, gen=gen)
    idx = torch.tensor([4, 1], dtype=torch.int32)
    k_new, v_new = randn(2, 2, 2, 16, gen=gen), randn(2, 2, 2, 16, gen=gen)
    seqlens = torch.tensor([10, 27], dtype=torch.int32)
    res = kvcache_reference(q, k_cache, v_cache, k_new, v_new, cache_seqlens=seqlens, cache_batch_idx=idx,
                            causal=True, compute_dtype=F64)
    direct = kvcache_reference(q, k_cache[idx.long()], v_cache[idx.long()], k_new, v_new, cache_seqlens=seqlens,
                               causal=True, compute_dtype=F64)
    torch.testing.assert_close(res.out, direct.out, **TOL)
    assert torch.equal(res.k_cache[idx.long()], direct.k_cache)
    untouched = [0, 2, 3]
    assert torch.equal(res.k_cache[untouched], k_cache[untouched])
    assert torch.equal(res.v_cache[untouched], v_cache[untouched])


@pytest.mark.parametrize("options", OPTIONS, ids=OPTION_IDS)
def test_leftpad_hides_the_first_slots_and_keeps_the_bottom_right_alignment(options):
    """Sequence b is slots [leftpad, end): the same as attention_ref on that slice alone."""
    gen = torch.Generator().manual_seed(4)
    q, k_cache, v_cache = randn(4, 3, 4, 16, gen=gen), randn(4, 40, 2, 16, gen=gen), randn(4, 40, 2, 16, gen=gen)
    k_new, v_new = randn(4, 2, 2, 16, gen=gen), randn(4, 2, 2, 16, gen=gen)
    seqlens, leftpad = [5, 20, 38, 9], [0, 7, 30, 9]
    res = kvcache_reference(q, k_cache, v_cache, k_new, v_new, cache_seqlens=torch.tensor(seqlens, dtype=torch.int32),
                            cache_leftpad=torch.tensor(leftpad, dtype=torch.int32), compute_dtype=F64, **options)
    for b, (n, pad) in enumerate(zip(seqlens, leftpad)):
        keys = torch.cat((k_cache[b, pad:n], k_new[b]))[None]
        values = torch.cat((v_cache[b, pad:n], v_new[b]))[None]
        out, lse = per_sequence_ref(q, keys, values, options, b)
        torch.testing.assert_close(res.out[b:b + 1], out, **TOL)
        torch.testing.assert_close(res.lse[b:b + 1], lse, **TOL)


# ---------------------------------------------------------------- append and rotary positions

@pytest.mark.parametrize("rotary", [None, "interleaved", "neox"])
@pytest.mark.parametrize("paged", [False, True])
def test_append_writes_exactly_the_new_slots(rotary, paged):
    gen = torch.Generator().manual_seed(5)
    batch, capacity, seqlen_new = 3, 64, 4
    q, k_new, v_new = randn(batch, 4, 4, 32, gen=gen), randn(batch, seqlen_new, 2, 32, gen=gen), randn(
        batch, seqlen_new, 2, 32, gen=gen)
    k_cont, v_cont = randn(batch, capacity, 2, 32, gen=gen), randn(batch, capacity, 2, 32, gen=gen)
    seqlens = torch.tensor([0, 13, capacity - seqlen_new], dtype=torch.int32)
    cos, sin = rotary_tables(capacity, 16, gen) if rotary else (None, None)
    k_cache, v_cache, block_table = k_cont, v_cont, None
    if paged:
        k_cache, block_table = to_paged(k_cont, 16, torch.Generator().manual_seed(9))
        v_cache, _ = to_paged(v_cont, 16, torch.Generator().manual_seed(9))
    res = kvcache_reference(q, k_cache, v_cache, k_new, v_new, cos, sin, cache_seqlens=seqlens,
                            block_table=block_table, rotary_interleaved=rotary == "interleaved", compute_dtype=F64)
    # the expected cache: the new rows (keys rotated at slots cache_seqlens + i) in place, nothing else
    positions = seqlens.long()[:, None] + torch.arange(seqlen_new)
    k_rot = k_new if cos is None else rotary_direct(k_new, cos, sin, positions, rotary == "interleaved")
    k_want, v_want = k_cont.clone(), v_cont.clone()
    for b in range(batch):
        k_want[b, positions[b]], v_want[b, positions[b]] = k_rot[b], v_new[b]
    if paged:
        k_got = reference.paged_gather_reference(res.k_cache, block_table, capacity)
        v_got = reference.paged_gather_reference(res.v_cache, block_table, capacity)
        spare = sorted(set(range(k_cache.shape[0])) - set(block_table.flatten().tolist()))
        assert torch.equal(res.k_cache[spare], k_cache[spare]) and torch.equal(res.v_cache[spare], v_cache[spare])
    else:
        k_got, v_got = res.k_cache, res.v_cache
    written = torch.zeros(batch, capacity, dtype=torch.bool)
    for b in range(batch):
        written[b, positions[b]] = True
    assert torch.equal(k_got[~written], k_cont[~written]) and torch.equal(v_got[~written], v_cont[~written])
    torch.testing.assert_close(k_got[written], k_want[written], **TOL)
    assert torch.equal(v_got, v_want)


@pytest.mark.parametrize("options,per_row", [(dict(), False), (dict(causal=True), True),
                                             (dict(window_size=(8, 8)), True), (dict(window_size=(-1, 2)), True),
                                             (dict(window_size=(64, 64)), False)],
                         ids=["plain", "causal", "window", "right_only", "window_past_capacity"])
@pytest.mark.parametrize("interleaved", [True, False])
def test_rotary_positions_of_q_and_new_k(options, per_row, interleaved):
    """New key i at cache_seqlens + i; query i there too when causal or local, else all queries at
    cache_seqlens. A window side >= the capacity counts as none (flash-attn's rule)."""
    gen = torch.Generator().manual_seed(6)
    batch, seqlen_q, capacity = 2, 3, 64
    q, k_new, v_new = randn(batch, seqlen_q, 4, 32, gen=gen), randn(batch, 2, 2, 32, gen=gen), randn(
        batch, 2, 2, 32, gen=gen)
    k_cache, v_cache = randn(batch, capacity, 2, 32, gen=gen), randn(batch, capacity, 2, 32, gen=gen)
    seqlens = [11, 50]
    cos, sin = rotary_tables(capacity, 32, gen)
    res = kvcache_reference(q, k_cache, v_cache, k_new, v_new, cos, sin,
                            cache_seqlens=torch.tensor(seqlens, dtype=torch.int32), rotary_interleaved=interleaved,
                            compute_dtype=F64, **options)
    window = reference.kvcache_window(options.get("causal", False), options.get("window_size", (-1, -1)), capacity)
    assert reference.rotary_q_per_row(window) == per_row
    for b, n in enumerate(seqlens):
        k_pos = n + torch.arange(2)[None]
        q_pos = n + (torch.arange(seqlen_q) if per_row else torch.zeros(seqlen_q, dtype=torch.long))[None]
        keys = torch.cat((k_cache[b, :n], rotary_direct(k_new[b:b + 1], cos, sin, k_pos, interleaved)[0]))[None]
        values = torch.cat((v_cache[b, :n], v_new[b]))[None]
        q_rot = rotary_direct(q[b:b + 1], cos, sin, q_pos, interleaved)
        out, lse = attention_ref(q_rot, keys, values, compute_dtype=F64, window_size=window)
        torch.testing.assert_close(res.out[b:b + 1], out, **TOL)
        torch.testing.assert_close(res.lse[b:b + 1], lse, **TOL)


# ---------------------------------------------------------------- paged == contiguous

@pytest.mark.parametrize("page_size", [16, 64, 256])
@pytest.mark.parametrize("options", OPTIONS[:4], ids=OPTION_IDS[:4])
@pytest.mark.parametrize("append", [False, True])
def test_paged_equals_contiguous(page_size, options, append):
    gen = torch.Generator().manual_seed(page_size)
    batch, capacity, seqlen_new = 5, 512, 3
    q = randn(batch, 2, 4, 32, gen=gen)
    k_cont, v_cont = randn(batch, capacity, 2, 32, gen=gen), randn(batch, capacity, 2, 32, gen=gen)
    k_new, v_new = (randn(batch, seqlen_new, 2, 32, gen=gen), randn(batch, seqlen_new, 2, 32, gen=gen)) if append \
        else (None, None)
    room = capacity - (seqlen_new if append else 0)
    seqlens = torch.tensor([0, 1, 17, page_size + 1, room], dtype=torch.int32)           # ragged, page edges
    cos, sin = rotary_tables(capacity, 16, gen) if append else (None, None)
    k_paged, block_table = to_paged(k_cont, page_size, torch.Generator().manual_seed(1))
    v_paged, _ = to_paged(v_cont, page_size, torch.Generator().manual_seed(1))
    common = dict(cache_seqlens=seqlens, compute_dtype=F64, **options)
    cont = kvcache_reference(q, k_cont, v_cont, k_new, v_new, cos, sin, **common)
    paged = kvcache_reference(q, k_paged, v_paged, k_new, v_new, cos, sin, block_table=block_table, **common)
    torch.testing.assert_close(paged.out, cont.out, **TOL)
    torch.testing.assert_close(paged.lse, cont.lse, **TOL)
    assert torch.equal(reference.paged_gather_reference(paged.k_cache, block_table, capacity), cont.k_cache)
    assert torch.equal(reference.paged_gather_reference(paged.v_cache, block_table, capacity), cont.v_cache)


def test_paged_gather_reads_pages_in_block_table_order():
    cache = torch.arange(6 * 4, dtype=F64).view(6, 4, 1, 1)           # page p holds 4p .. 4p + 3
    table = torch.tensor([[5, 0, 3], [1, 1, 2]], dtype=torch.int32)
    got = reference.paged_gather_reference(cache, table, 10)
    assert got.shape == (2, 10, 1, 1)
    assert got[0, :, 0, 0].tolist() == [20, 21, 22, 23, 0, 1, 2, 3, 12, 13]
    assert got[1, :, 0, 0].tolist() == [4, 5, 6, 7, 4, 5, 6, 7, 8, 9]
    assert reference.paged_gather_reference(cache, table[0], 5)[:, 0, 0].tolist() == [20, 21, 22, 23, 0]
    bad = torch.tensor([2, 10**6], dtype=torch.int32)                  # entries past the length are not read
    assert reference.paged_gather_reference(cache, bad, 4)[:, 0, 0].tolist() == [8, 9, 10, 11]


# ---------------------------------------------------------------- split-KV combine

@pytest.mark.parametrize("options", OPTIONS, ids=OPTION_IDS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_split_combine_equals_unsplit_attention(options, seed):
    """Attention over each contiguous key range (same alignment, other keys hidden), merged by
    split_kv_combine_reference, equals attention over all keys; ranges may be empty or see
    nothing (LSE -inf)."""
    gen = torch.Generator().manual_seed(seed)
    seqlen_q, seqlen_k = 6, 45
    q, k, v = randn(4, seqlen_q, 4, 16, gen=gen), randn(4, seqlen_k, 2, 16, gen=gen), randn(4, seqlen_k, 2, 16, gen=gen)
    cuts = sorted(torch.randint(0, seqlen_k + 1, (int(torch.randint(1, 7, (1,), generator=gen)),),
                                generator=gen).tolist())
    edges = [0] + cuts + [seqlen_k]
    keys = torch.arange(seqlen_k)
    parts = [attention_ref(q, k, v, compute_dtype=F64, key_mask=(keys >= a) & (keys < b), **options)
             for a, b in zip(edges[:-1], edges[1:])]
    out, lse = reference.split_kv_combine_reference(torch.stack([p[0] for p in parts]),
                                                    torch.stack([p[1].transpose(1, 2) for p in parts]))
    full_out, full_lse = attention_ref(q, k, v, compute_dtype=F64, **options)
    torch.testing.assert_close(out, full_out, **TOL)
    torch.testing.assert_close(lse.transpose(1, 2), full_lse, **TOL)


def test_split_combine_of_rows_no_split_saw():
    o = torch.full((3, 2, 4), float("nan"), dtype=F64)                   # empty splits' outputs are not read
    lse = torch.full((3, 2), float("-inf"), dtype=F64)
    o[1, 1], lse[1, 1] = 2.0, 0.5
    out, combined = reference.split_kv_combine_reference(o, lse)
    assert torch.equal(out[0], torch.zeros(4, dtype=F64)) and combined[0] == float("-inf")
    assert torch.equal(out[1], torch.full((4,), 2.0, dtype=F64)) and combined[1] == 0.5


def test_key_mask_keeps_the_alignment():
    """attention_ref's key_mask hides keys without moving the diagonal: hiding a prefix equals
    attention on the suffix alone (the shift is the same relative to the last key)."""
    gen = torch.Generator().manual_seed(7)
    q, k, v = randn(2, 4, 2, 16, gen=gen), randn(2, 20, 2, 16, gen=gen), randn(2, 20, 2, 16, gen=gen)
    slopes = torch.tensor([0.2, 0.4], dtype=F64)
    masked = attention_ref(q, k, v, True, compute_dtype=F64, alibi_slopes=slopes, key_mask=torch.arange(20) >= 6)
    sliced = attention_ref(q, k[:, 6:], v[:, 6:], True, compute_dtype=F64, alibi_slopes=slopes)
    torch.testing.assert_close(masked[0], sliced[0], **TOL)
    torch.testing.assert_close(masked[1], sliced[1], **TOL)
    per_batch = torch.stack((torch.arange(20) >= 6, torch.arange(20) >= 0))   # (batch, seqlen_k)
    both = attention_ref(q, k, v, True, compute_dtype=F64, key_mask=per_batch)
    torch.testing.assert_close(both[0][:1], attention_ref(q[:1], k[:1, 6:], v[:1, 6:], True, compute_dtype=F64)[0],
                               **TOL)
    torch.testing.assert_close(both[0][1:], attention_ref(q[1:], k[1:], v[1:], True, compute_dtype=F64)[0], **TOL)


# ---------------------------------------------------------------- signature, schema, fake

FLASH_ATTN_WITH_KVCACHE = ["q", "k_cache", "v_cache", "k", "v", "rotary_cos", "rotary_sin", "cache_seqlens",
                           "cache_batch_idx", "cache_leftpad", "block_table", "softmax_scale", "causal", "window_size",
                           "softcap", "rotary_interleaved", "alibi_slopes", "num_splits", "return_softmax_lse"]


def test_signature_is_flash_attn_with_kvcache():
    for fn in (kvcache.attention_with_kvcache, kvcache_reference):
        params = inspect.signature(fn).parameters
        assert [n for n, p in params.items() if p.kind == p.POSITIONAL_OR_KEYWORD] == FLASH_ATTN_WITH_KVCACHE
    defaults = {n: p.default for n, p in inspect.signature(kvcache.attention_with_kvcache).parameters.items()}
    assert defaults["window_size"] == (-1, -1) and defaults["rotary_interleaved"] is True
    assert defaults["num_splits"] == 0 and defaults["softcap"] == 0.0 and defaults["causal"] is False


@pytest.fixture(scope="module")
def test_op():
    """fwd_kvcache's schema in a scratch namespace with the reference as its CPU kernel and
    fwd_kvcache_fake as its fake: what the C++ op and the lead's registration will be."""
    lib = torch.library.Library("flash_attn_cuda_kvcache_test", "DEF")
    lib.define(kvcache.FWD_KVCACHE_SCHEMA)

    def cpu_impl(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx, cache_leftpad,
                 block_table, softmax_scale, causal, window_left, window_right, softcap, rotary_interleaved,
                 alibi_slopes, num_splits):
        res = kvcache_reference(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                                cache_leftpad, block_table, softmax_scale, causal, (window_left, window_right),
                                softcap, rotary_interleaved, alibi_slopes, num_splits)
        k_cache.copy_(res.k_cache)
        v_cache.copy_(res.v_cache)
        return res.out.to(q.dtype), res.lse.float()

    lib.impl("fwd_kvcache", cpu_impl, "CPU")
    torch.library.register_fake("flash_attn_cuda_kvcache_test::fwd_kvcache", kvcache.fwd_kvcache_fake, lib=lib)
    yield torch.ops.flash_attn_cuda_kvcache_test.fwd_kvcache
    lib._destroy()


def test_schema_and_fake_pass_opcheck(test_op):
    gen = torch.Generator().manual_seed(8)
    q, k_new, v_new = torch.randn(2, 3, 4, 16, generator=gen), torch.randn(2, 2, 2, 16, generator=gen), torch.randn(
        2, 2, 2, 16, generator=gen)
    k_cache, v_cache = torch.randn(2, 32, 2, 16, generator=gen), torch.randn(2, 32, 2, 16, generator=gen)
    cos, sin = (t.float() for t in rotary_tables(32, 16, gen))
    seqlens = torch.tensor([3, 20], dtype=torch.int32)
    args = (q, k_cache, v_cache, k_new, v_new, cos, sin, seqlens, None, None, None, 0.25, True, -1, 0, 0.0, True,
            None, 0)
    torch.library.opcheck(test_op, args)
    out, lse = test_op(*args)
    assert out.shape == q.shape and lse.shape == (2, 4, 3) and lse.dtype == torch.float32


def test_fake_shapes(fake):
    q = torch.empty(3, 2, 8, 64, dtype=torch.bfloat16, device="cuda")
    cache = torch.empty(3, 128, 2, 64, dtype=torch.bfloat16, device="cuda")
    out, lse = kvcache.fwd_kvcache_fake(q, cache, cache, None, None, None, None, None, None, None, None, 0.125,
                                        False, -1, -1, 0.0, True, None, 0)
    assert out.shape == q.shape and out.dtype == q.dtype and out.is_contiguous()
    assert lse.shape == (3, 8, 2) and lse.dtype == torch.float32 and lse.device == q.device


# ---------------------------------------------------------------- validation (fake CUDA tensors)

DT = torch.float16


def t(*shape, dtype=DT, device="cuda"):
    return torch.empty(*shape, dtype=dtype, device=device)


def i32(*shape, device="cuda", dtype=torch.int32):
    return torch.zeros(*shape, dtype=dtype, device=device)


def base(**over):
    """A valid decode call: batch 2, one query, 4 heads over 2 K/V heads, d 64, capacity 128,
    one new key appended at tensor cache_seqlens."""
    kw = dict(q=t(2, 1, 4, 64), k_cache=t(2, 128, 2, 64), v_cache=t(2, 128, 2, 64), k=t(2, 1, 2, 64),
              v=t(2, 1, 2, 64), cache_seqlens=i32(2))
    kw.update(over)
    return kw


def paged(**over):
    """The same call on a paged cache: 10 pages of 16 rows, 8 pages per sequence (capacity 128)."""
    return base(**{**dict(k_cache=t(10, 16, 2, 64), v_cache=t(10, 16, 2, 64), block_table=i32(2, 8)), **over})


def cos_sin(*shape, **kw):
    """rotary_cos and rotary_sin of one shape, normally (seqlen_ro, rotary_dim / 2)."""
    return dict(rotary_cos=t(*shape, **kw), rotary_sin=t(*shape, **kw))


BAD = [
    # (id, kwargs builder, exception, message fragment)
    ("q_cpu", lambda: base(q=t(2, 1, 4, 64, device="cpu")), ValueError, "must be a CUDA tensor"),
    ("q_float32", lambda: base(q=t(2, 1, 4, 64, dtype=torch.float32)), TypeError, "float16 or torch.bfloat16"),
    ("q_3d", lambda: base(q=t(2, 4, 64)), ValueError, r"q must be 4-D \(batch, seqlen_q"),
    ("q_not_tensor", lambda: base(q=[1.0]), TypeError, "q must be a torch.Tensor"),
    ("cache_dtype", lambda: base(k_cache=t(2, 128, 2, 64, dtype=torch.bfloat16)), TypeError, "share a dtype"),
    ("new_k_dtype", lambda: base(k=t(2, 1, 2, 64, dtype=torch.bfloat16)), TypeError, "share a dtype"),
    ("cache_3d", lambda: base(k_cache=t(128, 2, 64)), ValueError, r"k_cache must be 4-D \(batch_cache"),
    ("paged_cache_3d", lambda: paged(v_cache=t(16, 2, 64)), ValueError, r"v_cache must be 4-D \(num_pages"),
    ("cache_shapes", lambda: base(v_cache=t(2, 64, 2, 64)), ValueError, "same shape"),
    ("head_dims", lambda: base(k_cache=t(2, 128, 2, 32), v_cache=t(2, 128, 2, 32)), ValueError, "head dims differ"),
    ("d_too_big", lambda: base(q=t(2, 1, 4, 264), k_cache=t(2, 128, 2, 264), v_cache=t(2, 128, 2, 264), k=None,
                               v=None), ValueError, "<= 256"),
    ("d_not_multiple_of_8", lambda: base(q=t(2, 1, 4, 60), k_cache=t(2, 128, 2, 60), v_cache=t(2, 128, 2, 60),
                                         k=None, v=None), ValueError, "multiple of 8"),
    ("heads_ratio", lambda: base(q=t(2, 1, 3, 64)), ValueError, "multiple of nheads of k_cache"),
    ("cache_last_dim_strided", lambda: base(k_cache=t(2, 128, 2, 128)[..., ::2]), ValueError,
     "contiguous last dimension"),
    ("cache_misaligned", lambda: base(k_cache=t(2, 128, 2, 72)[..., 1:65]), ValueError, "16-byte aligned"),
    ("k_without_v", lambda: base(v=None), ValueError, "k and v together"),
    ("new_k_batch", lambda: base(k=t(3, 1, 2, 64), v=t(3, 1, 2, 64)), ValueError, r"k must have shape \(batch"),
    ("new_v_heads", lambda: base(v=t(2, 1, 4, 64)), ValueError, r"v must have shape"),
    ("new_kv_seqlens", lambda: base(v=t(2, 2, 2, 64)), ValueError, r"v must have shape"),
    ("k_without_cache_seqlens", lambda: base(cache_seqlens=None), ValueError, "pass cache_seqlens"),
    ("cache_seqlens_float", lambda: base(cache_seqlens=3.0), TypeError, "cache_seqlens must be an int"),
    ("cache_seqlens_bool", lambda: base(cache_seqlens=True), TypeError, "cache_seqlens must be an int"),
    ("cache_seqlens_int64", lambda: base(cache_seqlens=i32(2, dtype=torch.int64)), TypeError, "torch.int32"),
    ("cache_seqlens_shape", lambda: base(cache_seqlens=i32(3)), ValueError,
     r"cache_seqlens must have shape \(batch,\)"),
    ("cache_seqlens_cpu", lambda: base(cache_seqlens=i32(2, device="cpu")), ValueError, "q's device"),
    ("cache_seqlens_int_full", lambda: base(cache_seqlens=128), ValueError, "must fit the cache"),
    ("cache_seqlens_int_negative", lambda: base(cache_seqlens=-1), ValueError, "must fit the cache"),
    ("new_rows_past_capacity", lambda: base(k=t(2, 129, 2, 64), v=t(2, 129, 2, 64)), ValueError,
     "more than the cache holds"),
    ("cache_batch_too_small", lambda: base(q=t(3, 1, 4, 64), k=None, v=None, cache_seqlens=None), ValueError,
     "fewer than batch"),
    ("batch_idx_int64", lambda: base(cache_batch_idx=i32(2, dtype=torch.int64)), TypeError, "cache_batch_idx must be"),
    ("batch_idx_shape", lambda: base(cache_batch_idx=i32(2, 1)), ValueError, "cache_batch_idx must have shape"),
    ("leftpad_float", lambda: base(cache_leftpad=t(2)), TypeError, "cache_leftpad must be torch.int32"),
    ("leftpad_shape", lambda: base(cache_leftpad=i32(1)), ValueError, "cache_leftpad must have shape"),
    ("leftpad_cpu", lambda: base(cache_leftpad=i32(2, device="cpu")), ValueError, "q's device"),
    ("block_table_int64", lambda: paged(block_table=i32(2, 8, dtype=torch.int64)), TypeError, "block_table must be"),
    ("block_table_1d", lambda: paged(block_table=i32(8)), ValueError, r"\(batch, max_pages_per_seq\)"),
    ("block_table_rows", lambda: paged(block_table=i32(3, 8)), ValueError, r"= \(2, \*\)"),
    ("block_table_cpu", lambda: paged(block_table=i32(2, 8, device="cpu")), ValueError, "q's device"),
    ("paged_with_batch_idx", lambda: paged(cache_batch_idx=i32(2)), ValueError, "does not take cache_batch_idx"),
    ("paged_with_leftpad", lambda: paged(cache_leftpad=i32(2)), ValueError, "does not take cache_leftpad"),
    ("page_size_8", lambda: paged(k_cache=t(10, 8, 2, 64), v_cache=t(10, 8, 2, 64)), ValueError,
     "positive multiple of 16"),
    ("page_size_24", lambda: paged(k_cache=t(10, 24, 2, 64), v_cache=t(10, 24, 2, 64)), ValueError,
     "multiple of 16"),
    ("no_pages", lambda: paged(k_cache=t(0, 16, 2, 64), v_cache=t(0, 16, 2, 64)), ValueError, "at least one page"),
    ("paged_int_seqlens_full", lambda: paged(cache_seqlens=128), ValueError, "capacity 128"),
    ("cos_without_sin", lambda: base(rotary_cos=t(128, 16)), ValueError, "rotary_cos and rotary_sin together"),
    ("rotary_without_k", lambda: base(k=None, v=None, **cos_sin(128, 16)), ValueError, "need k and v"),
    ("rotary_not_tensor", lambda: base(rotary_cos=[1.0], rotary_sin=[1.0]), TypeError, "rotary_cos must be a torch"),
    ("rotary_dtype", lambda: base(**cos_sin(128, 16, dtype=torch.float32)), TypeError,
     "rotary_cos must have q's dtype"),
    ("rotary_3d", lambda: base(**cos_sin(1, 128, 16)), ValueError, "must be 2-D"),
    ("rotary_shapes", lambda: base(rotary_cos=t(128, 16), rotary_sin=t(128, 8)), ValueError, "of one shape"),
    ("rotary_cpu", lambda: base(**cos_sin(128, 16, device="cpu")), ValueError, "rotary_cos must be on q's device"),
    ("rotary_strided", lambda: base(rotary_cos=t(128, 32)[:, ::2], rotary_sin=t(128, 16)), ValueError,
     "must be contiguous"),
    ("rotary_dim_8", lambda: base(**cos_sin(128, 4)), ValueError, "positive multiple of 16"),
    ("rotary_dim_past_d", lambda: base(**cos_sin(128, 40)), ValueError, "<= headdim 64, got 80"),
    ("rotary_dim_0", lambda: base(**cos_sin(128, 0)), ValueError, "got 0"),
    ("rotary_short_tensor_seqlens", lambda: base(**cos_sin(127, 16)), ValueError, "pass at least 128 rows"),
    ("rotary_short_int_seqlens", lambda: base(cache_seqlens=100, **cos_sin(100, 16)), ValueError,
     "pass at least 101 rows"),
    ("rotary_short_causal_q", lambda: base(q=t(2, 4, 4, 64), cache_seqlens=100, causal=True, **cos_sin(103, 16)),
     ValueError, "pass at least 104 rows"),
    ("num_splits_negative", lambda: base(num_splits=-1), ValueError, "num_splits"),
    ("num_splits_129", lambda: base(num_splits=129), ValueError, "up to 128"),
    ("num_splits_float", lambda: base(num_splits=1.5), TypeError, "num_splits must be an int"),
    ("num_splits_bool", lambda: base(num_splits=True), TypeError, "num_splits must be an int"),
    ("window_type", lambda: base(window_size=4), TypeError, "window_size must be a tuple"),
    ("window_value", lambda: base(window_size=(-2, 0)), ValueError, "window_size left must be >= -1"),
    ("softcap_negative", lambda: base(softcap=-1.0), ValueError, "softcap must be 0"),
    ("softmax_scale_zero", lambda: base(softmax_scale=0.0), ValueError, "softmax_scale"),
    ("alibi_dtype", lambda: base(alibi_slopes=t(4)), TypeError, "alibi_slopes must be torch.float32"),
    ("alibi_shape", lambda: base(alibi_slopes=t(2, dtype=torch.float32)), ValueError, "alibi_slopes must have shape"),
]


@pytest.mark.parametrize("build,exc,msg", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_inputs_raise_one_clear_exception(fake, build, exc, msg):
    with pytest.raises(exc, match=msg):
        kvcache.attention_with_kvcache(**build())


GOOD = [
    ("decode", lambda: base()),
    ("no_new_kv", lambda: base(k=None, v=None, cache_seqlens=None)),
    ("int_seqlens_last_slot", lambda: base(cache_seqlens=127)),
    ("bigger_cache_batch", lambda: base(k_cache=t(5, 128, 2, 64), v_cache=t(5, 128, 2, 64))),
    ("batch_idx", lambda: base(q=t(3, 1, 4, 64), k=t(3, 1, 2, 64), v=t(3, 1, 2, 64), cache_seqlens=i32(3),
                               cache_batch_idx=i32(3))),
    ("leftpad", lambda: base(cache_leftpad=i32(2))),
    ("strided_index_tensors", lambda: base(cache_seqlens=i32(4)[::2], cache_leftpad=i32(4)[::2])),
    ("paged", lambda: paged()),
    ("paged_48", lambda: paged(k_cache=t(10, 48, 2, 64), v_cache=t(10, 48, 2, 64))),
    ("rotary_tensor_seqlens", lambda: base(**cos_sin(128, 32))),
    ("rotary_exact_int", lambda: base(cache_seqlens=100, **cos_sin(101, 16))),
    ("rotary_noncausal_q_shares_a_row", lambda: base(q=t(2, 4, 4, 64), cache_seqlens=100, **cos_sin(101, 16))),
    ("rotary_full_d", lambda: base(**cos_sin(128, 32), rotary_interleaved=False)),
    ("options", lambda: base(causal=True, window_size=(32, 0), softcap=30.0, num_splits=128)),
    ("alibi", lambda: base(alibi_slopes=t(2, 4, dtype=torch.float32))),
]


@pytest.mark.parametrize("build", [g[1] for g in GOOD], ids=[g[0] for g in GOOD])
def test_good_inputs_pass_validation(fake, build):
    args = kvcache.check_kvcache_inputs(**build(), check_device=False)
    assert args.cache_seqlens is None or (args.cache_seqlens.dtype == torch.int32
                                          and args.cache_seqlens.is_contiguous() and args.cache_seqlens.is_cuda)
    assert all(x is None or x.is_contiguous() for x in (args.cache_batch_idx, args.cache_leftpad, args.block_table))


def test_int_cache_seqlens_becomes_a_device_tensor(fake):
    args = kvcache.check_kvcache_inputs(**base(cache_seqlens=7), check_device=False)
    assert args.cache_seqlens.shape == (2,) and args.cache_seqlens.dtype == torch.int32
    assert args.cache_seqlens.device.type == "cuda"
    assert args.softmax_scale == 64 ** -0.5 and (args.window_left, args.window_right) == (-1, -1)
    assert isinstance(args.num_splits, int) and args.causal is False and args.rotary_interleaved is True


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [(-1, -1), (0, 0), (5, -1), (-1, 3), (127, 128), (128, 127), (200, 200)])
def test_window_rule_agrees_with_the_reference(fake, causal, window):
    """Validation and reference normalise the window the same way (causal: right 0; a side >= the
    capacity 128: unbounded), so the op's causal/local flag and rotary rows are the reference's."""
    args = kvcache.check_kvcache_inputs(**base(causal=causal, window_size=window), check_device=False)
    assert (args.window_left, args.window_right) == reference.kvcache_window(causal, window, 128)


@pytest.mark.extension
def test_valid_call_reaches_the_op(fake):
    """Past validation the call goes to torch.ops.flash_attn_cuda.fwd_kvcache (its fake impl on
    fake tensors), in a dtype and head dim this build compiled. Every bad-input test above ran
    before that check: the validation comes first."""
    from flash_attn_cuda import compiled_dtypes, compiled_head_dims
    dtype, d = compiled_dtypes()[0], compiled_head_dims()[0]
    call = dict(q=t(2, 1, 4, d, dtype=dtype), k_cache=t(2, 128, 2, d, dtype=dtype),
                v_cache=t(2, 128, 2, d, dtype=dtype), k=t(2, 1, 2, d, dtype=dtype), v=t(2, 1, 2, d, dtype=dtype),
                cache_seqlens=i32(2))
    out, lse = kvcache.attention_with_kvcache(**call, return_softmax_lse=True)
    assert out.shape == (2, 1, 4, d) and lse.shape == (2, 4, 1) and lse.dtype == torch.float32
