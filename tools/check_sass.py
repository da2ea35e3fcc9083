"""Build-time check of the sm90 (Hopper) family's objects: their SASS must really use wgmma.

nvcc 13.0 compiles a wgmma kernel for plain sm_90 without an error and turns every HGMMA into a
trap (BPT.TRAP); setmaxnreg silently vanishes there too. And ptxas may serialise the wgmma
pipeline (codes C7510-C7520, printed as "ptxas info : (C75xx) Potential Performance Loss: ..."),
a silent 2x loss. So, for each object:
  - it holds SASS for sm_90a and for nothing else (the family is compiled for sm_90a alone),
  - that SASS has HGMMA instructions and no BPT.TRAP,
and the build logs given with --log have no ptxas C7510-C7520 line.

    python3 tools/check_sass.py [--log BUILD_LOG]... OBJECT...

Exit status: 0 all pass, 1 a check failed (each failure on its own line), 2 no cuobjdump / bad
arguments. cuobjdump: $CUOBJDUMP, else PATH, else $CUDA_HOME/bin, else the one triton's wheel ships.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import re
import shutil
import subprocess
import sys

SM90_ARCH = "sm_90a"
_CODE_FOR = re.compile(r"^\s*code for (sm_\w+)\s*$")
_FUNCTION = re.compile(r"^\s*Function : (\S+)\s*$")
_HGMMA = re.compile(r"\bHGMMA\.")
_TRAP = re.compile(r"\bBPT\.TRAP\b")
# ptxas's wgmma serialisation diagnostics, C7510 through C7520
_SERIALISED = re.compile(r"\(C75(?:1\d|20)\)")


@dataclasses.dataclass
class Sass:
    """What one object's `cuobjdump -sass` text says: archs with code, and per function (arch, name)
    its HGMMA and BPT.TRAP counts."""
    archs: list[str] = dataclasses.field(default_factory=list)
    hgmma: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)
    traps: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)


def parse_sass(text: str) -> Sass:
    sass, arch, function = Sass(), "?", None
    for line in text.splitlines():
        m = _CODE_FOR.match(line)
        if m:
            arch, function = m.group(1), None
            if arch not in sass.archs:
                sass.archs.append(arch)
            continue
        m = _FUNCTION.match(line)
        if m:
            function = (arch, m.group(1))
            sass.hgmma.setdefault(function, 0)
            sass.traps.setdefault(function, 0)
            continue
        if function is None:
            continue
        if _HGMMA.search(line):
            sass.hgmma[function] += 1
        if _TRAP.search(line):
            sass.traps[function] += 1
    return sass


def sass_failures(name: str, sass: Sass) -> list[str]:
    """Why an sm90 object's SASS fails the check ([] when it passes)."""
    failures = []
    if SM90_ARCH not in sass.archs:
        failures.append(f"{name}: no {SM90_ARCH} SASS (archs: {', '.join(sass.archs) or 'none'}); "
                        f"compile it with -gencode arch=compute_90a,code=sm_90a")
    others = [a for a in sass.archs if a != SM90_ARCH]
    if others:
        failures.append(f"{name}: SASS for {', '.join(others)} besides {SM90_ARCH}: the sm90 family is "
                        "compiled for sm_90a alone")
    if not any(n for (arch, _), n in sass.hgmma.items() if arch == SM90_ARCH):
        failures.append(f"{name}: no HGMMA instruction in its {SM90_ARCH} SASS (no wgmma kernel, or the "
                        "wgmma calls were compiled away)")
    for (arch, function), n in sass.traps.items():
        if n:
            failures.append(f"{name}: {n} BPT.TRAP in {arch} function {function} (wgmma compiled for a "
                            "non-sm_90a target becomes a trap)")
    return failures


def log_failures(name: str, text: str, show: int = 3) -> list[str]:
    """ptxas wgmma serialisation lines (C7510-C7520) in a build log, as failures (the first `show`
    quoted, function names cut)."""
    hits = [line.strip() for line in text.splitlines() if _SERIALISED.search(line)]
    if not hits:
        return []
    quoted = "; ".join(h[:200] for h in hits[:show])
    return [f"{name}: {len(hits)} ptxas wgmma serialisation warning(s) (C7510-C7520): {quoted}"]


def find_cuobjdump() -> str | None:
    candidates = [os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump")]
    candidates.append(os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "cuobjdump"))
    try:
        import importlib.util
        spec = importlib.util.find_spec("triton")
        if spec and spec.origin:
            candidates.append(os.path.join(os.path.dirname(spec.origin), "backends", "nvidia", "bin", "cuobjdump"))
    except (ImportError, ValueError):
        pass
    return next((c for c in candidates if c and os.path.isfile(c) and os.access(c, os.X_OK)), None)


def check(objects: list[str], logs: list[str], cuobjdump: str) -> list[str]:
    failures = []
    for obj in objects:
        result = subprocess.run([cuobjdump, "-sass", obj], capture_output=True, text=True)
        if result.returncode != 0:
            failures.append(f"{obj}: cuobjdump -sass failed: {result.stderr.strip()[:300]}")
            continue
        failures += sass_failures(obj, parse_sass(result.stdout))
    for log in logs:
        failures += log_failures(log, pathlib.Path(log).read_text(errors="replace"))
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log", action="append", default=[], help="a build log to scan for ptxas C7510-C7520")
    parser.add_argument("objects", nargs="+", help="sm90 objects (.o) to check")
    args = parser.parse_args(argv)
    cuobjdump = find_cuobjdump()
    if cuobjdump is None:
        print("check_sass: no cuobjdump (set CUOBJDUMP, or install the CUDA toolkit's cuobjdump)", file=sys.stderr)
        return 2
    for path in args.objects + args.log:
        if not os.path.isfile(path):
            print(f"check_sass: {path}: no such file", file=sys.stderr)
            return 2
    failures = check(args.objects, args.log, cuobjdump)
    for failure in failures:
        print(f"check_sass: FAIL {failure}")
    if not failures:
        print(f"check_sass: ok: {len(args.objects)} object(s) hold {SM90_ARCH} HGMMA and no BPT.TRAP; "
              f"{len(args.log)} log(s) without ptxas wgmma serialisation")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
