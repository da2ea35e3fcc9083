import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode


def pytest_collection_modifyitems(config, items):
    # GPU tests are skipped (never passed) on machines without a CUDA device.
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (sm80+); run scripts/gpu_check.sh on the GPU host")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU; skipped without one")


@pytest.fixture
def fake():
    """A FakeTensorMode: CUDA tensors without a GPU, as torch.compile sees them while tracing."""
    with FakeTensorMode() as mode:
        yield mode
