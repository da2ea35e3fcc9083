"""Which package the tests import, and the package without its compiled extension. Each test runs
a fresh Python: a process imports flash_attn_cuda (and its _C) once."""
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def run_python(code: str, cwd: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300)


def decoy_clone(path: pathlib.Path) -> pathlib.Path:
    """A directory holding another 'flash_attn_cuda' package (as another clone's root would)."""
    (path / "flash_attn_cuda").mkdir()
    (path / "flash_attn_cuda" / "__init__.py").write_text("")
    return path


def test_package_imports_without_the_extension():
    """A fresh clone (no flash_attn_cuda._C): the package imports, reports an empty build, registers
    nothing, and attention() raises one RuntimeError saying how to build the extension."""
    code = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
sys.modules["flash_attn_cuda._C"] = None  # import fails as if not built
import torch
import flash_attn_cuda
assert flash_attn_cuda.compiled_head_dims() == () and flash_attn_cuda.compiled_dtypes() == ()
assert not (flash_attn_cuda._ops.HAS_EXTENSION or flash_attn_cuda._ops.HAS_BACKWARD or flash_attn_cuda.HAS_FEATURES)
assert not hasattr(torch.ops.flash_attn_cuda, "fwd")
q = torch.zeros(1, 4, 2, 64, dtype=torch.bfloat16)
try:
    flash_attn_cuda.attention(q, q, q)
except RuntimeError as e:
    print(e)
"""
    result = run_python(code, ROOT)
    assert result.returncode == 0, result.stderr
    assert "flash_attn_cuda._C is not built or failed to load (ModuleNotFoundError: " in result.stdout
    assert "make install" in result.stdout


def test_another_clones_working_directory_does_not_serve_the_tests(tmp_path):
    """`python -m pytest` puts the working directory first on sys.path; run from another clone,
    the tests still import this checkout's package (conftest puts ROOT ahead of it)."""
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             str(ROOT / "tests" / "test_build_config.py")], cwd=decoy_clone(tmp_path),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def test_tests_refuse_a_package_imported_from_elsewhere(tmp_path):
    """A flash_attn_cuda imported from another place before the tests start stops the run with a
    clear message instead of silently being tested."""
    code = f"""
import sys
sys.path.insert(0, {str(decoy_clone(tmp_path))!r})
import flash_attn_cuda
import pytest
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", {str(ROOT / "tests" / "test_build_config.py")!r}]))
"""
    result = run_python(code, tmp_path)
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout + result.stderr
    assert "not from this checkout" in result.stdout + result.stderr
