"""The flash-attn suite is part of the GPU tests: on a GPU with the extension built, its file must
have been fetched (conftest.py runs it)."""
import pathlib

import pytest

SUITE = pathlib.Path(__file__).resolve().parent / "test_flash_attn.py"

pytestmark = pytest.mark.gpu


def test_flash_attn_suite_is_fetched():
    if not SUITE.exists():
        pytest.skip(f"flash-attn's test suite is not fetched: python tests/fa2_suite/get_suite.py (writes {SUITE.name}; "
                    "needs network, or pass the file), then carry it to the GPU host")
