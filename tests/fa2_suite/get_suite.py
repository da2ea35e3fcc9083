"""Puts flash-attn 2.8.3's tests/test_flash_attn.py (Dao-AILab/flash-attention, BSD-3-Clause,
Copyright (c) 2022, the respective contributors as shown by its AUTHORS file) next to this script, where conftest.py runs it
against flash_attn_cuda through the `flash_attn` alias package here. The file is not kept in this
repository; this fetches it once on a machine with network access (or copies a given file) and
checks it is the expected version (sha256). The GPU host has no network: fetch here, then carry it.

    python tests/fa2_suite/get_suite.py [path/to/test_flash_attn.py]
"""
from __future__ import annotations

import hashlib
import pathlib
import sys
import urllib.request

URL = "https://raw.githubusercontent.com/Dao-AILab/flash-attention/v2.8.3/tests/test_flash_attn.py"
SHA256 = "81b462f864efa01bdd31e826339b881754f03822f65d39ad9a1351da6abd2ba0"
TARGET = pathlib.Path(__file__).resolve().parent / "test_flash_attn.py"
HEADER = ("# flash-attn 2.8.3 tests/test_flash_attn.py, from https://github.com/Dao-AILab/flash-attention\n"
          "# (BSD-3-Clause; Copyright (c) 2022, the respective contributors, as shown by its AUTHORS file). Unmodified below\n"
          "# this header; fetched by tests/fa2_suite/get_suite.py, not part of this repository.\n")


def suite_text(source: str | None) -> str:
    data = pathlib.Path(source).read_bytes() if source else urllib.request.urlopen(URL, timeout=60).read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256:
        raise SystemExit(f"get_suite: sha256 {digest} is not flash-attn 2.8.3's test_flash_attn.py ({SHA256})")
    return HEADER + data.decode()


def main(argv: list[str]) -> None:
    TARGET.write_text(suite_text(argv[1] if len(argv) > 1 else None))
    print(f"wrote {TARGET}")


if __name__ == "__main__":
    main(sys.argv)
