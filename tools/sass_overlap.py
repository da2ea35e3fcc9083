"""Where ptxas put the wgmma waits of a loop, relative to its exponentials (benchmarks/NOTES.md, "Twentieth
session"): for every innermost loop (a backward branch) holding HGMMA in every function of the objects, the number of
MUFU instructions issued after the loop's last `WARPGROUP.DEPBAR.LE gsb0, 0x1` (the wait for the first of two
GEMM batches) and before its next `WARPGROUP.DEPBAR.LE gsb0, 0x0` (the wait for both), and after that wait.
In the sm90 forward's overlap loop the first count is the softmax run under the PV GEMM; in the backward's
p_and_ds, P^T = exp2(...) under the dP^T GEMM.

    python3 tools/sass_overlap.py OBJ [OBJ ...]      (cuobjdump: as tools/check_sass.py finds it)

One line per loop: function (shortened), loop address range, instructions, MUFU before / after the wait.
Exit status 2 without cuobjdump, else 0 (a report, not a check).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_sass  # noqa: E402

_INSN = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_MUFU = re.compile(r"(?:^|\s)MUFU\.")
_BRA = re.compile(r"\bBRA (?:U?P\d+, )?0x([0-9a-f]+)")


def functions(sass: str) -> dict[str, list[tuple[int, str]]]:
    """Function name -> its (address, instruction text) list, from `cuobjdump -sass` text."""
    out: dict[str, list[tuple[int, str]]] = {}
    current = None
    for line in sass.splitlines():
        m = check_sass._FUNCTION.match(line)
        if m:
            current = out.setdefault(m.group(1), [])
            continue
        m = _INSN.match(line)
        if m and current is not None:
            current.append((int(m.group(1), 16), m.group(2)))
    return out


def loops(insns: list[tuple[int, str]]) -> list[tuple[int, int]]:
    """(first, last) instruction indices of every innermost loop (a branch to an earlier address) holding HGMMA."""
    index = {a: i for i, (a, _) in enumerate(insns)}
    found = []
    for i, (a, text) in enumerate(insns):
        m = _BRA.search(text)
        if m and int(m.group(1), 16) < a and int(m.group(1), 16) in index:
            j = index[int(m.group(1), 16)]
            if any("HGMMA" in t for _, t in insns[j:i + 1]):
                found.append((j, i))
    # Innermost only: a loop that holds another one is a tile loop around the block loop.
    return [(j, i) for j, i in found if not any(j <= j2 and i2 <= i and (j2, i2) != (j, i) for j2, i2 in found)]


def mufu_around_wait(body: list[str]) -> tuple[int, int] | None:
    """MUFU between the last 'DEPBAR.LE gsb0, 0x1' and the next 'DEPBAR.LE gsb0, 0x0' of the loop body,
    and MUFU after that wait; None when the body has no such pair."""
    ones = [i for i, t in enumerate(body) if "WARPGROUP.DEPBAR.LE gsb0, 0x1" in t]
    for start in reversed(ones):
        zero = next((i for i in range(start + 1, len(body)) if "WARPGROUP.DEPBAR.LE gsb0, 0x0" in body[i]), None)
        if zero is not None:
            before = sum(bool(_MUFU.search(t)) for t in body[start:zero])
            after = sum(bool(_MUFU.search(t)) for t in body[zero:])
            return before, after
    return None


def report(sass: str) -> list[str]:
    lines = []
    for name, insns in functions(sass).items():
        for j, i in loops(insns):
            body = [t for _, t in insns[j:i + 1]]
            counts = mufu_around_wait(body)
            if counts is None:
                continue
            lines.append(f"{name[:90]} loop {insns[j][0]:#x}-{insns[i][0]:#x} ({len(body)} insns): "
                         f"MUFU before the wait {counts[0]}, after {counts[1]}")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    cuobjdump = check_sass.find_cuobjdump()
    if cuobjdump is None or not args:
        print(__doc__ if not args else "sass_overlap: no cuobjdump", file=sys.stderr)
        return 2
    for obj in args:
        result = subprocess.run([cuobjdump, "-sass", obj], capture_output=True, text=True)
        print(f"== {obj}")
        print("\n".join(report(result.stdout)) or "  (no loop with both waits)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
