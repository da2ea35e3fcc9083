"""Build-flag parsing and instantiation generation (tools/), no compiler needed."""
import os
import pathlib
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tools"))
import build_config  # noqa: E402
import gen_instantiations  # noqa: E402


def test_defaults():
    cfg = build_config.from_env({})
    assert cfg.archs == (80, 90)
    assert cfg.head_dims == (32, 64, 96, 128, 160, 192, 224, 256)
    assert cfg.dtypes == ("fp16", "bf16")
    assert cfg.backward is True


def test_backward_and_features_flags():
    assert build_config.from_env({"FLASH_ATTN_CUDA_BACKWARD": "1"}).backward is True
    assert build_config.from_env({"FLASH_ATTN_CUDA_BACKWARD": "off"}).backward is False
    with pytest.raises(ValueError, match="FLASH_ATTN_CUDA_BACKWARD"):
        build_config.from_env({"FLASH_ATTN_CUDA_BACKWARD": "maybe"})
    assert build_config.from_env({}).features is True
    assert build_config.from_env({"FLASH_ATTN_CUDA_FEATURES": "0"}).features is False
    with pytest.raises(ValueError, match="FLASH_ATTN_CUDA_FEATURES"):
        build_config.from_env({"FLASH_ATTN_CUDA_FEATURES": "2"})


def test_compile_defines_follow_the_flags():
    defines = build_config.compile_defines
    assert defines(build_config.from_env({})) == ["-DFLASH_ATTN_CUDA_BACKWARD"]
    assert defines(build_config.from_env({"FLASH_ATTN_CUDA_BACKWARD": "0", "FLASH_ATTN_CUDA_FEATURES": "0"})) == [
        "-DFLASH_ATTN_CUDA_NO_FEATURES"]


@pytest.mark.parametrize("text,expected", [("90", (90,)), ("80;90", (80, 90)), ("9.0, 8.0", (80, 90)),
                                           ("sm_90", (90,)), ("90 90", (90,))])
def test_archs(text, expected):
    assert build_config.parse_archs(text) == expected


@pytest.mark.parametrize("bad", ["75", "sm_70", "ninety", "9"])
def test_bad_archs_raise(bad):
    with pytest.raises(ValueError, match="FLASH_ATTN_CUDA_ARCHS"):
        build_config.parse_archs(bad)


def test_head_dims_and_dtypes():
    assert build_config.parse_head_dims("128,64;64") == (64, 128)
    assert build_config.parse_head_dims("all") == build_config.ALL_HEAD_DIMS
    assert build_config.parse_dtypes("bfloat16") == ("bf16",)
    assert build_config.parse_dtypes("bf16,fp16") == ("fp16", "bf16")
    with pytest.raises(ValueError, match="FLASH_ATTN_CUDA_HDIMS"):
        build_config.parse_head_dims("48")
    with pytest.raises(ValueError, match="FLASH_ATTN_CUDA_DTYPES"):
        build_config.parse_dtypes("fp32")


def test_gencode_flags_embed_ptx_of_newest_arch():
    flags = build_config.nvcc_gencode_flags((80, 90))
    assert "-gencode=arch=compute_80,code=sm_80" in flags
    assert "-gencode=arch=compute_90,code=sm_90" in flags
    assert flags[-1] == "-gencode=arch=compute_90,code=compute_90"


def test_generator_writes_one_file_per_config_and_removes_stale(tmp_path):
    files = gen_instantiations.generate(tmp_path, (64, 128), ("bf16",))
    assert sorted(pathlib.Path(f).name for f in files) == ["fwd_hdim128_bf16.cu", "fwd_hdim64_bf16.cu"]
    text = (tmp_path / "fwd_hdim64_bf16.cu").read_text()
    assert "run_fwd_<cutlass::bfloat16_t, 64>" in text
    config = (tmp_path / "build_config.h").read_text()
    assert "#define FLASH_FOR_EACH_HDIM(X) X(64) X(128)" in config
    assert "X(kBFloat16, cutlass::bfloat16_t)" in config and "kFloat16," not in config
    gen_instantiations.generate(tmp_path, (64,), ("fp16",))
    assert sorted(p.name for p in tmp_path.glob("*.cu")) == ["fwd_hdim64_fp16.cu"]
    gen_instantiations.generate(tmp_path, (64,), ("fp16",), ("fwd", "bwd"))
    assert sorted(p.name for p in tmp_path.glob("*.cu")) == ["bwd_hdim64_fp16.cu", "fwd_hdim64_fp16.cu"]
    assert "run_bwd_<cutlass::half_t, 64>(const flash::BwdParams&" in (tmp_path / "bwd_hdim64_fp16.cu").read_text()


MEMINFO = "MemTotal:       131072000 kB\nMemFree:         1000000 kB\nMemAvailable:   23068672 kB\n"


def test_mem_available_from_proc_meminfo():
    assert build_config.mem_available_bytes(MEMINFO) == 23068672 * 1024  # 22 GiB
    assert build_config.mem_available_bytes("MemTotal:  1000 kB\n") is None  # old kernels: no MemAvailable
    assert build_config.mem_available_bytes("") is None


GIB = 2 ** 30


@pytest.mark.parametrize("nproc,mem,jobs", [
    (16, 22 * GIB, 4),       # memory-bound: 22 GiB / 5 GiB per job
    (2, 22 * GIB, 2),        # core-bound
    (16, 200 * GIB, 16),
    (16, 3 * GIB, 1),        # at least one job
    (16, None, 16),          # no /proc/meminfo: one per core
    (0, None, 1),
])
def test_max_jobs_unset_is_bounded_by_cores_and_memory(nproc, mem, jobs):
    value, why = build_config.max_jobs(None, nproc, mem)
    assert value == str(jobs)
    assert why.startswith(f"MAX_JOBS unset -> {jobs} jobs ({max(nproc, 1)} cores, ")


def test_max_jobs_message():
    assert build_config.max_jobs("", 16, 22 * GIB) == (
        "4", "MAX_JOBS unset -> 4 jobs (16 cores, 22 GiB available, ~5 GiB per job)")
    assert build_config.max_jobs(None, 8, None)[1] == "MAX_JOBS unset -> 8 jobs (8 cores, available memory unknown)"


def test_max_jobs_set_is_kept():
    assert build_config.max_jobs("32", 2, 1 * GIB) == ("32", "MAX_JOBS=32 (from the environment)")


def test_cutlass_headers_need_none_of_the_wheels_dependencies():
    """The README installs nvidia-cutlass with --no-deps: finding its headers imports none of the
    wheel's dependencies (blocked here)."""
    deps = ["scipy", "networkx", "pydot", "cuda", "treelib", "numpy"]
    code = (f"import sys; sys.modules.update(dict.fromkeys({deps!r})); sys.path.insert(0, 'third_party'); "
            "import find_cutlass; print(find_cutlass.include_dir())")
    env = {k: v for k, v in os.environ.items() if k != "CUTLASS_DIR"}
    root = pathlib.Path(__file__).resolve().parent.parent
    result = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True,
                            timeout=60)
    if "CUTLASS headers not found" in result.stderr:
        pytest.skip("nvidia-cutlass is not installed")
    assert result.returncode == 0, result.stderr
    assert (pathlib.Path(result.stdout.strip()) / "cute" / "tensor.hpp").is_file()
