"""build/cpp/bench_fwd (make bench-cpp) without a GPU: argument checking and a clear refusal.
Skipped where the binary has not been built (CI builds it before the tests)."""
import pathlib
import subprocess

import pytest
import torch

BENCH = pathlib.Path(__file__).resolve().parent.parent / "build" / "cpp" / "bench_fwd"

pytestmark = pytest.mark.skipif(not BENCH.exists(), reason="build/cpp/bench_fwd not built (make bench-cpp)")


def run(*args):
    return subprocess.run([str(BENCH), *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args,message", [
    (["--hdim", "7"], "bad sizes"),
    (["--hdim", "264"], "bad sizes"),
    (["--dtype", "fp32"], "--dtype"),
    (["--frobnicate"], "unknown argument"),
    (["--seqlen"], "missing value"),
])
def test_bad_arguments_exit_2_with_a_message(args, message):
    result = run(*args)
    assert result.returncode == 2
    assert message in result.stderr


def test_without_gpu_it_says_so():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = run("--hdim", "64")
    assert result.returncode == 2
    assert "no CUDA GPU" in result.stderr
