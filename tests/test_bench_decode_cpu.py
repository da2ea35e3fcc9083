"""The decode benchmark's GPU-free parts: options, K/V bytes and TB/s, paged block tables and
caches, the float32 reference, the correctness gate, tables and files from fake rows, the
refusal without a GPU, and a whole run on the CPU with stand-ins for the GPU parts."""
import csv
import math

import pytest
import torch
import torch.nn.functional as F

from flash_attn_cuda import bench_decode as bd  # noqa: E402  (the package imports without _C)
BF16 = torch.bfloat16


# ---- options -------------------------------------------------------------------------------------

def test_defaults():
    args = bd.parse_args([])
    assert args.heads == [(32, 8), (32, 32)] and args.batches == [1, 8, 32, 64, 128]
    assert args.seqlens == [2048, 4096, 8192, 16384, 32768, 65536, 131072]
    assert (args.seqlen_q, args.hdim, args.dtype, args.dtype_name) == (1, 128, "bf16", "bfloat16")
    assert args.layouts == ["contiguous", "paged16", "paged64", "paged256"]
    assert args.impls == ["flash_attn_cuda", "attention", "sdpa_flash", "sdpa_cudnn"]
    assert args.max_kv_gb == 16 and args.out is None and args.prefix is None


def test_options_are_parsed():
    args = bd.parse_args(["--heads", "32:32,64:8", "--batches", "4,1", "--seqlens", "3000,8k", "--seqlen-q", "4",
                          "--layouts", "paged64,contiguous", "--impls", "sdpa_cudnn,flash_attn_cuda,sdpa_efficient",
                          "--hdim", "64", "--dtype", "fp16", "--max-kv-gb", "2.5", "--out", "d", "--prefix", "x"])
    assert args.heads == [(32, 32), (64, 8)] and args.batches == [4, 1] and args.seqlens == [3000, 8192]
    assert args.layouts == ["contiguous", "paged64"]  # the canonical order
    assert args.impls == ["flash_attn_cuda", "sdpa_cudnn", "sdpa_efficient"]
    assert (args.seqlen_q, args.hdim, args.dtype_name, args.max_kv_gb, args.prefix) == (4, 64, "float16", 2.5, "x")


@pytest.mark.parametrize("argv", [["--heads", "32:6"], ["--heads", "32"], ["--heads", "0:0"], ["--heads", ""],
                                  ["--batches", "0"], ["--seqlens", "2m"], ["--seqlens", ""],
                                  ["--layouts", "paged32"], ["--impls", "triton"], ["--impls", ""],
                                  ["--seqlen-q", "0"], ["--max-kv-gb", "0"]])
def test_bad_options_are_rejected(argv):
    with pytest.raises(SystemExit):
        bd.parse_args(argv)


def test_series_run_paged_layouts_for_ours_only():
    assert bd.series(["flash_attn_cuda", "attention", "sdpa_cudnn"], ["contiguous", "paged16"]) == [
        ("flash_attn_cuda", "contiguous"), ("flash_attn_cuda", "paged16"), ("attention", "contiguous"),
        ("sdpa_cudnn", "contiguous")]
    assert bd.series(["sdpa_flash"], ["paged64"]) == []


def test_kv_bytes_and_tb_per_s():
    assert bd.kv_bytes(1, 4096, 8, 128) == 2 * 4096 * 8 * 128 * 2 == 16_777_216
    assert bd.kv_bytes(64, 8192, 8, 128) == 64 * bd.kv_bytes(1, 8192, 8, 128)
    assert bd.kv_bytes(2, 100, 4, 64, itemsize=4) == 2 * 2 * 100 * 4 * 64 * 4
    assert bd.tb_per_s(4_000_000, 1.0) == pytest.approx(4.0)  # 4 MB in 1 us
    # The previous measurement's sdpa_cudnn b1 sk4096: 35.5 us, 473 GB/s.
    assert bd.tb_per_s(bd.kv_bytes(1, 4096, 8, 128), 35.5) == pytest.approx(0.4726, abs=1e-4)


def test_put_time_fills_us_tbps_and_percent_of_copy():
    row = {"kv_bytes": bd.kv_bytes(64, 8192, 8, 128)}  # 2.147 GB
    bd.put_time(row, 0.5, rate=4.0e12)  # 0.5 ms; copy 4 TB/s (read + write)
    assert row["us"] == 500.0 and row["tbps"] == pytest.approx(4.295, abs=1e-3)
    assert row["pct_copy"] == pytest.approx(107.4, abs=0.05)


def test_n_sets_exceed_twice_l2():
    l2 = 60 * 2 ** 20
    assert bd.n_sets(bd.kv_bytes(1, 2048, 8, 128), l2) == 15  # 8 MiB sets
    assert bd.n_sets(10 ** 9, l2) == 1
    assert bd.n_sets(1000, l2) == bd.MAX_SETS
    for nbytes in (3 * 2 ** 20, 50 * 2 ** 20, 119 * 2 ** 20):
        n = bd.n_sets(nbytes, l2)
        assert n * nbytes >= 2 * l2 and (n - 1) * nbytes < 2 * l2


def test_page_size():
    assert [bd.page_size(x) for x in bd.LAYOUTS] == [None, 16, 64, 256]
    assert bd.page_size("headmajor") is None


def test_headmajor_layout_reads_the_same_values_from_head_major_memory(cpu_run, monkeypatch):
    """Layout 'headmajor' (asked for, not a default): ours gets (batch, seqlen_k, hk, d) views of
    (batch, hk, seqlen_k, d) memory holding the same values."""
    seen = []

    def op(q, k, v, cache_seqlens=None, num_splits=0):
        seen.append((k, v))
        return kvcache_stand_in(q, k, v, cache_seqlens)

    q, k, v = (torch.randn(2, 1, 4, 16), torch.randn(2, 64, 2, 16), torch.randn(2, 64, 2, 16))
    monkeypatch.setattr(bd, "_kvcache_op", lambda: op)
    fn = bd.ours_fn([(q, k, v)], "headmajor", seed=None)
    out = fn(0)
    (kh, vh), = seen
    assert torch.equal(kh, k) and torch.equal(vh, v)
    assert kh.stride() == (64 * 2 * 16, 16, 64 * 16, 1) and vh.stride() == kh.stride()
    assert torch.allclose(out, bd.reference(q, k, v).to(q.dtype), rtol=1e-5, atol=1e-5)
    assert "headmajor" not in bd.LAYOUTS and "headmajor" in bd.EXTRA_LAYOUTS


# ---- paged caches --------------------------------------------------------------------------------

@pytest.mark.parametrize("batch,seqlen_k,page", [(3, 64, 16), (2, 256, 64), (4, 50, 16), (1, 16, 16)])
def test_block_table_is_a_permutation_and_gathers_the_cache(batch, seqlen_k, page):
    table = bd.block_table(batch, seqlen_k, page, seed=5)
    pages = math.ceil(seqlen_k / page)
    assert table.shape == (batch, pages) and table.dtype == torch.int32
    assert sorted(table.flatten().tolist()) == list(range(batch * pages))
    assert torch.equal(table, bd.block_table(batch, seqlen_k, page, seed=5))
    cache = torch.randn(batch, seqlen_k, 2, 8, dtype=BF16)
    paged = bd.to_paged(cache, table, page)
    assert paged.shape == (batch * pages, page, 2, 8)
    assert torch.equal(bd.from_paged(paged, table, seqlen_k), cache)
    for b in range(batch):  # page table[b, j] holds tokens j * page ... of sequence b
        for j in range(pages):
            n = min(page, seqlen_k - j * page)
            assert torch.equal(paged[table[b, j], :n], cache[b, j * page:j * page + n])


def test_block_tables_are_shuffled():
    table = bd.block_table(8, 4096, 16, seed=0).flatten()
    assert not torch.equal(table, torch.arange(table.numel(), dtype=torch.int32))
    assert not torch.equal(table, bd.block_table(8, 4096, 16, seed=1).flatten())


# ---- reference and correctness gate --------------------------------------------------------------

@pytest.mark.parametrize("hq,hk,seqlen_q", [(8, 2, 1), (4, 4, 1), (6, 3, 3)])
def test_reference_matches_sdpa_with_expanded_heads(hq, hk, seqlen_q):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(3, seqlen_q, hq, 16, generator=g, dtype=BF16)
    k, v = (torch.randn(3, 40, hk, 16, generator=g, dtype=BF16) for _ in range(2))
    ek, ev = (t.float().repeat_interleave(hq // hk, dim=2).transpose(1, 2) for t in (k, v))
    expected = F.scaled_dot_product_attention(q.float().transpose(1, 2), ek, ev).transpose(1, 2)
    for chunk in (2 ** 30, 1):  # whole batch, one sequence at a time
        out = bd.reference(q, k, v, chunk_bytes=chunk)
        assert out.dtype == torch.float32 and out.shape == q.shape
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_check_passes_close_outputs_and_drops_mismatches():
    ref = torch.full((2, 1, 4, 8), 2.0)
    bound = bd.CHECK_EPS * torch.finfo(BF16).eps * 2.0
    row = {}
    assert bd.check(row, (ref + bound / 2).to(BF16), ref) and "error" not in row
    row = {}
    assert not bd.check(row, (ref + 0.5).to(BF16), ref)
    assert row["error"].startswith("mismatch: max abs error 5.000e-01") and row["max_err"] == "5.00e-01"
    nan = ref.to(BF16)
    nan[0, 0, 0, 0] = float("nan")
    assert not bd.check({}, nan, ref)


# ---- tables and files from fake rows -------------------------------------------------------------

def fake_row(impl, layout, batch, seqlen_k, us, hq=32, hk=8, **extra):
    row = {"impl": impl, "layout": layout, "dtype": "bfloat16", "batch": batch, "seqlen_q": 1, "hq": hq, "hk": hk,
           "d": 128, "seqlen_k": seqlen_k, "kv_bytes": bd.kv_bytes(batch, seqlen_k, hk, 128), **extra}
    if us is not None:
        row["timing"] = extra.get("timing", "graph")
        bd.put_time(row, us * 1e-3, rate=4.0e12)
    return row


def fake_rows():
    rows = [fake_row("flash_attn_cuda", "contiguous", 1, 4096, 10.0),
            fake_row("flash_attn_cuda", "paged16", 1, 4096, 20.0),
            fake_row("sdpa_flash", "contiguous", 1, 4096, 40.0, timing="eager"),
            fake_row("sdpa_cudnn", "contiguous", 1, 4096, None, error="No available kernel.")]
    bd.add_ratios(rows)
    return rows


def test_ratios_are_of_tb_per_s():
    ours, paged, flash, cudnn = fake_rows()
    assert (ours["vs_sdpa_flash"], ours["vs_sdpa_cudnn"], ours["vs_contiguous"]) == (4.0, "", 1.0)
    assert (paged["vs_sdpa_flash"], paged["vs_contiguous"]) == (2.0, 0.5)
    assert flash["vs_sdpa_flash"] == 1.0 and cudnn["vs_sdpa_flash"] == "" and cudnn["vs_contiguous"] == ""


def test_md_table_from_fake_rows():
    pairs = [("flash_attn_cuda", "contiguous"), ("flash_attn_cuda", "paged16"), ("sdpa_flash", "contiguous"),
             ("sdpa_cudnn", "contiguous")]
    lines = bd.heads_table(fake_rows(), pairs).splitlines()
    assert lines[0] == ("| batch | seqlen_k | K/V MB | flash_attn_cuda us | flash_attn_cuda TB/s | "
                        "flash_attn_cuda % copy | flash_attn_cuda paged16 us | flash_attn_cuda paged16 TB/s | "
                        "flash_attn_cuda paged16 % copy | sdpa_flash us | sdpa_flash TB/s | sdpa_flash % copy | "
                        "sdpa_cudnn us | sdpa_cudnn TB/s | sdpa_cudnn % copy | ours/sdpa_cudnn | ours/sdpa_flash | "
                        "paged16/contig |")
    assert lines[1] == "|" + "---|" * 18
    assert lines[2] == ("| 1 | 4k | 17 | 10.0 | 1.6777 | 41.9 | 20.0 | 0.8389 | 21.0 | 40.0* | 0.4194 | 10.5 | "
                        "n/a | n/a | n/a | n/a | 4.0 | 0.5 |")
    assert lines[-1] == "- sdpa_cudnn (batch=1, seqlen_k=4096): No available kernel."


def test_report_md_has_a_section_per_head_config_and_lists_skipped_shapes():
    pairs = [("flash_attn_cuda", "contiguous")]
    rows = [fake_row("flash_attn_cuda", "contiguous", 8, 2048, 5.0),
            fake_row("flash_attn_cuda", "contiguous", 8, 2048, 9.0, hk=32)]
    md = bd.report_md(rows, pairs, [(32, 8), (32, 32)], {(32, 32): ["b128 x 128k (137 GB)"]}, "NOTE")
    assert "## GQA 32 q heads / 8 K/V heads, d=128, seqlen_q=1\n\nNOTE\n" in md
    assert "## MHA 32 q heads / 32 K/V heads" in md and "| 8 | 2k | 268 | 9.0 |" in md and "| 8 | 2k | 67 | 5.0 |" in md
    assert "skipped (K/V over the memory budget): b128 x 128k (137 GB)" in md
    only_skipped = bd.report_md([], pairs, [(32, 32)], {(32, 32): ["b1 x 2k (1 GB)"]}, "NOTE")
    assert "(no shape within the memory budget)" in only_skipped


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_write_files_from_fake_rows(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bd, "plot", lambda *a: False)  # as without matplotlib
    args = bd.parse_args(["--out", str(tmp_path / "r"), "--prefix", "h200"])
    bd.write_files(args, fake_rows(), "# md\n", bd.series(args.impls, args.layouts), 4e12, "")
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["h200_decode.csv", "h200_decode.md"]
    rows = read_csv(tmp_path / "r" / "h200_decode.csv")
    assert list(rows[0]) == bd.COLUMNS and len(rows) == 4
    assert rows[1]["layout"] == "paged16" and rows[1]["vs_contiguous"] == "0.5" and rows[2]["timing"] == "eager"
    assert rows[3]["error"] == "No available kernel." and rows[3]["us"] == ""
    assert (tmp_path / "r" / "h200_decode.md").read_text() == "# md\n"
    assert "matplotlib not installed" in capsys.readouterr().err


def test_plot_is_written_when_matplotlib_is_there(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "p.png"
    assert bd.plot(fake_rows(), [("flash_attn_cuda", "contiguous"), ("sdpa_flash", "contiguous")], 4e12,
                   str(path), "t")
    assert path.stat().st_size > 0


# ---- no GPU, and a whole run on the CPU ---------------------------------------------------------

def test_without_gpu_it_says_so_and_fails(capsys, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert bd.main(["--out", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert "no CUDA GPU" in captured.err and len(captured.err.strip().splitlines()) == 1
    assert not captured.out and not list(tmp_path.iterdir())


def kvcache_stand_in(q, k_cache, v_cache, cache_seqlens=None, block_table=None, num_splits=0):
    """attention_with_kvcache on the CPU: the float32 reference over the (gathered) cache, in q's dtype."""
    seqlen_k = int(cache_seqlens[0])
    if block_table is not None:
        k_cache, v_cache = (bd.from_paged(t, block_table, seqlen_k) for t in (k_cache, v_cache))
    return bd.reference(q, k_cache, v_cache).to(q.dtype)


@pytest.fixture
def cpu_run(monkeypatch):
    """main() on the CPU: inputs on the CPU, every timed call runs twice and takes 10 us, ours
    replaced by the reference; SDPA's cuDNN backend does not exist on the CPU, so its rows fail."""
    calls = []

    def time_call(fn, n, where):
        calls.extend(fn(i % n) for i in range(2))
        return 0.01, "graph"
    monkeypatch.setattr(bd, "DEVICE", "cpu")
    monkeypatch.setattr(bd, "time_call", time_call)
    monkeypatch.setattr(bd, "copy_rate", lambda: 4.0e12)
    monkeypatch.setattr(bd, "l2_bytes", lambda: 2 ** 16)
    monkeypatch.setattr(bd, "_kvcache_op", lambda: kvcache_stand_in)
    monkeypatch.setattr(bd, "_attention_op", lambda: lambda q, k, v: kvcache_stand_in(
        q, k, v, torch.full((q.shape[0],), k.shape[1])))
    monkeypatch.setattr(bd, "plot", lambda *a: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H200")
    return calls


SMALL = ["--heads", "4:2,2:2", "--batches", "1,2", "--seqlens", "64,96", "--hdim", "16", "--layouts",
         "contiguous,paged16", "--max-kv-gb", "0.00002"]  # b2 x 96 (2 K/V heads, d 16): 24.6 kB > 20 kB, skipped


def test_cpu_run_writes_checked_rows(cpu_run, tmp_path, capsys):
    assert bd.main(SMALL + ["--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h200_decode.csv", "h200_decode.md"]  # prefix: the GPU
    assert cpu_run  # the timed callables ran
    rows = read_csv(tmp_path / "h200_decode.csv")
    shapes = [(hq, b, s) for hq in ("4", "2") for b in ("1", "2") for s in ("64", "96") if (b, s) != ("2", "96")]
    labels = [("flash_attn_cuda", "contiguous"), ("flash_attn_cuda", "paged16"),
              ("flash_attn_cuda (attention)", "contiguous"), ("sdpa_flash", "contiguous"),
              ("sdpa_cudnn", "contiguous")]
    assert [(r["hq"], r["batch"], r["seqlen_k"], r["impl"], r["layout"]) for r in rows] == [
        s + lab for s in shapes for lab in labels]
    for r in rows:
        if r["impl"] == "sdpa_cudnn":
            assert r["error"] and not r["us"] and not r["vs_sdpa_flash"]
            continue
        assert not r["error"] and r["timing"] == "graph" and float(r["max_err"]) < 0.05
        nbytes = bd.kv_bytes(int(r["batch"]), int(r["seqlen_k"]), int(r["hk"]), 16)
        assert int(r["kv_bytes"]) == nbytes and float(r["us"]) == 10.0
        assert float(r["tbps"]) == round(nbytes / 10e-6 / 1e12, 4)
        assert float(r["vs_sdpa_flash"]) == 1.0 and r["vs_sdpa_cudnn"] == ""
    out = capsys.readouterr().out
    assert out.startswith("d2d copy: 4000 GB/s (read+write)\n")
    md = (tmp_path / "h200_decode.md").read_text()
    assert md.startswith("# flash_attn_cuda decode (KV cache) vs PyTorch SDPA backends")
    assert "- GPU: NVIDIA H200" in md and "- d2d copy: 4000 GB/s" in md and "bench_decode --heads 4:2,2:2" in md
    assert "## GQA 4 q heads / 2 K/V heads" in md and "## MHA 2 q heads / 2 K/V heads" in md
    assert "skipped (K/V over the memory budget): b2 x 96" in md
    assert md in out


def test_cpu_run_drops_mismatching_rows(cpu_run, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(bd, "_kvcache_op", lambda: lambda q, k, v, **kw: q)  # wrong
    argv = SMALL + ["--impls", "flash_attn_cuda,sdpa_flash", "--heads", "2:2", "--out", str(tmp_path), "--prefix", "t"]
    assert bd.main(argv) == 1
    rows = read_csv(tmp_path / "t_decode.csv")
    ours = [r for r in rows if r["impl"] == "flash_attn_cuda"]
    assert len(ours) == 6 and all(r["error"].startswith("mismatch") and not r["us"] for r in ours)
    assert all(not r["error"] and r["us"] for r in rows if r["impl"] == "sdpa_flash")
    assert "mismatch: max abs error" in capsys.readouterr().err
