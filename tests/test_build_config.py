"""Build-flag parsing and instantiation generation (tools/), no compiler needed."""
import os
import pathlib
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tools"))
import build_config  # noqa: E402
import gen_instantiations  # noqa: E402


def no_gpu():
    return []


def test_defaults():
    cfg = build_config.from_env({}, no_gpu)
    assert cfg.archs == (80, 90) and cfg.sm90a is True  # the full default without a GPU: "80;90;90a"
    assert build_config.families(cfg) == ("sm80", "sm90")
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
    persistent = ["-DFLASH_ATTN_CUDA_SM90_PERSISTENT", "-DFLASH_ATTN_CUDA_SM90_NO_ONE_TILE"]  # the default kernel
    assert defines(build_config.from_env({}, no_gpu)) == ["-DFLASH_ATTN_CUDA_BACKWARD"] + persistent
    assert defines(build_config.from_env({"FLASH_ATTN_CUDA_BACKWARD": "0", "FLASH_ATTN_CUDA_FEATURES": "0"},
                                         no_gpu)) == ["-DFLASH_ATTN_CUDA_NO_FEATURES"] + persistent
    assert defines(build_config.from_env({"FLASH_ATTN_CUDA_ARCHS": "90;90a"})) == [
        "-DFLASH_ATTN_CUDA_BACKWARD", "-DFLASH_ATTN_CUDA_NO_SMEM_TILES"] + persistent
    assert defines(build_config.from_env({"FLASH_ATTN_CUDA_ARCHS": "90;90a", "FLASH_ATTN_CUDA_SM90_PERSISTENT": "1"})) == [
        "-DFLASH_ATTN_CUDA_BACKWARD", "-DFLASH_ATTN_CUDA_NO_SMEM_TILES"] + persistent


@pytest.mark.parametrize("value,persistent,one_tile", [
    (None, True, False), ("", True, False), ("1", True, False), ("0", False, True), ("both", True, True),
    (" Both ", True, True)])
def test_sm90_persistent_option_picks_the_kernels(value, persistent, one_tile):
    env = {} if value is None else {"FLASH_ATTN_CUDA_SM90_PERSISTENT": value}
    cfg = build_config.from_env(env, no_gpu)
    assert (cfg.sm90_persistent, cfg.sm90_one_tile) == (persistent, one_tile)
    flags = build_config.compile_defines(cfg)
    assert ("-DFLASH_ATTN_CUDA_SM90_PERSISTENT" in flags) == persistent
    assert ("-DFLASH_ATTN_CUDA_SM90_NO_ONE_TILE" in flags) == (not one_tile)


@pytest.mark.parametrize("value,expected", [(None, True), ("0", False), ("1", True)])
def test_sm90_short_causal_option(value, expected):
    """FLASH_ATTN_CUDA_SM90_SHORT_CAUSAL: on unless set to 0 (the default build with it: 295.5 s on the H200 host)."""
    env = {} if value is None else {"FLASH_ATTN_CUDA_SM90_SHORT_CAUSAL": value}
    assert build_config.from_env(env, no_gpu).sm90_short_causal == expected


def test_sm90_short_causal_option_rejects_garbage():
    with pytest.raises(ValueError, match="FLASH_ATTN_CUDA_SM90_SHORT_CAUSAL"):
        build_config.from_env({"FLASH_ATTN_CUDA_SM90_SHORT_CAUSAL": "short"}, no_gpu)


@pytest.mark.parametrize("value", ["sms", "2", "persistent"])
def test_sm90_persistent_option_rejects_garbage(value):
    with pytest.raises(ValueError, match="FLASH_ATTN_CUDA_SM90_PERSISTENT"):
        build_config.from_env({"FLASH_ATTN_CUDA_SM90_PERSISTENT": value}, no_gpu)


@pytest.mark.parametrize("archs,value,expected", [
    ("80;90;90a", None, True), ("86", "", True), ("89", "auto", True),     # auto: an arch below 9.0 is listed
    ("90;90a", None, False), ("90", "AUTO", False),                       # a 9.0-only build never launches them
    ("90;90a", "1", True), ("80;90", "0", False)])                         # forced either way
def test_smem_tiles_flag(archs, value, expected):
    env = {"FLASH_ATTN_CUDA_ARCHS": archs}
    if value is not None:
        env["FLASH_ATTN_CUDA_SMEM_TILES"] = value
    assert build_config.from_env(env).smem_tiles is expected
    with pytest.raises(ValueError, match="FLASH_ATTN_CUDA_SMEM_TILES"):
        build_config.from_env({**env, "FLASH_ATTN_CUDA_SMEM_TILES": "sometimes"})


def test_generator_without_small_tiles_writes_no_smem_rows(tmp_path):
    files = gen_instantiations.generate(tmp_path, (64, 256), ("bf16",), ("fwd", "bwd"), smem_tiles=True)
    assert any("_smem" in f for f in files)
    files = gen_instantiations.generate(tmp_path, (64, 256), ("bf16",), ("fwd", "bwd"), smem_tiles=False)
    assert sorted(p.name for p in tmp_path.glob("*.cu")) == [
        "bwd_hdim256_bf16.cu", "bwd_hdim64_bf16.cu", "fwd_hdim256_bf16.cu", "fwd_hdim64_bf16.cu"]


@pytest.mark.parametrize("text,expected", [("90", (90,)), ("80;90", (80, 90)), ("9.0, 8.0", (80, 90)),
                                           ("sm_90", (90,)), ("90 90", (90,))])
def test_archs(text, expected):
    assert build_config.parse_archs(text) == expected


@pytest.mark.parametrize("bad", ["75", "sm_70", "ninety", "9", "100a", "80a", "9.0b"])
def test_bad_archs_raise(bad):
    with pytest.raises(ValueError, match="FLASH_ATTN_CUDA_ARCHS"):
        build_config.parse_archs(bad)


@pytest.mark.parametrize("text,archs,sm90a", [
    ("90;90a", (90,), True), ("80 90 90a", (80, 90), True), ("9.0a", (90,), True), ("sm_90a", (90,), True),
    ("90a", (90,), True),  # the sm80 family (fallback, backward, decode) is built for plain 90 then
    ("80;90", (80, 90), False), ("86", (86,), False), ("100", (100,), False),
])
def test_arch_list_with_90a(text, archs, sm90a):
    assert build_config.parse_arch_list(text) == (archs, sm90a)
    cfg = build_config.from_env({"FLASH_ATTN_CUDA_ARCHS": text}, no_gpu)
    assert (cfg.archs, cfg.sm90a) == (archs, sm90a)
    assert build_config.families(cfg) == (("sm80", "sm90") if sm90a else ("sm80",))


def probe(*capabilities):
    """A visible-GPU probe returning these compute capabilities; fails the test if called twice."""
    calls = []

    def visible():
        calls.append(1)
        assert len(calls) == 1
        return list(capabilities)
    return visible


def fail_probe():
    raise AssertionError("the GPUs must not be probed when an arch list is set")


@pytest.mark.parametrize("capabilities,archs,sm90a", [
    ([(9, 0)], (90,), True),                   # H100/H200: sm80-family code for 9.0 plus the sm90 family
    ([(8, 0), (8, 0)], (80,), False),
    ([(8, 6), (9, 0)], (86, 90), True),
    ([(8, 9)], (89,), False),
    ([(10, 0)], (100,), False),                # sm_90a code does not run on 10.0: sm80 family only
    ([(7, 5), (9, 0)], (90,), True),           # a GPU the kernels cannot run on is left out
])
def test_default_archs_are_the_visible_gpus(capabilities, archs, sm90a):
    got_archs, got_sm90a, why = build_config.resolve_archs({}, probe(*capabilities))
    assert (got_archs, got_sm90a) == (archs, sm90a)
    assert why.startswith("the visible GPUs (compute capability ")
    assert build_config.format_archs(got_archs, got_sm90a) == ";".join(map(str, archs)) + (";90a" if sm90a else "")


@pytest.mark.parametrize("capabilities,why", [([], "no GPU visible: the full default"),
                                              ([(7, 5)], "no visible GPU is sm_80 or newer: the full default")])
def test_default_archs_without_a_usable_gpu(capabilities, why):
    assert build_config.resolve_archs({}, probe(*capabilities)) == ((80, 90), True, why)
    assert build_config.format_archs((80, 90), True) == "80;90;90a"


def test_arch_lists_take_precedence_over_the_gpus():
    env = {"FLASH_ATTN_CUDA_ARCHS": "80", "TORCH_CUDA_ARCH_LIST": "9.0a"}
    assert build_config.resolve_archs(env, fail_probe) == ((80,), False, "FLASH_ATTN_CUDA_ARCHS=80")
    # PyTorch's variable and forms: +PTX, archs below sm_80 dropped (it serves every extension)
    env = {"TORCH_CUDA_ARCH_LIST": "7.5;8.0;8.6+PTX;9.0a"}
    assert build_config.resolve_archs(env, fail_probe)[:2] == ((80, 86, 90), True)
    # "native" (as in PyTorch) and empty values mean the visible GPUs
    assert build_config.resolve_archs({"TORCH_CUDA_ARCH_LIST": "native", "FLASH_ATTN_CUDA_ARCHS": " "},
                                      probe((9, 0)))[:2] == ((90,), True)
    with pytest.raises(ValueError, match="TORCH_CUDA_ARCH_LIST: no arch of sm_80 or newer"):
        build_config.resolve_archs({"TORCH_CUDA_ARCH_LIST": "7.0;7.5"}, fail_probe)
    with pytest.raises(ValueError, match="TORCH_CUDA_ARCH_LIST: expected compute capabilities"):
        build_config.resolve_archs({"TORCH_CUDA_ARCH_LIST": "Hopper"}, fail_probe)


def test_visible_gpu_probe_on_this_machine():
    """The real probe answers a list of (major, minor) either way (empty without a GPU)."""
    import torch
    capabilities = build_config.visible_gpu_capabilities()
    assert capabilities == [tuple(torch.cuda.get_device_capability(i)) for i in range(torch.cuda.device_count())] \
        if torch.cuda.is_available() else capabilities == []


def test_family_flags_sm90_units_get_sm90a_only():
    cfg = build_config.from_env({"FLASH_ATTN_CUDA_ARCHS": "80;90;90a"}, no_gpu)
    sm80 = build_config.family_gencode_flags("sm80", cfg)
    sm90 = build_config.family_gencode_flags("sm90", cfg)
    assert sm90 == ["-gencode=arch=compute_90a,code=sm_90a", "-DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED"]
    assert sm80 == build_config.nvcc_gencode_flags((80, 90))
    assert not any("90a" in f or "EXTENDED_MMA" in f for f in sm80)


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
    # the backward's 99 KB row (sm86/sm89) has a tile of its own at d = 64: one extra file
    assert sorted(p.name for p in tmp_path.glob("*.cu")) == ["bwd_hdim64_fp16.cu", "bwd_hdim64_fp16_smem99.cu",
                                                              "fwd_hdim64_fp16.cu"]
    assert "run_bwd_<cutlass::half_t, 64>(const flash::BwdParams&" in (tmp_path / "bwd_hdim64_fp16.cu").read_text()
    assert "run_bwd_<cutlass::half_t, 64, 99>(const flash::BwdParams&" in \
        (tmp_path / "bwd_hdim64_fp16_smem99.cu").read_text()
    # d = 256: the forward's 99 KB row, the backward's 163 and 99 KB rows
    gen_instantiations.generate(tmp_path, (256,), ("bf16",), ("fwd", "bwd"))
    assert sorted(p.name for p in tmp_path.glob("*.cu")) == [
        "bwd_hdim256_bf16.cu", "bwd_hdim256_bf16_smem163.cu", "bwd_hdim256_bf16_smem99.cu",
        "fwd_hdim256_bf16.cu", "fwd_hdim256_bf16_smem99.cu"]


def test_generator_sm90_rows(tmp_path):
    """sm90 files: forward head dims {64, 128, 256}, backward {64, 128, 256} of the built ones (each with a
    dropout variant file of its own, with the feature kernels), every built dtype, only with the sm90
    family; build_config.h lists them."""
    hdims, dtypes = (32, 64, 96, 128, 256), ("fp16", "bf16")
    files = gen_instantiations.generate(tmp_path, hdims, dtypes, ("fwd", "bwd"), ("sm80", "sm90"))
    sm90 = sorted(pathlib.Path(f).name for f in files if pathlib.Path(f).name.startswith("sm90_"))
    assert sm90 == sorted([f"sm90_fwd_hdim{d}_{t}{v}.cu" for d in (64, 128, 256) for t in dtypes for v in ("", "_dropout")] +
                          [f"sm90_bwd_hdim{d}_{t}{v}.cu" for d in (64, 128, 256) for t in dtypes
                           for v in ("", "_dropout")])
    extra = sum(len(gen_instantiations.SMEM_TILES.get((direction, d), ())) for direction in ("fwd", "bwd") for d in hdims)
    assert len(files) == (2 * len(hdims) + extra) * len(dtypes) + len(sm90)  # sm80 fwd + bwd unchanged
    text = (tmp_path / "sm90_fwd_hdim128_bf16.cu").read_text()
    assert '#include "../sm90/fwd_launch.h"' in text
    assert "template cudaError_t flash::sm90::run_fwd_<cutlass::bfloat16_t, 128>(const flash::FwdParams&, cudaStream_t);" \
        in text
    assert text.count("template ") == 1
    text = (tmp_path / "sm90_fwd_hdim256_fp16_dropout.cu").read_text()
    assert '#include "../sm90/fwd_launch.h"' in text
    assert "template cudaError_t flash::sm90::run_fwd_<cutlass::half_t, 256, true>(const flash::FwdParams&, cudaStream_t);" \
        in text
    assert text.count("template ") == 1
    config = (tmp_path / "build_config.h").read_text()
    assert "#define FLASH_SM90_FOR_EACH_HDIM(X) X(64) X(128) X(256)\n" in config
    assert "#define FLASH_SM90_DROPOUT_FOR_EACH_HDIM(X) X(64) X(128) X(256)\n" in config
    assert "#define FLASH_SM90_BWD_FOR_EACH_HDIM(X) X(64) X(128) X(256)\n" in config
    assert "#define FLASH_SM90_BWD_DROPOUT_FOR_EACH_HDIM(X) X(64) X(128) X(256)\n" in config
    bwd_text = (tmp_path / "sm90_bwd_hdim64_fp16.cu").read_text()
    assert "template cudaError_t flash::sm90::run_bwd_<cutlass::half_t, 64>(const flash::BwdParams&, cudaStream_t);" \
        in bwd_text
    for d in (128, 256):
        bwd_text = (tmp_path / f"sm90_bwd_hdim{d}_bf16_dropout.cu").read_text()
        assert (f"template cudaError_t flash::sm90::run_bwd_<cutlass::bfloat16_t, {d}, true>(const flash::BwdParams&, "
                "cudaStream_t);") in bwd_text and bwd_text.count("template ") == 1
    assert all(gen_instantiations.source_family(f) == ("sm90" if pathlib.Path(f).name in sm90 else "sm80")
               for f in files)

    # without the feature kernels: the plain sm90 files only, no dropout variant listed
    files = gen_instantiations.generate(tmp_path, hdims, dtypes, ("fwd", "bwd"), ("sm80", "sm90"), features=False)
    assert sorted(p.name for p in tmp_path.glob("sm90_*")) == sorted([f"sm90_fwd_hdim{d}_{t}.cu" for d in (64, 128, 256)
                                                                      for t in dtypes] +
                                                                     [f"sm90_bwd_hdim{d}_{t}.cu" for d in (64, 128, 256)
                                                                      for t in dtypes])
    config = (tmp_path / "build_config.h").read_text()
    assert "#define FLASH_SM90_FOR_EACH_HDIM(X) X(64) X(128) X(256)\n" in config
    assert "#define FLASH_SM90_DROPOUT_FOR_EACH_HDIM(X) \n" in config
    assert "#define FLASH_SM90_BWD_FOR_EACH_HDIM(X) X(64) X(128) X(256)\n" in config
    assert "#define FLASH_SM90_BWD_DROPOUT_FOR_EACH_HDIM(X) \n" in config

    assert "#define FLASH_SM90_SHORT_CAUSAL_FOR_EACH_HDIM(X) \n" in config

    # FLASH_ATTN_CUDA_SM90_SHORT_CAUSAL: d = 64's short causal kernel, a unit per dtype, listed
    files = gen_instantiations.generate(tmp_path, hdims, dtypes, ("fwd",), ("sm80", "sm90"), features=False,
                                        short_causal=True)
    assert sorted(p.name for p in tmp_path.glob("sm90_*short_causal*")) == [f"sm90_fwd_hdim64_{t}_short_causal.cu"
                                                                           for t in sorted(dtypes)]
    text = (tmp_path / "sm90_fwd_hdim64_bf16_short_causal.cu").read_text()
    assert ("template cudaError_t flash::sm90::run_fwd_<cutlass::bfloat16_t, 64, false, true>(const flash::FwdParams&, "
            "cudaStream_t);") in text and text.count("template ") == 1
    config = (tmp_path / "build_config.h").read_text()
    assert "#define FLASH_SM90_SHORT_CAUSAL_FOR_EACH_HDIM(X) X(64)\n" in config
    files = gen_instantiations.generate(tmp_path, (128, 256), dtypes, ("fwd",), ("sm80", "sm90"), short_causal=True)
    assert not list(tmp_path.glob("sm90_*short_causal*"))  # no d = 64 built: no unit, empty list
    assert "#define FLASH_SM90_SHORT_CAUSAL_FOR_EACH_HDIM(X) \n" in (tmp_path / "build_config.h").read_text()

    # without the sm90 family: no sm90 files (stale ones removed), empty lists in build_config.h
    files = gen_instantiations.generate(tmp_path, hdims, dtypes, ("fwd", "bwd"), ("sm80",))
    assert not list(tmp_path.glob("sm90_*")) and all(gen_instantiations.source_family(f) == "sm80" for f in files)
    config = (tmp_path / "build_config.h").read_text()
    assert "#define FLASH_SM90_FOR_EACH_HDIM(X) \n" in config and "#define FLASH_SM90_DROPOUT_FOR_EACH_HDIM(X) \n" in config
    assert "#define FLASH_SM90_BWD_FOR_EACH_HDIM(X) \n" in config
    assert "#define FLASH_SM90_BWD_DROPOUT_FOR_EACH_HDIM(X) \n" in config
    # head dims outside {64, 128, 256} only: the family is built but has nothing to compile
    gen_instantiations.generate(tmp_path, (96,), ("bf16",), ("fwd",), ("sm80", "sm90"))
    assert sorted(p.name for p in tmp_path.glob("*.cu")) == ["fwd_hdim96_bf16.cu"]


def test_generator_decode_wide_units(tmp_path):
    """The decode kernel's wide tile (csrc/decode_traits.h decode_has_wide: d = 128) gets a unit per dtype
    whenever the decode direction builds d = 128: the dispatch references it unconditionally."""
    wide_hdims = gen_instantiations.VARIANTS[("sm80", "decode")]["wide"][1]
    traits = (pathlib.Path(__file__).resolve().parent.parent / "csrc" / "decode_traits.h").read_text()
    assert "constexpr bool decode_has_wide(int headdim) { return headdim == 128; }" in traits and wide_hdims == (128,)
    gen_instantiations.generate(tmp_path, (64, 128), ("bf16", "fp16"), ("fwd", "decode"), ("sm80",), features=False)
    assert sorted(p.name for p in tmp_path.glob("decode_*wide*")) == ["decode_hdim128_bf16_wide.cu",
                                                                     "decode_hdim128_fp16_wide.cu"]
    text = (tmp_path / "decode_hdim128_bf16_wide.cu").read_text()
    assert "flash::run_decode_<cutlass::bfloat16_t, 128, true>(const flash::KvCacheParams&, cudaStream_t);" in text
    gen_instantiations.generate(tmp_path, (64, 256), ("bf16",), ("fwd", "decode"), ("sm80",), features=False)
    assert not list(tmp_path.glob("decode_*wide*"))  # no d = 128: no wide unit (stale ones removed)


def test_generator_command_line_follows_the_arch_flag(tmp_path):
    root = pathlib.Path(__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLASH_ATTN_CUDA_")}
    for archs, expected in (("90;90a", ["fwd_hdim128_bf16.cu", "sm90_fwd_hdim128_bf16.cu",
                                        "sm90_fwd_hdim128_bf16_dropout.cu"]),
                            ("90", ["fwd_hdim128_bf16.cu"])):
        env.update(FLASH_ATTN_CUDA_ARCHS=archs, FLASH_ATTN_CUDA_HDIMS="128", FLASH_ATTN_CUDA_DTYPES="bf16",
                   FLASH_ATTN_CUDA_BACKWARD="0", FLASH_ATTN_CUDA_KVCACHE="0")
        subprocess.run([sys.executable, str(root / "tools" / "gen_instantiations.py"), "--out", str(tmp_path)],
                       env=env, check=True, capture_output=True, timeout=120)
        assert sorted(p.name for p in tmp_path.glob("*.cu")) == expected, archs


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
