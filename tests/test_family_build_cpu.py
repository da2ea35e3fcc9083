"""Per-file nvcc flags (tools/family_build.py): the sm90 family's units (sm90_*.cu) are compiled for
sm_90a alone, every other unit with the plain archs and never for sm_90a. No compiler needed: the
last tests run torch's real BuildExtension (ninja and file-by-file) on a stand-in nvcc that records
its command lines."""
import inspect
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.utils.cpp_extension as cpp_extension

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import build_config  # noqa: E402
import family_build  # noqa: E402

GENCODE = build_config.nvcc_gencode_flags((80, 90))
SM90 = "-gencode=arch=compute_90a,code=sm_90a"


def test_sm90_flag_list():
    flags = ["-O3", *GENCODE, "-DX", "--threads", "2"]
    assert family_build.sm90_nvcc_flags(flags) == ["-O3", "-DX", "--threads", "2", SM90,
                                                   "-DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED"]


def write_torch_ninja(path, sources, nvcc_flags):
    """build.ninja as this torch's _write_ninja_file writes it (its arguments differ across versions:
    passed by name)."""
    objects = [str(path.parent / (pathlib.Path(s).stem + ".o")) for s in sources]
    values = dict(path=str(path), cflags=["-O3"], post_cflags=["-std=c++20"], cuda_cflags=["-I/x"],
                  cuda_post_cflags=[shlex.quote(f) for f in nvcc_flags + ["--compiler-options", "-fPIC"]],
                  cuda_dlink_post_cflags=None, sources=sources, objects=objects, ldflags=None,
                  library_target=None, with_cuda=True)
    params = inspect.signature(cpp_extension._write_ninja_file).parameters
    cpp_extension._write_ninja_file(**{name: values.get(name) for name in params})
    return path.read_text()


def edges(text):
    """{source name: the cuda_post_cflags its edge runs with} of a build.ninja."""
    lines = text.splitlines()
    global_flags = next(line.split(" = ", 1)[1] for line in lines if line.startswith("cuda_post_cflags = "))
    out = {}
    for i, line in enumerate(lines):
        if line.startswith("build ") and ": cuda_compile " in line:
            following = lines[i + 1] if i + 1 < len(lines) else ""
            override = following.startswith("  cuda_post_cflags = ")
            out[pathlib.Path(line.split()[-1]).name] = following.split(" = ", 1)[1] if override else global_flags
    return out


def test_patch_of_torchs_ninja_file(tmp_path):
    sources = [str(tmp_path / n) for n in ("fwd_dispatch.cu", "sm90_fwd_hdim128_bf16.cu", "fwd_hdim128_bf16.cu",
                                           "sm90_fwd_hdim64_fp16.cu")]
    text = write_torch_ninja(tmp_path / "build.ninja", sources, ["-O3", *GENCODE, "-DFLASH_ATTN_CUDA_BACKWARD"])
    patched = family_build.patch_ninja(text, GENCODE)
    flags = edges(patched)
    assert set(flags) == {pathlib.Path(s).name for s in sources}
    # the edges in longest-first order (family_build.UNIT_SECONDS; name order among equals); the file keeps
    # every other line
    assert list(flags) == ["sm90_fwd_hdim128_bf16.cu", "fwd_hdim128_bf16.cu", "sm90_fwd_hdim64_fp16.cu",
                           "fwd_dispatch.cu"]
    assert sorted(line for line in patched.splitlines() if not line.startswith("  cuda_post_cflags")) == \
        sorted(text.splitlines())
    for name, line in flags.items():
        if name.startswith("sm90_"):
            assert SM90 in line and "-DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED" in line
            assert "compute_80" not in line and "code=sm_90 " not in line + " "
        else:
            assert "90a" not in line and "EXTENDED_MMA" not in line and all(g in line for g in GENCODE)
        assert "-O3" in line and "-DFLASH_ATTN_CUDA_BACKWARD" in line  # the rest of the flags unchanged
    # without sm90 units only the order changes (any gencode); a file not written by torch is refused, not
    # half-patched
    plain = write_torch_ninja(tmp_path / "plain.ninja", [str(tmp_path / n) for n in ("fwd_dispatch.cu", "bwd_hdim64_bf16.cu")],
                              ["-O3", *GENCODE])
    reordered = family_build.patch_ninja(plain, build_config.nvcc_gencode_flags((86,)))
    assert list(edges(reordered)) == ["bwd_hdim64_bf16.cu", "fwd_dispatch.cu"]
    assert sorted(reordered.splitlines()) == sorted(plain.splitlines())
    one = write_torch_ninja(tmp_path / "one.ninja", sources[:1], ["-O3", *GENCODE])
    assert family_build.patch_ninja(one, GENCODE) == one
    with pytest.raises(RuntimeError, match="cannot give the sm90 units their flags"):
        family_build.patch_ninja(text, build_config.nvcc_gencode_flags((86,)))


FAKE_NVCC = r"""#!/bin/bash
# Stand-in nvcc: records "SOURCE<TAB>FLAGS" and writes an empty object (and the depfile ninja reads).
if [ "$1" = --version ]; then echo "Cuda compilation tools, release $FAKE_CUDA_VERSION, V$FAKE_CUDA_VERSION.0"; exit 0; fi
out= src= dep=
args=("$@")
for ((i = 0; i < $#; i++)); do
  case "${args[i]}" in
    -o) out=${args[i+1]} ;;
    -c) src=${args[i+1]} ;;
    -MF) dep=${args[i+1]} ;;
  esac
done
[ -n "$out" ] && [ -n "$src" ] || { echo "fake nvcc: $*" >&2; exit 1; }
printf '%s\t%s\n' "$(basename "$src")" "$*" >> "$FAKE_NVCC_LOG"
cc -c -x c /dev/null -o "$out"
[ -z "$dep" ] || printf '%s: %s\n' "$out" "$src" > "$dep"
"""

SETUP = """
import sys
sys.path.insert(0, {tools!r})
import build_config, family_build
from setuptools import setup, Extension
from torch.utils.cpp_extension import BuildExtension
gencode = build_config.nvcc_gencode_flags((80, 90))
setup(name="probe", ext_modules=[Extension("probe", sources=["host.cpp", "fwd_dispatch.cu", "sm90_fwd_hdim128_bf16.cu",
                                                             "fwd_hdim128_bf16.cu"],
                                           extra_compile_args={{"cxx": ["-O0"], "nvcc": ["-O3", *gencode, "-DMARK"]}})],
      cmdclass={{"build_ext": family_build.build_ext_class(BuildExtension.with_options(use_ninja={ninja}), gencode)}})
"""


@pytest.mark.skipif(shutil.which("cc") is None or shutil.which("c++") is None, reason="needs a C/C++ compiler")
@pytest.mark.parametrize("ninja", [True, False], ids=["ninja", "file-by-file"])
def test_torch_build_gives_sm90_units_their_flags(tmp_path, ninja):
    if ninja and shutil.which("ninja") is None:
        pytest.skip("needs ninja")
    cuda = tmp_path / "cuda"
    (cuda / "bin").mkdir(parents=True)
    (cuda / "include").mkdir()
    nvcc = cuda / "bin" / "nvcc"
    nvcc.write_text(FAKE_NVCC)
    nvcc.chmod(0o755)
    src = tmp_path / "src"
    src.mkdir()
    (src / "host.cpp").write_text("int host_probe() { return 0; }\n")
    for name in ("fwd_dispatch.cu", "sm90_fwd_hdim128_bf16.cu", "fwd_hdim128_bf16.cu"):
        (src / name).write_text("// empty\n")
    (src / "setup.py").write_text(textwrap.dedent(SETUP.format(tools=str(ROOT / "tools"), ninja=ninja)))
    log = tmp_path / "nvcc.log"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTORCH_NVCC", "TORCH_CUDA_ARCH_LIST")}
    env.update(CUDA_HOME=str(cuda), FAKE_NVCC_LOG=str(log), MAX_JOBS="2", FAKE_CUDA_VERSION=torch.version.cuda or "13.0")

    def build():
        result = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=src, env=env,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        lines = log.read_text().splitlines() if log.exists() else []
        log.unlink(missing_ok=True)
        return dict(line.split("\t", 1) for line in lines)

    calls = build()
    assert set(calls) == {"fwd_dispatch.cu", "sm90_fwd_hdim128_bf16.cu", "fwd_hdim128_bf16.cu"}
    for name, command in calls.items():
        args = shlex.split(command)
        assert "-DMARK" in args and "-O3" in args
        if name.startswith("sm90_"):
            assert SM90 in args and "-DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED" in args
            assert not any(a.startswith("-gencode") and a != SM90 for a in args), args
        else:
            assert all(g in args for g in GENCODE) and not any("90a" in a or "EXTENDED_MMA" in a for a in args)
    if ninja:
        assert build() == {}  # incremental: nothing changed, nothing recompiled


def test_ninja_log_units_reads_the_last_entry_of_each_object():
    log = ("# ninja log v5\n"
           "0\t61000\t0\tcsrc/instantiations/bwd_hdim64_bf16.o\tabc\n"
           "120\t30500\t0\t/b/fwd_hdim64_bf16.o\tdef\n"
           "500\t900\t0\t/b/fwd_hdim64_bf16.o\tdef\n")
    assert family_build.ninja_log_units(log) == [("bwd_hdim64_bf16.o", 0.0, 61.0), ("fwd_hdim64_bf16.o", 0.5, 0.9)]
    assert family_build.ninja_log_units("# ninja log v5\n") == []
    assert family_build.ninja_log_units("x0\t61000\t0\tbwd.o\th\n5\t9\t0\tfwd.o\th") == [("fwd.o", 0.005, 0.009)]


def test_compile_seconds_of_each_unit_kind():
    expected = {"bwd_hdim128_bf16.cu": 68, "bwd_hdim32_fp16.cu": 68, "bwd_hdim256_fp16_smem99.cu": 58,
                "sm90_bwd_hdim64_bf16.cu": 58, "sm90_fwd_hdim128_bf16_dropout.cu": 45, "fwd_hdim64_bf16.cu": 45,
                "decode_hdim128_bf16_wide.cu": 25, "binding.cpp": 20, "csrc/fwd_dispatch.cu": 17,
                "kvcache_bf16.cu": 8, "dropout_mask.cu": 10}
    assert {n: family_build.compile_seconds(n) for n in expected} == expected
