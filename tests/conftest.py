"""Runs the tests against this checkout's package, and skips (never passes) what this machine
cannot run: `gpu` tests without a CUDA GPU, `gpu` and `extension` tests without a built
flash_attn_cuda._C. A _C that is built but fails to load is not skipped: those tests fail."""
import pathlib
import sys

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "flash_attn_cuda"
# Ahead of site-packages, editable installs and the working directory, which may be another clone.
sys.path.insert(0, str(ROOT))

import flash_attn_cuda  # noqa: E402


def _wrong_checkout() -> str:
    """Why the imported package is not this checkout's ('' when it is)."""
    if pathlib.Path(flash_attn_cuda.__file__).resolve().parent != PACKAGE:
        return f"imported flash_attn_cuda from {flash_attn_cuda.__file__}, not from this checkout ({PACKAGE})"
    loaded = flash_attn_cuda._ops._C
    if loaded is not None and pathlib.Path(loaded.__file__).resolve().parent != PACKAGE:
        return f"loaded flash_attn_cuda._C from {loaded.__file__}, not from this checkout ({PACKAGE})"
    return ""


def _not_built() -> str:
    """The skip reason when this checkout has no flash_attn_cuda._C for this Python ('' when it has one,
    loaded or not)."""
    err = flash_attn_cuda._ops._C_IMPORT_ERROR
    if isinstance(err, ModuleNotFoundError) and err.name == "flash_attn_cuda._C":
        return "flash_attn_cuda._C not built (make install)"
    return ""


GPU_REASON = "needs a CUDA GPU (sm80+); run scripts/gpu_check.sh on the GPU host"


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU and flash_attn_cuda._C; skipped without them")
    config.addinivalue_line("markers", "extension: needs flash_attn_cuda._C (not a GPU); skipped when not built")
    wrong = _wrong_checkout()
    if wrong:
        raise pytest.UsageError(f"{wrong}: the tests would not test this checkout (was flash_attn_cuda imported "
                                "before the tests started?)")


def pytest_collection_modifyitems(config, items):
    no_gpu, not_built = not torch.cuda.is_available(), _not_built()
    for item in items:
        gpu = item.get_closest_marker("gpu") is not None
        reasons = [GPU_REASON] if gpu and no_gpu else []
        if not_built and (gpu or item.get_closest_marker("extension")):
            reasons.append(not_built)
        if reasons:
            item.add_marker(pytest.mark.skip(reason="; ".join(reasons)))


@pytest.fixture
def fake():
    """A FakeTensorMode: CUDA tensors without a GPU, as torch.compile sees them while tracing."""
    with FakeTensorMode() as mode:
        yield mode


FAMILIES = ("sm80", "sm90")


def family_skip_reason(family: str) -> str:
    """Why this machine cannot run the forward on `family` ('' when it can). GPU tests only."""
    if family == "sm90":
        if not flash_attn_cuda._ops.HAS_SM90:
            return "this build has no sm90 family (FLASH_ATTN_CUDA_ARCHS without 90a, or no head dim of 64/128/256)"
        if torch.cuda.get_device_capability() != (9, 0):
            return f"the sm90 family runs on compute capability 9.0 only, this GPU is {torch.cuda.get_device_capability()}"
    return ""


@pytest.fixture(params=FAMILIES)
def family(request, monkeypatch):
    """The test's forward calls run with FLASH_ATTN_CUDA_FAMILY=<sm80|sm90> (read by the op on each
    call); skipped where the family cannot run (sm90: no 90a in the build, or not a 9.0 GPU)."""
    reason = family_skip_reason(request.param)
    if reason:
        pytest.skip(reason)
    monkeypatch.setenv("FLASH_ATTN_CUDA_FAMILY", request.param)
    return request.param
