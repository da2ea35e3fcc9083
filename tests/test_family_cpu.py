"""The kernel-family switches of the built extension without a GPU: FLASH_ATTN_CUDA_FAMILY as the
forward reads it on each call (one clear error for a bad value), the sm90 head dims the build
compiled, and the last-family probe before any forward."""
import pytest

import flash_attn_cuda
from flash_attn_cuda import _ops

pytestmark = pytest.mark.extension


@pytest.mark.parametrize("value,setting", [(None, "auto"), ("", "auto"), ("auto", "auto"), ("sm80", "sm80"),
                                           ("sm90", "sm90"), (" SM90 ", "sm90"), ("Auto", "auto")])
def test_family_setting(monkeypatch, value, setting):
    if value is None:
        monkeypatch.delenv("FLASH_ATTN_CUDA_FAMILY", raising=False)
    else:
        monkeypatch.setenv("FLASH_ATTN_CUDA_FAMILY", value)
    assert _ops.family_setting() == setting  # read now, not at import: tests switch it between calls


@pytest.mark.parametrize("bad", ["sm75", "hopper", "90a", "sm80,sm90"])
def test_bad_family_setting_is_one_clear_error(monkeypatch, bad):
    monkeypatch.setenv("FLASH_ATTN_CUDA_FAMILY", bad)
    with pytest.raises(RuntimeError, match=f"FLASH_ATTN_CUDA_FAMILY must be sm80, sm90 or auto \\(or unset\\), "
                                           f"got '{bad}'"):
        _ops.family_setting()


def test_sm90_head_dims_of_the_build():
    dims = _ops.sm90_head_dims()
    assert set(dims) <= {64, 128, 256} and set(dims) <= set(flash_attn_cuda.compiled_head_dims())
    assert list(dims) == sorted(dims) and _ops.HAS_SM90 == bool(dims)


def test_last_family_before_any_forward_is_empty():
    # a fresh thread has run no forward (the probe is per thread)
    import threading
    seen = []
    thread = threading.Thread(target=lambda: seen.append(_ops.last_fwd_family()))
    thread.start()
    thread.join()
    assert seen == [""]
