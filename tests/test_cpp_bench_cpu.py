"""build/cpp/bench_fwd and bench_bwd (make bench-cpp) without a GPU: argument checking, --help,
--compiled, the "not compiled" exit code and a clear refusal without a GPU. Each binary's tests
are skipped where it has not been built (CI builds both; make bench-cpp skips bench_bwd in builds
with FLASH_ATTN_CUDA_BACKWARD=0).

Exit codes (benchmarks/cpp/bench_common.h): 0 ok, 1 mismatch, 2 bad arguments / no GPU / CUDA
error, 3 head dim or dtype not compiled into this build."""
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import torch

BUILD = pathlib.Path(__file__).resolve().parent.parent / "build" / "cpp"
ALL_HEAD_DIMS = (32, 64, 96, 128, 160, 192, 224, 256)
ALL_DTYPES = ("fp16", "bf16")


def _binary(name):
    path = BUILD / name
    missing = pytest.mark.skipif(not path.exists(), reason=f"build/cpp/{name} not built (make bench-cpp)")
    return pytest.param(path, id=name, marks=missing)


BENCHES = [_binary("bench_fwd"), _binary("bench_bwd")]


def run(bench, *args):
    return subprocess.run([str(bench), *args], capture_output=True, text=True, timeout=60)


def compiled(bench):
    """(head dims, dtypes) the binary runs, from --compiled."""
    result = run(bench, "--compiled")
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(" ", 1) for line in result.stdout.strip().splitlines())
    return [int(d) for d in lines["hdims"].split()], lines["dtypes"].split()


@pytest.mark.parametrize("bench", BENCHES)
@pytest.mark.parametrize("args,message", [
    (["--hdim", "7"], "bad sizes"),
    (["--hdim", "264"], "bad sizes"),
    (["--batch", "0"], "bad sizes"),
    (["--reps", "0"], "bad sizes"),
    (["--seqlen", "12x"], "expected an integer"),
    (["--dtype", "fp32"], "--dtype"),
    (["--frobnicate"], "unknown argument"),
    (["--seqlen"], "missing value"),
])
def test_bad_arguments_exit_2_with_a_message(bench, args, message):
    result = run(bench, *args)
    assert result.returncode == 2
    assert message in result.stderr


def test_only_bench_bwd_takes_deterministic():
    bench = BUILD / "bench_fwd"
    if not bench.exists():
        pytest.skip("build/cpp/bench_fwd not built (make bench-cpp)")
    result = run(bench, "--deterministic")
    assert result.returncode == 2
    assert "unknown argument --deterministic" in result.stderr


@pytest.mark.parametrize("bench", BENCHES)
def test_help_lists_the_options(bench):
    result = run(bench, "--help")
    assert result.returncode == 0
    for option in ("--batch", "--seqlen", "--seqlen-k", "--heads", "--hdim", "--causal", "--dtype", "--reps",
                   "--check", "--grid", "--compiled"):
        assert option in result.stdout
    assert ("--deterministic" in result.stdout) == (bench.name == "bench_bwd")
    assert ("--family sm80|sm90|auto" in result.stdout) == (bench.name == "bench_fwd")


def test_family_option():
    """bench_fwd takes --family sm80|sm90|auto (bad values exit 2); bench_bwd has no such option."""
    fwd, bwd = BUILD / "bench_fwd", BUILD / "bench_bwd"
    if not fwd.exists():
        pytest.skip("build/cpp/bench_fwd not built (make bench-cpp)")
    result = run(fwd, "--family", "sm70")
    assert result.returncode == 2 and "--family: sm80, sm90 or auto, got sm70" in result.stderr
    hdims, dtypes = compiled(fwd)
    if not torch.cuda.is_available():  # a valid family gets as far as looking for the GPU
        result = run(fwd, "--family", "sm90", "--hdim", str(hdims[0]), "--dtype", dtypes[0])
        assert result.returncode == 2 and "no CUDA GPU" in result.stderr
    if bwd.exists():
        assert "unknown argument --family" in run(bwd, "--family", "sm80").stderr


@pytest.mark.parametrize("bench", BENCHES)
def test_compiled_lists_head_dims_and_dtypes(bench):
    hdims, dtypes = compiled(bench)
    assert hdims and set(hdims) <= set(ALL_HEAD_DIMS) and hdims == sorted(hdims)
    assert dtypes and set(dtypes) <= set(ALL_DTYPES)


def test_both_binaries_hold_the_same_build():
    fwd, bwd = BUILD / "bench_fwd", BUILD / "bench_bwd"
    if not (fwd.exists() and bwd.exists()):
        pytest.skip("needs both build/cpp/bench_fwd and bench_bwd")
    assert compiled(fwd) == compiled(bwd)


@pytest.mark.parametrize("bench", BENCHES)
def test_not_compiled_exits_3_before_looking_for_a_gpu(bench):
    hdims, dtypes = compiled(bench)
    cases = []
    if hdims[-1] < 256:  # head dims up to the largest compiled one run it (zero-padded)
        cases.append((["--hdim", "256", "--dtype", dtypes[0]], "head dim 256 is not compiled"))
    for dtype in set(ALL_DTYPES) - set(dtypes):
        cases.append((["--hdim", str(hdims[0]), "--dtype", dtype], f"dtype {dtype} is not compiled"))
    if not cases:
        pytest.skip("this build compiled every head dim and dtype")
    for args, message in cases:
        result = run(bench, *args, "--check")
        assert result.returncode == 3, (args, result.stderr)
        assert message in result.stderr


@pytest.mark.parametrize("bench", BENCHES)
def test_without_gpu_it_says_so(bench):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    hdims, dtypes = compiled(bench)
    extra = ["--deterministic"] if bench.name == "bench_bwd" else []
    result = run(bench, "--hdim", str(hdims[0]), "--dtype", dtypes[0], "--check", *extra)
    assert result.returncode == 2
    assert "no CUDA GPU" in result.stderr


CHECK_MATRIX = BUILD.parent.parent / "benchmarks" / "cpp" / "check_matrix.sh"


def test_check_matrix_needs_bench_fwd(tmp_path):
    result = subprocess.run(["bash", str(CHECK_MATRIX), str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "make bench-cpp" in result.stderr


def test_check_matrix_counts_uncompiled_cases_as_skipped(tmp_path):
    bench = BUILD / "bench_fwd"
    if not bench.exists():
        pytest.skip("build/cpp/bench_fwd not built (make bench-cpp)")
    hdims, dtypes = compiled(bench)
    missing = [t for t in ALL_DTYPES if t not in dtypes]
    if not missing:
        pytest.skip("this build compiled every dtype")
    env = {"PATH": "/usr/bin:/bin", "HDIMS": str(hdims[0]), "DTYPES": missing[0], "SEQLENS": "1000:1337",
           "NVIDIA_SMI": str(_stand_in(tmp_path, "nvidia-smi", "echo 'GPU 0: stand-in'"))}  # exit 3 comes first
    result = subprocess.run(["bash", str(CHECK_MATRIX)], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[-1] == f"0 passed, 0 failed, {len(lines) - 1} skipped"
    assert all(line.startswith("skip ") for line in lines[:-1])


def _stand_in(directory, name, body):
    """An executable shell script directory/name running body."""
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def _check_matrix_on_stand_ins(tmp_path, env):
    """check_matrix.sh on a build dir of stand-in bench_fwd / bench_bwd that log each run and pass."""
    build = tmp_path / "build"
    build.mkdir()
    for name in ("bench_fwd", "bench_bwd"):
        _stand_in(build, name, f'echo {name} >> "{tmp_path}/runs"; echo ok')
    env = {"PATH": "/usr/bin:/bin", "HDIMS": "64", "DTYPES": "bf16", "SEQLENS": "1000:1337", **env}
    result = subprocess.run(["bash", str(CHECK_MATRIX), str(build)], capture_output=True, text=True, timeout=60,
                            env=env)
    runs = (tmp_path / "runs").read_text().split() if (tmp_path / "runs").exists() else []
    return result, runs


NO_GPU = {  # how nvidia-smi says there is no GPU -> what check_matrix says
    "missing": ("", "nvidia-smi not found"),
    "no driver": ("echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"; exit 9",
                  "-L failed: NVIDIA-SMI has failed"),
    "no devices": ("echo 'No devices were found'", "-L lists no GPU"),
    "hidden": ("echo 'GPU 0: NVIDIA H200 (UUID: GPU-0)'", "CUDA_VISIBLE_DEVICES='' hides every GPU"),
}


@pytest.mark.parametrize("case", list(NO_GPU))
def test_check_matrix_without_gpu_says_so_once(tmp_path, case):
    body, reason = NO_GPU[case]
    smi = _stand_in(tmp_path, "smi", body) if body else tmp_path / "nvidia-smi"  # missing: a path that is not there
    env = {"NVIDIA_SMI": str(smi), **({"CUDA_VISIBLE_DEVICES": ""} if case == "hidden" else {})}
    result, runs = _check_matrix_on_stand_ins(tmp_path, env)
    assert result.returncode == 2
    assert result.stdout == "" and not runs  # no case ran
    [line] = result.stderr.splitlines()
    assert line.startswith("check_matrix: no CUDA GPU visible (") and reason in line


def test_check_matrix_on_this_machine_without_gpu(tmp_path):
    """The real nvidia-smi (absent, or failing without a driver) on a machine with no GPU."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result, runs = _check_matrix_on_stand_ins(tmp_path, {})
    assert result.returncode == 2 and result.stdout == "" and not runs
    [line] = result.stderr.splitlines()
    assert line.startswith("check_matrix: no CUDA GPU visible (")


def test_check_matrix_runs_bench_fwd_per_family(tmp_path):
    smi = _stand_in(tmp_path, "smi", "echo 'GPU 0: NVIDIA H200 (UUID: GPU-0)'")
    result, runs = _check_matrix_on_stand_ins(tmp_path, {"NVIDIA_SMI": str(smi), "FAMILIES": "sm80 sm90"})
    assert result.returncode == 0, result.stderr
    assert runs == ["bench_fwd", "bench_fwd", "bench_bwd"] * 2 + ["bench_bwd"]
    assert [line.split(" | ")[0].split()[-2:] for line in result.stdout.splitlines() if " bench_fwd " in line] == [
        ["--family", "sm80"], ["--family", "sm90"]] * 2


def test_check_matrix_runs_the_cases_when_nvidia_smi_lists_a_gpu(tmp_path):
    smi = _stand_in(tmp_path, "smi", "echo 'GPU 0: NVIDIA H200 (UUID: GPU-0)'")
    result, runs = _check_matrix_on_stand_ins(tmp_path, {"NVIDIA_SMI": str(smi)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "5 passed, 0 failed, 0 skipped"  # fwd, bwd x causal 0/1 + deterministic
    assert runs == ["bench_fwd", "bench_bwd"] * 2 + ["bench_bwd"]


# ---- make bench-cpp rebuilds when build flags change (make -t / make -n, no compiler) ----------

ROOT = BUILD.parent.parent
FAKE_NVCC = "nvcc-not-run"  # dry runs and make -t run no compile line


def _make_tree(tmp_path):
    """What the C++ benchmark build reads (Makefile, tools/, third_party/, csrc/, benchmarks/cpp/), copied
    without generated instantiations, and a stand-in CUTLASS_DIR."""
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "csrc", tree / "csrc", ignore=shutil.ignore_patterns("instantiations"))
    for d in ("tools", "third_party", "benchmarks/cpp"):
        shutil.copytree(ROOT / d, tree / d, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "Makefile", tree)
    for cutlass in ("cutlass", "cutlass2"):
        (tmp_path / cutlass / "include" / "cute").mkdir(parents=True)
        (tmp_path / cutlass / "include" / "cute" / "tensor.hpp").touch()
    return tree


def _env(tmp_path, **flags):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FLASH_ATTN_CUDA_", "MAKE")) and k not in ("MFLAGS", "CUTLASS_DIR", "NVCC", "BUILD")}
    env.update(CUTLASS_DIR=str(tmp_path / "cutlass"), NVCC=FAKE_NVCC, FLASH_ATTN_CUDA_ARCHS="90",
               FLASH_ATTN_CUDA_HDIMS="64", FLASH_ATTN_CUDA_DTYPES="bf16")
    env.update(flags)
    return env


def _make(tree, env, mode):
    """make MODE build/cpp/bench_fwd in tree; its planned compile lines (make -n) or what it touched (-t)."""
    result = subprocess.run(["make", "--no-print-directory", mode, "build/cpp/bench_fwd"], cwd=tree, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return [line for line in result.stdout.splitlines() if line.startswith((FAKE_NVCC, "touch"))]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_bench_cpp_rebuilds_when_build_flags_change(tmp_path):
    tree = _make_tree(tmp_path)
    base = _env(tmp_path)
    subprocess.run(["python3", "tools/gen_instantiations.py"], cwd=tree, env=base, check=True, capture_output=True)
    (tree / "build" / "cpp" / "instantiations").mkdir(parents=True)  # make -t touches, it does not mkdir

    # a finished build with the base flags, without compiling: make -t touches every target
    assert len(_make(tree, base, "-t")) == 3  # fwd_dispatch.o, fwd_hdim64_bf16.o, bench_fwd
    stamp = tree / "build" / "cpp" / "flags.stamp"
    text, mtime = stamp.read_text(), stamp.stat().st_mtime_ns
    assert f"{FAKE_NVCC} -O3" in text and "-gencode=arch=compute_90,code=sm_90" in text
    assert "-DFLASH_ATTN_CUDA_BACKWARD" in text and "csrc/instantiations/fwd_hdim64_bf16.cu" in text
    # same flags: nothing to compile, and the stamp is left alone
    assert _make(tree, base, "-n") == [] and _make(tree, base, "-t") == []
    assert stamp.stat().st_mtime_ns == mtime
    # gencode, -D flags (FLASH_ATTN_CUDA_BACKWARD works the same way), include path
    for change in ({"FLASH_ATTN_CUDA_ARCHS": "80"}, {"FLASH_ATTN_CUDA_FEATURES": "0"},
                   {"CUTLASS_DIR": str(tmp_path / "cutlass2")}):
        planned = _make(tree, _env(tmp_path, **change), "-n")
        assert len(planned) == 3, (change, planned)  # both objects recompiled and bench_fwd relinked
        assert stamp.read_text() != text  # (make -n rewrote it: the '+' line runs in dry runs)
        assert len(_make(tree, base, "-t")) == 3 and stamp.read_text() == text  # back to the base build


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_bench_cpp_compiles_sm90_units_for_sm90a_only(tmp_path):
    """With 90a in the archs the generator writes sm90_fwd_*.cu (the plain unit, the dropout
    variant's and d = 64's short causal kernel, on by default) and make compiles them with the
    sm90 family's flags (sm_90a alone, extended wgmma shapes), every other object with the plain
    archs."""
    tree = _make_tree(tmp_path)
    env = _env(tmp_path, FLASH_ATTN_CUDA_ARCHS="90;90a")
    subprocess.run(["python3", "tools/gen_instantiations.py"], cwd=tree, env=env, check=True, capture_output=True)
    planned = _make(tree, env, "-n")
    objects = {line.split(" -o ")[1].split()[0]: line for line in planned if " -c " in line}
    assert set(objects) == {"build/cpp/fwd_dispatch.o", "build/cpp/instantiations/fwd_hdim64_bf16.o",
                            "build/cpp/instantiations/sm90_fwd_hdim64_bf16.o",
                            "build/cpp/instantiations/sm90_fwd_hdim64_bf16_dropout.o",
                            "build/cpp/instantiations/sm90_fwd_hdim64_bf16_short_causal.o"}
    for obj, line in objects.items():
        sm90 = "sm90_" in obj
        assert ("-gencode=arch=compute_90a,code=sm_90a" in line) == sm90, line
        assert ("-DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED" in line) == sm90, line
        assert ("-gencode=arch=compute_90,code=sm_90" in line) == (not sm90), line
    link = [line for line in planned if " -c " not in line and "bench_fwd.cu" in line]
    assert link and "build/cpp/instantiations/sm90_fwd_hdim64_bf16.o" in link[0]
    assert "build/cpp/instantiations/sm90_fwd_hdim64_bf16_dropout.o" in link[0]
    assert "build/cpp/instantiations/sm90_fwd_hdim64_bf16_short_causal.o" in link[0]
    # dropping 90a: the generator removes the sm90 unit and the flags stamp changes, so all is rebuilt
    plain = _env(tmp_path, FLASH_ATTN_CUDA_ARCHS="90")
    subprocess.run(["python3", "tools/gen_instantiations.py"], cwd=tree, env=plain, check=True, capture_output=True)
    assert not list((tree / "csrc" / "instantiations").glob("sm90_*"))
    replanned = _make(tree, plain, "-n")
    assert not any("instantiations/sm90_" in line for line in replanned), replanned


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_check_sass_on_a_fresh_tree_checks_the_units_it_generates(tmp_path):
    """CI's order: the extension build's generator leaves no sm90 unit (archs 90), then make check-sass
    with 90a generates them (the forward's and the backward's plain and dropout units, d = 64's short
    causal forward) and must compile and check them (make expands a recipe before running it, so the
    check runs in a sub-make that sees the new file). Stand-in nvcc and cuobjdump, no compiler."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_check_sass_cpu import GOOD
    tree = _make_tree(tmp_path)
    nvcc, cuobjdump, sass = tmp_path / "nvcc", tmp_path / "cuobjdump", tmp_path / "good.sass"
    sass.write_text(GOOD)
    nvcc.write_text('#!/bin/sh\nwhile [ $# -gt 0 ]; do [ "$1" = -o ] && touch "$2"; shift; done\n')
    cuobjdump.write_text(f'#!/bin/sh\ncat "{sass}"\n')
    for tool in (nvcc, cuobjdump):
        tool.chmod(0o755)
    plain = _env(tmp_path)
    subprocess.run(["python3", "tools/gen_instantiations.py"], cwd=tree, env=plain, check=True, capture_output=True)
    assert not list((tree / "csrc" / "instantiations").glob("sm90_*"))
    env = _env(tmp_path, FLASH_ATTN_CUDA_ARCHS="90;90a", NVCC=str(nvcc), CUOBJDUMP=str(cuobjdump))
    result = subprocess.run(["make", "--no-print-directory", "check-sass"], cwd=tree, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "check_sass: ok: 5 object(s)" in result.stdout + result.stderr
    assert (tree / "build" / "cpp" / "instantiations" / "sm90_fwd_hdim64_bf16.o").exists()
    assert (tree / "build" / "cpp" / "instantiations" / "sm90_fwd_hdim64_bf16_short_causal.o").exists()
    assert (tree / "build" / "cpp" / "instantiations" / "sm90_fwd_hdim64_bf16_dropout.o").exists()
    assert (tree / "build" / "cpp" / "instantiations" / "sm90_bwd_hdim64_bf16.o").exists()
    assert (tree / "build" / "cpp" / "instantiations" / "sm90_bwd_hdim64_bf16_dropout.o").exists()
