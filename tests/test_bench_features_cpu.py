"""The GQA/varlen benchmark's GPU-free parts: FLOPs of packed and causal batches (against dense
mask counts), seeded lengths and cu_seqlens, pad/unpad, the key-padding mask and what the padded
baselines compute (SDPA on the CPU, float64), the correctness gate, tables, options and the
refusal without a GPU."""
import itertools

import pytest
import torch

from flash_attn_cuda import bench, bench_features as bf
from flash_attn_cuda.reference import attention_ref, attention_varlen_ref, visible_mask

F64 = torch.float64


# ---- FLOPs ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("seqlen_q,seqlen_k", list(itertools.product([0, 1, 2, 5, 16, 17], [0, 1, 3, 16, 33])))
def test_causal_pairs_count_the_bottom_right_mask(seqlen_q, seqlen_k):
    dense = int(visible_mask(seqlen_q, seqlen_k, causal=True).sum()) if seqlen_q and seqlen_k else 0
    assert bf.causal_pairs(seqlen_q, seqlen_k) == dense


def test_causal_pairs_of_equal_lengths():
    assert [bf.causal_pairs(s, s) for s in (1, 2, 3, 1024)] == [1, 3, 6, 1024 * 1025 // 2]


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_flops_sum_visible_pairs_per_sequence(causal):
    lengths_q, lengths_k = [5, 1, 12, 7], [5, 3, 12, 2]
    pairs = sum(int(visible_mask(sq, sk, causal=causal).sum()) for sq, sk in zip(lengths_q, lengths_k))
    fwd = 4.0 * pairs * 16 * 128
    assert bf.varlen_flops(lengths_q, lengths_k, 16, 128, causal) == fwd
    assert bf.varlen_flops(lengths_q, lengths_k, 16, 128, causal, "bwd") == 2.5 * fwd
    assert bf.varlen_flops(lengths_q, lengths_k, 16, 128, causal, "fwdbwd") == 3.5 * fwd


def test_varlen_flops_of_equal_lengths_match_the_dense_formula():
    # Non-causal: the grid's formula. Causal: s(s+1)/2 pairs per sequence, a little over half.
    assert bf.varlen_flops([512] * 3, [512] * 3, 8, 64, False) == bench.attention_flops(3, 512, 8, 64, False)
    causal = bf.varlen_flops([512] * 3, [512] * 3, 8, 64, True)
    assert causal == 3 * 4.0 * (512 * 513 // 2) * 8 * 64
    assert causal > bench.attention_flops(3, 512, 8, 64, True)


# ---- lengths, cu_seqlens, padding ----------------------------------------------------------------

@pytest.mark.parametrize("max_seqlen", [1, 3, 1024, 4096])
def test_random_lengths_are_seeded_and_within_bounds(max_seqlen):
    lengths = bf.random_lengths(16, max_seqlen, seed=7)
    assert len(lengths) == 16 and all(isinstance(n, int) for n in lengths)
    assert all(max(1, max_seqlen // 4) <= n <= max_seqlen for n in lengths)
    assert bf.random_lengths(16, max_seqlen, seed=7) == lengths
    if max_seqlen >= 1024:
        assert bf.random_lengths(16, max_seqlen, seed=8) != lengths
        assert len(set(lengths)) > 8  # random, not constant


def test_random_lengths_cover_the_range():
    lengths = bf.random_lengths(4000, 64, seed=0)
    assert min(lengths) == 16 and max(lengths) == 64


def test_cu_seqlens_are_int32_prefix_sums():
    cu = bf.cu_seqlens([3, 1, 4, 1])
    assert cu.dtype == torch.int32 and cu.tolist() == [0, 3, 4, 8, 9]
    lengths = bf.random_lengths(16, 1024, seed=0)
    cu = bf.cu_seqlens(lengths)
    assert cu.shape == (17,) and cu[0] == 0 and cu[-1] == sum(lengths)
    assert torch.diff(cu).tolist() == lengths


def test_pad_unpad_round_trip_and_layout():
    lengths, max_seqlen = [3, 5, 1], 6
    cu, index = bf.cu_seqlens(lengths).tolist(), bf.pad_index(lengths, max_seqlen)
    x = torch.randn(sum(lengths), 2, 8)  # (total, nheads, d)
    padded = bf.pad(x, index, len(lengths), max_seqlen)  # (batch, max_seqlen, nheads, d)
    assert padded.shape == (3, 6, 2, 8)
    for b, n in enumerate(lengths):
        assert torch.equal(padded[b, :n], x[cu[b]:cu[b + 1]])
        assert not padded[b, n:].any()  # zeros after each sequence
    assert torch.equal(bf.unpad(padded, index), x)
    assert torch.equal(bf.unpad(padded.transpose(1, 2).contiguous().transpose(1, 2), index), x)  # strided too


def test_pad_and_unpad_are_differentiable():
    lengths, max_seqlen = [2, 4], 4
    index = bf.pad_index(lengths, max_seqlen)
    x = torch.randn(6, 1, 4, dtype=F64, requires_grad=True)  # (total, nheads, d)
    w = torch.randn(2, 4, 1, 4, dtype=F64)  # (batch, max_seqlen, nheads, d)
    (grad,) = torch.autograd.grad((bf.pad(x, index, 2, max_seqlen) * w).sum(), x)
    assert torch.equal(grad, bf.unpad(w, index))


def test_key_padding_bias():
    bias = bf.key_padding_bias([2, 4, 1], 4, torch.bfloat16)
    assert bias.shape == (3, 1, 1, 4) and bias.dtype == torch.bfloat16
    assert torch.isinf(bias[:, 0, 0]).tolist() == [[False, False, True, True], [False] * 4, [False, True, True, True]]
    assert (bias[bias.isfinite()] == 0).all()


# ---- what the rows compute (SDPA's flash backend on the CPU, float64) ----------------------------

def packed_batch(lengths, nheads=2, hdim=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(sum(lengths), nheads, hdim, generator=g, dtype=F64) for _ in range(3))  # (total, h, d)


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_reference_is_attention_per_sequence(causal):
    lengths = [5, 9, 1, 12]
    q, k, v = packed_batch(lengths)
    cu = bf.cu_seqlens(lengths)
    expected, _ = attention_varlen_ref(q, k, v, cu, cu, causal=causal, compute_dtype=F64)
    torch.testing.assert_close(bf.varlen_reference(q, k, v, cu, causal), expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("causal", [False, True])
def test_padded_sdpa_gives_the_varlen_result_where_it_says_so(causal):
    # Causal: no mask needed (padding comes after every real query). Non-causal: the key-padding
    # mask gives the varlen result and no mask does not (the "upper bound on speed" rows).
    lengths, max_seqlen = [5, 9, 3], 12
    q, k, v = packed_batch(lengths)
    cu, index = bf.cu_seqlens(lengths), bf.pad_index(lengths, max_seqlen)
    exact = bf.varlen_reference(q, k, v, cu, causal)  # (total, nheads, d)
    padded = [bf.pad(t, index, len(lengths), max_seqlen) for t in (q, k, v)]  # (batch, max_seqlen, nheads, d)
    bias = None if causal else bf.key_padding_bias(lengths, max_seqlen, F64)

    def through_pad(impl, attn):
        return bf.unpad(bf.in_bshd(impl, attn)(*padded), index)
    torch.testing.assert_close(through_pad("sdpa_flash", bf.sdpa_fn("sdpa_flash", causal, bias=bias)), exact,
                               rtol=1e-9, atol=1e-9)
    if not causal:
        no_mask = through_pad("sdpa_flash", bf.sdpa_fn("sdpa_flash", False))
        assert (no_mask - exact).abs().max() > 1e-2
        torch.testing.assert_close(no_mask, bf.unpad(bf.sdpa_reference(*padded, False), index))


@pytest.mark.parametrize("gqa", ["enable_gqa", "expand"])
@pytest.mark.parametrize("causal", [False, True])
def test_gqa_sdpa_variants_and_reference_match_attention_ref(gqa, causal):
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 24, 8, 16, generator=g, dtype=F64)  # (batch, seqlen, nheads, d)
    k, v = (torch.randn(2, 24, 2, 16, generator=g, dtype=F64) for _ in range(2))  # (batch, seqlen, nheads_kv, d)
    expected, _ = attention_ref(q, k, v, causal=causal, compute_dtype=F64)
    torch.testing.assert_close(bf.sdpa_reference(q, k, v, causal), expected, rtol=1e-9, atol=1e-9)
    out = bf.in_bshd("sdpa_flash", bf.sdpa_fn("sdpa_flash", causal, gqa))(q, k, v)
    torch.testing.assert_close(out, expected, rtol=1e-9, atol=1e-9)


def test_padded_fwdbwd_callable_gives_varlen_gradients():
    # The incl.-pad timing path: bench.make_bwd over packed inputs with attn = pad -> SDPA -> unpad.
    lengths, max_seqlen = [4, 7], 8
    q, k, v = packed_batch(lengths, seed=3)
    dout = torch.randn_like(q)
    cu, index = bf.cu_seqlens(lengths), bf.pad_index(lengths, max_seqlen)
    bias = bf.key_padding_bias(lengths, max_seqlen, F64)
    core = bf.in_bshd("sdpa_flash", bf.sdpa_fn("sdpa_flash", False, bias=bias))

    def attn(q, k, v):  # packed (total, nheads, d) in and out
        return bf.unpad(core(*(bf.pad(t, index, 2, max_seqlen) for t in (q, k, v))), index)
    fns = bench.make_bwd("flash_attn_cuda", [(q.clone(), k.clone(), v.clone(), dout)], False, attn)
    leaves = tuple(t.clone().requires_grad_() for t in (q, k, v))
    expected = torch.autograd.grad(bf.varlen_reference(*leaves, cu, False), leaves, dout)
    for got, want in zip(fns["fwdbwd"](0), expected):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)


# ---- the correctness gate, candidates, tables ----------------------------------------------------

def test_checked_passes_close_outputs_and_drops_mismatches():
    ref = torch.full((4, 2, 8), 2.0, dtype=torch.bfloat16)
    bound = bf.CHECK_EPS * torch.finfo(torch.bfloat16).eps * 2.0
    row = {"impl": "x"}
    assert bf.checked(row, ref + bound / 2, ref) and "error" not in row
    row = {"impl": "x"}
    assert not bf.checked(row, ref + 0.5, ref)
    assert row["error"].startswith("mismatch: max abs error 5.000e-01") and row["max_err"] == "5.00e-01"
    nan = ref.clone()
    nan[0, 0, 0] = float("nan")
    assert not bf.checked({"impl": "x"}, nan, ref)


def test_pick_falls_back_to_the_next_candidate():
    def refuse(q, k, v):
        raise RuntimeError("No available kernel")
    q = k = v = dout = torch.ones(1, 2, 1, 4)
    ok = ("b", lambda q, k, v: q + k + v, True)
    (label, _, exact), out = bf.pick([("a", refuse, True), ok], lambda a: a, (q, k, v, dout), with_grad=True)
    assert label == "b" and exact and torch.equal(out, 3 * q)
    with pytest.raises(RuntimeError, match="No available kernel"):
        bf.pick([("a", refuse, True)], lambda a: a, (q, k, v, dout), with_grad=False)


def test_md_table_ratios_against_ours_of_the_same_shape():
    rows = [{"impl": "flash_attn_cuda", "causal": True, "seqlen": 1024, "fwd_tflops": 300.0, "max_err": "1e-03"},
            {"impl": "sdpa_flash(expand)", "causal": True, "seqlen": 1024, "fwd_tflops": 200.0},
            {"impl": "flash_attn_cuda", "causal": True, "seqlen": 4096, "fwd_tflops": 330.0},
            {"impl": "sdpa_cudnn", "causal": True, "seqlen": 4096, "fwd_tflops": "", "error": "no kernel"}]
    lines = bf.md_table(rows, ["causal", "seqlen", "impl"], ["causal", "seqlen"], ["fwd_tflops"]).splitlines()
    assert lines[0] == "| causal | seqlen | impl | fwd TFLOP/s | ours/this fwd | max err |"
    assert lines[2] == "| True | 1024 | flash_attn_cuda | 300.0 | 1.00 | 1e-03 |"
    assert lines[3] == "| True | 1024 | sdpa_flash(expand) | 200.0 | 1.50 | n/a |"
    assert lines[5] == "| True | 4096 | sdpa_cudnn | n/a | n/a | n/a |"
    assert lines[-1] == "- sdpa_cudnn (causal=True, seqlen=4096): no kernel"


# ---- options and no GPU --------------------------------------------------------------------------

def test_defaults():
    args = bf.parse_args([])
    assert (args.nheads, args.nheads_kv, args.hdim, args.tokens, args.dtype) == (32, 8, 128, 16384, "bf16")
    assert args.seqlens == [1024, 4096, 16384] and args.causals == [False, True]
    assert (args.varlen_batch, args.varlen_maxlens, args.varlen_nheads) == (16, [1024, 4096], 16)
    assert args.benches == ["gqa", "varlen"] and args.directions == ["fwd", "bwd"]
    assert args.impls == list(bf.IMPLS) and "flash_attn_cuda_sm80" not in bf.IMPLS


def test_options_are_parsed():
    args = bf.parse_args(["--benches", "varlen", "--directions", "fwd", "--causal", "1", "--nheads", "16",
                          "--nheads-kv", "2", "--seqlens", "2048", "--varlen-maxlens", "512,8192", "--impls",
                          "flash_attn_cuda,sdpa_cudnn", "--seed", "3"])
    assert args.benches == ["varlen"] and args.directions == ["fwd"] and args.causals == [True]
    assert (args.nheads, args.nheads_kv, args.seqlens, args.varlen_maxlens) == (16, 2, [2048], [512, 8192])
    assert args.impls == ["flash_attn_cuda", "sdpa_cudnn"] and args.seed == 3


@pytest.mark.parametrize("argv", [["--nheads", "32", "--nheads-kv", "6"], ["--nheads-kv", "0"],
                                  ["--benches", "mqa"], ["--benches", ""], ["--impls", "triton"],
                                  ["--directions", "bwd"], ["--seqlens", "1k"], ["--varlen-maxlens", "0"]])
def test_bad_options_are_rejected(argv):
    with pytest.raises(SystemExit):
        bf.parse_args(argv)


def test_without_gpu_it_says_so_and_fails(capsys, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert bf.main(["--benches", "gqa", "--out", str(tmp_path)]) != 0
    err = capsys.readouterr().err
    assert "no CUDA GPU" in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())


# ---- the whole run on the CPU, with stand-ins for the GPU parts --------------------------------

MS = 1e-3  # the stand-in time_cuda's answer (ms)


def tflops(flops):
    return round(flops / (MS * 1e-3) / 1e12, 1)


@pytest.fixture
def cpu_run(monkeypatch):
    """main() on the CPU: inputs on the CPU, time_cuda calls each timed callable twice and says MS,
    flash_attn_cuda's kernels replaced by SDPA (ours) and the per-sequence reference (varlen);
    SDPA's efficient and cuDNN backends do not exist on the CPU, so their rows fail."""
    import flash_attn_cuda
    calls = []

    def time_cuda(fn, n_inputs):
        calls.extend(fn(i % n_inputs) for i in range(2))
        return MS

    def random_inputs(shape, dtype, n_tensors, n_sets, seed):
        g = torch.Generator().manual_seed(seed)
        return [tuple(torch.randn(shape, dtype=dtype, generator=g) for _ in range(n_tensors)) for _ in range(n_sets)]

    def ours(impl, causal):
        assert impl == "flash_attn_cuda"
        return lambda q, k, v: bf.sdpa_reference(q, k, v, causal)  # (batch, seqlen, nheads, d)

    monkeypatch.setattr(bf, "DEVICE", "cpu")
    monkeypatch.setattr(bf, "time_cuda", time_cuda)
    monkeypatch.setattr(bf, "random_inputs", random_inputs)
    monkeypatch.setattr(bf, "n_input_sets", lambda set_bytes: 2)
    monkeypatch.setattr(bf, "attention_fn", ours)
    def attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=False):  # (total, nheads, d)
        return bf.varlen_reference(q, k, v, cu_q, causal)
    monkeypatch.setattr(flash_attn_cuda, "attention_varlen", attention_varlen)
    monkeypatch.setattr(flash_attn_cuda._ops, "HAS_BACKWARD", True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "CPU stand-in")
    return calls


SMALL = ["--tokens", "64", "--seqlens", "16,32", "--nheads", "4", "--nheads-kv", "2", "--hdim", "16",
         "--varlen-batch", "3", "--varlen-maxlens", "16", "--varlen-nheads", "2"]


def read_rows(path):
    import csv
    with open(path) as f:
        return list(csv.DictReader(f))


def test_cpu_run_writes_checked_rows(cpu_run, tmp_path, capsys):
    assert bf.main(SMALL + ["--out", str(tmp_path), "--prefix", "t"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t_features.md", "t_gqa.csv", "t_varlen.csv"]
    assert cpu_run  # the timed callables ran
    gqa = read_rows(tmp_path / "t_gqa.csv")
    assert list(gqa[0]) == bf.GQA_COLUMNS and {r["dtype"] for r in gqa} == {"bfloat16"}
    assert [(r["causal"], r["seqlen"], r["impl"]) for r in gqa] == [
        (c, s, i) for c in ("False", "True") for s in ("16", "32") for i in bf.IMPLS]
    for r in gqa:
        if r["impl"] in ("sdpa_cudnn", "sdpa_efficient"):  # not on the CPU: both candidates refused
            assert r["error"] and not r["fwd_ms"]
            continue
        assert not r["error"] and float(r["max_err"]) < 0.1
        batch, seqlen, causal = int(r["batch"]), int(r["seqlen"]), r["causal"] == "True"
        assert batch * seqlen == 64
        for name in ("fwd", "bwd", "fwdbwd"):
            flops = bench.attention_flops(batch, seqlen, 4, 16, causal, name)  # query heads
            assert float(r[f"{name}_ms"]) == MS and float(r[f"{name}_tflops"]) == tflops(flops)
    varlen = read_rows(tmp_path / "t_varlen.csv")
    assert list(varlen[0]) == bf.VARLEN_COLUMNS
    labels = {(r["causal"], r["impl"]): r for r in varlen}
    assert sorted(labels) == sorted(
        [("False", i) for i in ("flash_attn_cuda", "flash_attn_cuda(padded, no mask)", "sdpa_flash(padded, mask)",
                                "sdpa_cudnn", "sdpa_efficient")]
        + [("True", i) for i in ("flash_attn_cuda", "flash_attn_cuda(padded)", "sdpa_flash(padded)", "sdpa_cudnn",
                                 "sdpa_efficient")])
    assert labels[("False", "flash_attn_cuda(padded, no mask)")]["same_result"] == "False"
    assert labels[("False", "sdpa_flash(padded, mask)")]["same_result"] == "True"
    lengths = bf.random_lengths(3, 16, seed=16)
    for causal in ("False", "True"):
        ours, padded = labels[(causal, "flash_attn_cuda")], labels[(causal, "sdpa_flash(padded" + (
            ")" if causal == "True" else ", mask)"))]
        flops = bf.varlen_flops(lengths, lengths, 2, 16, causal == "True", "fwd")
        assert int(ours["total_tokens"]) == sum(lengths)
        assert float(ours["fwd_tflops"]) == tflops(flops) and not ours["fwd_pad_ms"]
        assert float(ours["fwdbwd_tflops"]) == tflops(3.5 * flops)
        for name in ("fwd", "fwd_pad", "fwdbwd", "fwdbwd_pad"):
            assert float(padded[f"{name}_ms"]) == MS
    md = (tmp_path / "t_features.md").read_text()
    assert md.startswith("# flash_attn_cuda GQA and varlen vs PyTorch SDPA backends")
    assert "python -m flash_attn_cuda.bench_features --tokens 64" in md and "CPU stand-in" in md
    assert "## GQA: 4 q heads / 2 K/V heads" in md and "## varlen: 3 sequences" in md
    assert "fwd+bwd incl. pad TFLOP/s" in md
    assert md in capsys.readouterr().out


def test_cpu_run_drops_mismatching_rows(cpu_run, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(bf, "attention_fn", lambda impl, causal: lambda q, k, v: q)  # wrong
    assert bf.main(SMALL + ["--benches", "gqa", "--directions", "fwd", "--impls", "flash_attn_cuda",
                            "--out", str(tmp_path)]) == 1
    rows = read_rows(tmp_path / "cpu_stand_in_gqa.csv")  # no --prefix: named after the GPU ("CPU stand-in")
    assert len(rows) == 4 and all(r["error"].startswith("mismatch") and not r["fwd_ms"] for r in rows)
    assert "mismatch: max abs error" in capsys.readouterr().err
    assert not cpu_run  # nothing timed
