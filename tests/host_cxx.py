"""Host builds for the CPU tests: g++ programs over csrc/'s torch- and CuTe-free headers (a small program that
includes one header, reads cases from stdin and prints the header's answers), and host-only nvcc programs over
the CuTe ones (build_cute: tests/smem_tiles.cu, tools/sdq_banks.cu)."""
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "third_party"))  # find_cutlass (build_cute)


def build(directory: pathlib.Path, name: str, source: str, cuda_headers: bool = False) -> pathlib.Path:
    """Compiles `source` (C++17, csrc/ on the include path) to directory/name; skips the test without g++.
    cuda_headers: the header includes cuda_runtime.h (declarations only): CUDA's include directory too
    (CUDA_HOME, else /usr/local/cuda); skips the test where it is missing."""
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    flags = ["-std=c++17", "-O1", f"-I{ROOT / 'csrc'}"]
    if cuda_headers:
        cuda = pathlib.Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"
        if not (cuda / "cuda_runtime.h").is_file():
            pytest.skip(f"needs CUDA's headers ({cuda})")
        flags.append(f"-I{cuda}")
    src, exe = directory / f"{name}.cpp", directory / name
    src.write_text(source)
    subprocess.run(["g++", *flags, str(src), "-o", str(exe)], check=True)
    return exe


def run(exe: pathlib.Path, lines) -> str:
    """Runs exe with one input line per case (each case's fields joined by spaces); returns its stdout."""
    text = "".join(" ".join(str(int(x) if isinstance(x, bool) else x) for x in case) + "\n" for case in lines)
    return subprocess.run([str(exe)], input=text, capture_output=True, text=True, check=True).stdout


def _nvcc():
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    candidate = pathlib.Path(home) / "bin" / "nvcc"
    return str(candidate) if candidate.exists() else shutil.which("nvcc")


def _cutlass_include():
    try:
        import find_cutlass
        return find_cutlass.include_dir()
    except Exception:  # noqa: BLE001 - any failure to locate the headers is a skip reason
        return None


def build_cute(directory: pathlib.Path, source: pathlib.Path, std: str = "c++20") -> str:
    """Compiles `source` host-only with nvcc (csrc/ and CUTLASS on the include path) to directory/<stem>, runs it
    and returns its stdout; skips the test, with the reason, where nvcc or the CUTLASS headers are missing."""
    nvcc, cutlass = _nvcc(), _cutlass_include()
    if nvcc is None:
        pytest.skip(f"nvcc not found (CUDA_HOME/bin/nvcc or PATH): cannot build {source.name}")
    if cutlass is None:
        pytest.skip("CUTLASS headers not found (third_party/find_cutlass.py)")
    exe = directory / source.stem
    build = subprocess.run([nvcc, f"-std={std}", "--expt-relaxed-constexpr", f"-I{ROOT / 'csrc'}", f"-I{cutlass}",
                            "-o", str(exe), str(source)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-4000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stdout
