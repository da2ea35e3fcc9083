"""Host (g++) builds of csrc/'s torch- and CuTe-free headers for the CPU tests: a small program that
includes one header, reads cases from stdin and prints the header's answers."""
import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


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
