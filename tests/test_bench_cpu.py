"""The benchmark CLI's GPU-free parts: FLOP formulas, options, refusal without a GPU, tables and
plots from CSV, output file names, the backward's timed callables (on the CPU) and the memory report."""
import os

import types

import pytest
import torch

from flash_attn_cuda import bench
from flash_attn_cuda.reference import attention_ref


def test_flops_formula():
    assert bench.attention_flops(2, 1024, 16, 128, causal=False) == 4 * 2 * 1024 ** 2 * 16 * 128
    assert bench.attention_flops(2, 1024, 16, 128, causal=True) == 2 * 2 * 1024 ** 2 * 16 * 128


def test_without_gpu_it_says_so_and_fails(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert bench.main(["--hdims", "64", "--seqlens", "512"]) != 0
    assert "no CUDA GPU" in capsys.readouterr().err


def test_unknown_impl_is_rejected():
    with pytest.raises(SystemExit):
        bench.parse_args(["--impls", "flash_attn_cuda,triton"])


def test_replot_table_from_csv(tmp_path):
    csv_path = tmp_path / "r.csv"
    csv_path.write_text(
        "impl,dtype,hdim,seqlen,causal,batch,nheads,fwd_ms,fwd_tflops\n"
        "flash_attn_cuda,bfloat16,128,4096,True,4,16,1.0,300.0\n"
        "sdpa_flash,bfloat16,128,4096,True,4,16,1.2,250.0\n"
        "sdpa_cudnn,bfloat16,128,4096,True,4,16,,\n"
    )
    md = tmp_path / "r.md"
    assert bench.main(["--replot", str(csv_path), "--md", str(md)]) == 0
    lines = md.read_text().splitlines()
    header = [c.strip() for c in lines[2].strip("|").split("|")]
    row = [c.strip() for c in lines[4].strip("|").split("|")]
    cells = dict(zip(header, row))
    assert cells["hdim"] == "128" and cells["causal"] == "True" and cells["seqlen"] == "4096"
    assert cells["flash_attn_cuda"] == "300.0" and cells["sdpa_flash"] == "250.0"
    assert cells["ours/sdpa_flash"] == "1.20"
    assert cells["sdpa_cudnn"] == "n/a" and cells["ours/sdpa_cudnn"] == "n/a"


# ---- backward, fwd+bwd, memory and --out --------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
def test_flops_of_each_direction(causal):
    fwd = 4 * 2 * 1024 ** 2 * 16 * 128 / (2 if causal else 1)
    assert bench.attention_flops(2, 1024, 16, 128, causal) == fwd
    assert bench.attention_flops(2, 1024, 16, 128, causal, "fwd") == fwd
    assert bench.attention_flops(2, 1024, 16, 128, causal, "bwd") == 2.5 * fwd
    assert bench.attention_flops(2, 1024, 16, 128, causal, "fwdbwd") == 3.5 * fwd


@pytest.mark.parametrize("text,directions", [(None, ["fwd", "bwd"]), ("fwd", ["fwd"]), ("bwd", ["bwd"]),
                                             ("bwd,fwd", ["fwd", "bwd"]), ("fwd,fwd", ["fwd"])])
def test_directions_are_parsed(text, directions):
    argv = [] if text is None else ["--directions", text]
    assert bench.parse_args(argv).directions == directions


@pytest.mark.parametrize("text", ["", ",", "back", "fwd,bwdd", "fwdbwd", "FWD"])
def test_bad_directions_are_rejected(text):
    with pytest.raises(SystemExit):
        bench.parse_args(["--directions", text])


@pytest.mark.parametrize("argv", [["--directions", "bwd", "--csv", "f.csv"],   # --csv is the forward's file
                                  ["--memory", "--md", "m.md"]])               # --memory reports to --out
def test_contradictory_options_are_rejected(argv):
    with pytest.raises(SystemExit):
        bench.parse_args(argv)


def test_memory_shape_defaults_and_overrides():
    args = bench.parse_args(["--memory"])
    assert (args.seqlens[0], args.hdims[0], args.causals[0], args.dtype) == (16384, 128, False, "bf16")
    args = bench.parse_args(["--memory", "--seqlens", "8192,4096", "--hdims", "64", "--causal", "1"])
    assert (args.seqlens[0], args.hdims[0], args.causals[0]) == (8192, 64, True)


def test_out_file_names():
    files = bench.out_files("res", "h200", ["fwd", "bwd"])
    assert files.md == os.path.join("res", "h200.md")
    assert files.csv == {"fwd": os.path.join("res", "h200_fwd.csv"), "bwd": os.path.join("res", "h200_bwd.csv")}
    assert files.png == {"fwd_tflops": os.path.join("res", "h200_fwd.png"),
                         "bwd_tflops": os.path.join("res", "h200_bwd.png"),
                         "fwdbwd_tflops": os.path.join("res", "h200_fwdbwd.png")}
    only_bwd = bench.out_files("res", "results", ["bwd"])
    assert list(only_bwd.csv.values()) == [os.path.join("res", "results_bwd.csv")]
    assert sorted(only_bwd.png) == ["bwd_tflops", "fwdbwd_tflops"]



@pytest.mark.parametrize("name,slug", [
    ("NVIDIA H200", "h200"), ("NVIDIA A100-SXM4-80GB", "a100_sxm4_80gb"), ("NVIDIA GeForce RTX 4090", "rtx_4090"),
    ("NVIDIA H100 80GB HBM3", "h100_80gb_hbm3"), ("NVIDIA H200 NVL", "h200_nvl"),
    ("Tesla V100-SXM2-16GB", "v100_sxm2_16gb"), ("NVIDIA RTX A6000", "rtx_a6000"), ("NVIDIA", "gpu"), ("", "gpu")])
def test_gpu_slug(name, slug):
    assert bench.gpu_slug(name) == slug


@pytest.mark.parametrize("argv,prefix", [([], "a100_sxm4_80gb"), (["--memory"], "a100_sxm4_80gb_memory"),
                                         (["--prefix", "mine"], "mine"), (["--memory", "--prefix", "m"], "m")])
def test_file_prefix_defaults_to_the_gpu_name(monkeypatch, argv, prefix):
    """make bench gives no --prefix: files are named after the GPU, so an A100 run cannot overwrite h200_*."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA A100-SXM4-80GB")
    seen = []
    monkeypatch.setattr(bench, "run_grid", lambda args, info: seen.append(("grid", args.prefix)) or 0)
    monkeypatch.setattr(bench, "run_memory", lambda args, info: seen.append(("memory", args.prefix)) or 0)
    assert bench.main(argv) == 0
    assert seen == [("memory" if "--memory" in argv else "grid", prefix)]

BWD_CSV = (
    "impl,dtype,hdim,seqlen,causal,batch,nheads,fwd_ms,fwdbwd_ms,bwd_ms,bwd_tflops,fwdbwd_tflops\n"
    "flash_attn_cuda,bfloat16,128,4096,True,4,16,1.0,3.5,2.5,300.0,280.0\n"
    "sdpa_flash,bfloat16,128,4096,True,4,16,1.1,4.0,2.9,240.0,200.0\n"
    "sdpa_cudnn,bfloat16,128,4096,True,4,16,,,,,\n"
    "flash_attn_cuda,bfloat16,64,2048,False,8,32,0.5,1.5,1.0,,\n"
    "sdpa_flash,bfloat16,64,2048,False,8,32,0.6,1.8,1.2,200.0,180.0\n"
)


def md_tables(text):
    """{heading: [row dict, ...]} of every markdown table, each under the last heading above it."""
    tables, heading, header = {}, None, None
    for line in text.splitlines():
        if line.startswith("#"):
            heading, header = line.lstrip("# "), None
            tables[heading] = []
        elif line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if header is None:
                header = cells
            else:
                tables[heading].append(dict(zip(header, cells)))
    return tables


def table(tables, name):
    (rows,) = [rows for heading, rows in tables.items() if heading.startswith(f"{name} TFLOP/s")]
    return {(r["hdim"], r["causal"], r["seqlen"]): r for r in rows}


def test_replot_backward_tables_from_csv(tmp_path):
    csv_path = tmp_path / "r_bwd.csv"
    csv_path.write_text(BWD_CSV)
    md = tmp_path / "r.md"
    assert bench.main(["--replot", str(csv_path), "--md", str(md)]) == 0
    tables = md_tables(md.read_text())
    assert not any(h.startswith("forward") for h in tables)
    bwd = table(tables, "backward")
    assert list(bwd) == [("64", "False", "2048"), ("128", "True", "4096")]
    cells = bwd[("128", "True", "4096")]
    assert cells["flash_attn_cuda"] == "300.0" and cells["sdpa_flash"] == "240.0"
    assert cells["ours/sdpa_flash"] == "1.25"
    assert cells["sdpa_cudnn"] == "n/a" and cells["ours/sdpa_cudnn"] == "n/a"
    assert bwd[("64", "False", "2048")]["flash_attn_cuda"] == "n/a"
    assert bwd[("64", "False", "2048")]["ours/sdpa_flash"] == "n/a"
    fwdbwd = table(tables, "fwd+bwd")
    assert fwdbwd[("128", "True", "4096")]["flash_attn_cuda"] == "280.0"
    assert fwdbwd[("128", "True", "4096")]["ours/sdpa_flash"] == "1.40"
    assert fwdbwd[("64", "False", "2048")]["sdpa_flash"] == "180.0"


def test_replot_both_csvs_to_out_dir(tmp_path):
    pytest.importorskip("matplotlib", reason="--out draws PNGs (CI installs no matplotlib)")
    (tmp_path / "r_bwd.csv").write_text(BWD_CSV)
    (tmp_path / "r_fwd.csv").write_text(
        "impl,dtype,hdim,seqlen,causal,batch,nheads,fwd_ms,fwd_tflops\n"
        "flash_attn_cuda,bfloat16,128,4096,True,4,16,1.0,300.0\n"
        "sdpa_flash,bfloat16,128,4096,True,4,16,1.2,250.0\n")
    out = tmp_path / "plots"
    argv = ["--replot", str(tmp_path / "r_bwd.csv"), str(tmp_path / "r_fwd.csv"), "--out", str(out), "--prefix", "r"]
    assert bench.main(argv) == 0
    assert sorted(p.name for p in out.iterdir()) == ["r.md", "r_bwd.png", "r_fwd.png", "r_fwdbwd.png"]
    tables = md_tables((out / "r.md").read_text())
    assert [h.split(" TFLOP/s")[0] for h in tables] == ["forward", "backward", "fwd+bwd"]
    assert table(tables, "forward")[("128", "True", "4096")]["ours/sdpa_flash"] == "1.20"


def test_replot_refuses_a_csv_of_other_columns(tmp_path, capsys):
    csv_path = tmp_path / "x.csv"
    csv_path.write_text("impl,hdim,ms\nflash_attn_cuda,128,1.0\n")
    assert bench.main(["--replot", str(csv_path), "--md", str(tmp_path / "x.md")]) == 2
    assert "not a benchmark CSV" in capsys.readouterr().err


@pytest.mark.parametrize("causal", [False, True])
def test_backward_callables_give_reference_gradients(causal):
    # The timed callables' wiring (layout, dout, graph reuse), run by SDPA's flash backend on the CPU.
    g = torch.Generator().manual_seed(0)
    q, k, v, dout = (torch.randn(2, 48, 3, 32, generator=g) for _ in range(4))  # (batch, seqlen, nheads, d)
    fns = bench.make_bwd("sdpa_flash", [(q, k, v, dout)], causal)
    leaves = tuple(t.detach().requires_grad_() for t in (q, k, v))
    out, _ = attention_ref(*leaves, causal=causal, compute_dtype=torch.float64)
    reference = torch.autograd.grad(out, leaves, dout)
    for name in ("bwd", "bwd", "fwdbwd"):  # the kept graph serves more than one backward
        grads = [t.transpose(1, 2) for t in fns[name](0)]  # SDPA's (batch, nheads, seqlen, d) back to ours
        for grad, ref in zip(grads, reference):
            torch.testing.assert_close(grad, ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(fns["fwd"](0).transpose(1, 2), out.detach().float(), rtol=1e-4, atol=1e-4)


def test_memory_report_lines_and_md():
    row = {"impl": "flash_attn_cuda", "peak_bytes": 3 * bench.MIB, "essential_bytes": 2 * bench.MIB}
    assert bench.memory_lines(row) == [
        "flash_attn_cuda: peak memory of fwd+bwd: 3.0 MiB",
        "flash_attn_cuda: essential (q, k, v, dout, out, lse, dq, dk, dv): 2.0 MiB",
        "flash_attn_cuda: peak / essential: 1.50"]
    failed = {"impl": "sdpa_flash", "peak_bytes": "", "essential_bytes": 2 * bench.MIB, "error": "OOM"}
    lines = bench.memory_md([row, failed], "bf16").splitlines()
    assert "| flash_attn_cuda | 3.0 | 2.0 | 1.50 |" in lines
    assert "| sdpa_flash | n/a (OOM) | 2.0 | n/a |" in lines


def test_forced_family_sets_the_variable_only_during_the_call(monkeypatch):
    from flash_attn_cuda import bench
    monkeypatch.setenv("FLASH_ATTN_CUDA_FAMILY", "auto")
    seen = []
    run = bench.forced_family("sm80", lambda *a: seen.append(os.environ.get("FLASH_ATTN_CUDA_FAMILY")) or len(a))
    assert run(1, 2, 3) == 3
    assert seen == ["sm80"] and os.environ["FLASH_ATTN_CUDA_FAMILY"] == "auto"
    monkeypatch.delenv("FLASH_ATTN_CUDA_FAMILY")
    run()
    assert seen[-1] == "sm80" and "FLASH_ATTN_CUDA_FAMILY" not in os.environ
    assert bench.is_ours("flash_attn_cuda_sm80") and "flash_attn_cuda_sm80" in bench.IMPLS
    assert not bench.is_ours("sdpa_flash")


def test_smem_impls_set_the_budget_around_every_timed_call(monkeypatch):
    """flash_attn_cuda_smem163 / _smem99: FLASH_ATTN_CUDA_SMEM_BUDGET during the forward, the backward
    alone and fwd+bwd (the backward reads it too), unset again afterwards; not in the default list."""
    from flash_attn_cuda import bench
    monkeypatch.delenv("FLASH_ATTN_CUDA_SMEM_BUDGET", raising=False)
    seen = []

    def attn(q, k, v):
        seen.append(os.environ.get("FLASH_ATTN_CUDA_SMEM_BUDGET"))
        return (q * k * v).sum()

    def record_grad(out, leaves, dout, retain_graph=False):
        seen.append(os.environ.get("FLASH_ATTN_CUDA_SMEM_BUDGET"))
        return leaves

    monkeypatch.setattr(bench.torch.autograd, "grad", record_grad)
    inputs = [tuple(torch.ones(2) for _ in range(4))]
    for impl, kb in (("flash_attn_cuda_smem163", "163"), ("flash_attn_cuda_smem99", "99")):
        assert bench.is_ours(impl) and impl in bench.IMPLS and impl not in bench.DEFAULT_IMPLS
        seen.clear()
        bench.make_fwd(impl, [t[:3] for t in inputs], False, attn=attn)(0)
        fns = bench.make_bwd(impl, inputs, False, attn=attn)
        for name in ("fwd", "bwd", "fwdbwd"):
            fns[name](0)
        assert seen and all(v == kb for v in seen), seen
        assert "FLASH_ATTN_CUDA_SMEM_BUDGET" not in os.environ
    seen.clear()
    bench.make_fwd("flash_attn_cuda", [t[:3] for t in inputs], False, attn=attn)(0)
    assert seen == [None]


def test_dropout_option_is_checked_and_reaches_both_sides(monkeypatch):
    import flash_attn_cuda.bench as bench
    assert bench.parse_args(["--dropout", "0.1"]).dropout == 0.1 and bench.parse_args([]).dropout == 0.0
    for bad in ("1.0", "-0.1", "nan"):
        with pytest.raises(SystemExit):
            bench.parse_args(["--dropout", bad])
    seen = []
    monkeypatch.setattr(bench, "DROPOUT_P", 0.25)
    monkeypatch.setattr(bench.F, "scaled_dot_product_attention", lambda *a, **kw: seen.append(kw["dropout_p"]))
    bench.sdpa_fn("sdpa_flash", False)(None, None, None)
    assert seen == [0.25]


def test_impl_rounds_abba_and_ab():
    assert bench.impl_rounds(["a", "b"], "abba") == ["a", "b", "b", "a"]
    assert bench.impl_rounds(["a", "b", "c"], "ab") == ["a", "b", "c"]
    assert bench.parse_args([]).order == "abba" and bench.parse_args(["--order", "ab"]).order == "ab"


def test_measure_grid_abba_averages(monkeypatch):
    """Each point measures impls in order then reversed; the row holds each pass's mean ms and the TFLOP/s
    of that mean; a failed round makes the merged row the failed one."""
    calls, times = [], {"flash_attn_cuda": [1.0, 3.0], "sdpa_cudnn": [2.0, 2.0]}

    def fake_point(direction, impl, dtype, hdim, seqlen, causal, tokens, hidden):
        calls.append(impl)
        row = bench.point_row(direction, impl, torch.bfloat16, hdim, seqlen, causal, 2, 4)
        if impl == "sdpa_flash" and calls.count(impl) == 2:
            row["error"] = "boom"
            return row
        bench.record(row, "fwd", times.get(impl, [5.0, 5.0])[calls.count(impl) - 1])
        return row

    monkeypatch.setattr(bench, "bench_point", fake_point)
    args = bench.parse_args(["--directions", "fwd", "--hdims", "64", "--seqlens", "512", "--causal", "0",
                             "--impls", "flash_attn_cuda,sdpa_cudnn,sdpa_flash"])
    results = bench.measure_grid(args)
    assert calls == ["flash_attn_cuda", "sdpa_cudnn", "sdpa_flash", "sdpa_flash", "sdpa_cudnn", "flash_attn_cuda"]
    rows = {r["impl"]: r for r in results["fwd"]}
    assert rows["flash_attn_cuda"]["fwd_ms"] == 2.0 and rows["sdpa_cudnn"]["fwd_ms"] == 2.0
    flops = bench.attention_flops(2, 512, 4, 64, False, "fwd")
    assert rows["flash_attn_cuda"]["fwd_tflops"] == round(flops / 2e-3 / 1e12, 1)
    assert rows["sdpa_flash"]["error"] == "boom"


def test_fa3_ref_is_opt_in_and_needs_its_library(monkeypatch, tmp_path):
    """fa3_ref (FA3 from scripts/fa3_ref's library): accepted by name, not a default, refused without
    $FLASH_ATTN_CUDA_BENCH_FA3_LIB, our layout, and with a forward-only library (BWD=0) its backward raises
    a RuntimeError (the grid then records the row's error instead of crashing)."""
    assert "fa3_ref" in bench.IMPLS and "fa3_ref" not in bench.DEFAULT_IMPLS and not bench.is_ours("fa3_ref")
    assert "fa3_ref" not in bench.parse_args([]).impls
    monkeypatch.delenv(bench.FA3_LIB_ENV, raising=False)
    monkeypatch.setattr(bench, "_FA3", {})
    with pytest.raises(SystemExit):
        bench.parse_args(["--impls", "fa3_ref"])
    with pytest.raises(RuntimeError, match=bench.FA3_LIB_ENV):
        bench.attention_fn("fa3_ref", False)
    lib = tmp_path / "libfa3ref.so"
    lib.write_bytes(b"")
    monkeypatch.setenv(bench.FA3_LIB_ENV, str(lib))
    assert bench.parse_args(["--impls", "sdpa_cudnn,fa3_ref"]).impls == ["sdpa_cudnn", "fa3_ref"]
    inputs = [tuple(torch.ones(1, 2, 3, 4) for _ in range(3))]
    assert bench.to_native("fa3_ref", inputs) is inputs
    monkeypatch.setattr(bench, "_FA3", {"module": types.SimpleNamespace(_lib=object()), "checked": set()})
    with pytest.raises(RuntimeError, match="forward only"):
        bench.measure_bwd(bench.point_row("bwd", "fa3_ref", torch.bfloat16, 4, 2, False, 1, 3), "fa3_ref",
                          inputs, False)
