"""Each kernel is compiled exactly once: the dispatch files declare the instantiations and never
include a kernel body (issue: the backward dispatch once compiled every backward kernel a second
time, 418 s of the default build). Two checks:

- the include graph of csrc/ (no build needed): no dispatch file reaches a kernel header;
- the objects of a build in this checkout (setup.py's build/temp*/ or make bench-cpp's build/cpp*/):
  a dispatch object defines no kernel symbol, while an instantiation object beside it does (so the
  check can fail). Skipped, with the reason, where this checkout has built no objects.
"""
from __future__ import annotations

import pathlib
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"
DISPATCH_SOURCES = sorted(CSRC.glob("*_dispatch.cu"))
# Headers that hold __global__ kernel bodies (or include them).
KERNEL_HEADERS = {"fwd_kernel.h", "bwd_kernel.h", "fwd_launch.h", "bwd_launch.h"}
# Host stubs of the kernels as `nm -C` prints them (templates: flash::fwd_kernel<...>(...)), and
# nvcc's launch stub of any __global__ function, whatever its name (the sm90 family's kernels too).
KERNEL_SYMBOL = re.compile(r"flash::(?:\w+::)*\w*_kernel<|__device_stub__")
# The sm90 family's headers a dispatch file may reach: its declarations and the host-only support
# checks (csrc/sm90/fwd_api.h, bwd_api.h, their *_supports.h and tma_rules.h); every other csrc/sm90/
# header holds or reaches kernel code.
SM90_FWD_INTERFACE = {"fwd_api.h", "fwd_supports.h", "tma_rules.h"}
# bwd_walk.h: the rotated-walk policy bwd_api.h's store-first choice reads (host and device, no CuTe).
SM90_INTERFACE = SM90_FWD_INTERFACE | {"bwd_api.h", "bwd_supports.h", "bwd_walk.h"}
MAX_DISPATCH_OBJECT_BYTES = 1 << 20  # an object with kernels in it is megabytes (bwd: 6.6 MB)

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def local_includes(path: pathlib.Path, seen: set[pathlib.Path] | None = None) -> set[pathlib.Path]:
    """The csrc/ headers `path` includes, transitively (quoted includes resolved next to the file)."""
    seen = set() if seen is None else seen
    for name in _INCLUDE.findall(path.read_text()):
        header = (path.parent / name).resolve()
        if header.is_file() and header not in seen:
            seen.add(header)
            local_includes(header, seen)
    return seen


def test_there_are_dispatch_sources():
    assert {p.name for p in DISPATCH_SOURCES} >= {"fwd_dispatch.cu", "bwd_dispatch.cu"}


@pytest.mark.parametrize("source", DISPATCH_SOURCES, ids=lambda p: p.name)
def test_dispatch_includes_no_kernel_body(source):
    reached = {p.name for p in local_includes(source)}
    assert not reached & KERNEL_HEADERS, f"{source.name} includes kernel bodies via {sorted(reached & KERNEL_HEADERS)}"


@pytest.mark.parametrize("source", DISPATCH_SOURCES, ids=lambda p: p.name)
def test_dispatch_reaches_only_the_sm90_interface(source):
    sm90 = {p.name for p in local_includes(source) if p.parent == CSRC / "sm90"}
    assert sm90 <= SM90_INTERFACE, f"{source.name} reaches sm90 kernel headers {sorted(sm90 - SM90_INTERFACE)}"


def test_fwd_dispatch_reaches_the_sm90_interface():
    assert {p.name for p in local_includes(CSRC / "fwd_dispatch.cu") if p.parent == CSRC / "sm90"} == SM90_FWD_INTERFACE


_ANGLE_INCLUDE = re.compile(r'^\s*#\s*include\s+<([^>]+)>', re.M)


def test_sm90_interface_is_host_only():
    """The sm90 interface headers (compiled into the dispatch for every arch) pull in no CuTe."""
    for name in SM90_INTERFACE:
        header = CSRC / "sm90" / name
        files = {header} | local_includes(header)
        angle = {inc for f in files for inc in _ANGLE_INCLUDE.findall(f.read_text())}
        assert not {inc for inc in angle if inc.startswith("cute/")}, f"sm90/{name} includes CuTe: {sorted(angle)}"
        assert not {p.name for p in files} & KERNEL_HEADERS, f"sm90/{name} reaches kernel headers"


def test_include_graph_sees_kernels_where_they_are():
    # The check above can fail: an instantiation file reaches the kernel bodies through its launch header.
    text = "#include \"../bwd_launch.h\"\n#include \"../sm90/fwd_launch.h\"\n"
    probe = CSRC / "instantiations" / "_include_probe.cu"
    probe.parent.mkdir(exist_ok=True)
    probe.write_text(text)
    try:
        reached = local_includes(probe)
        assert {"bwd_kernel.h", "bwd_launch.h"} <= {p.name for p in reached}
        assert CSRC / "sm90" / "fwd_launch.h" in reached  # the sm90 check above can fail too
    finally:
        probe.unlink()


def _built_object_dirs() -> list[pathlib.Path]:
    """Folders of this checkout's build holding a fwd_dispatch.o (setup.py or make bench-cpp)."""
    return sorted({p.parent for p in (ROOT / "build").glob("**/fwd_dispatch.o")})


def _defined_kernel_symbols(obj: pathlib.Path) -> list[str]:
    out = subprocess.run(["nm", "-C", "--defined-only", str(obj)], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if KERNEL_SYMBOL.search(line)]


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs binutils' nm")
def test_dispatch_objects_hold_no_kernel_code():
    dirs = _built_object_dirs()
    if not dirs:
        pytest.skip("no build objects in this checkout (build/**/fwd_dispatch.o): build first (make install)")
    for folder in dirs:
        instantiations = sorted((folder / "instantiations").glob("*.o"))
        assert instantiations, f"{folder}: dispatch objects without instantiation objects beside them"
        # Control: an instantiation object does define its kernels (else the check below proves nothing).
        assert _defined_kernel_symbols(instantiations[0]), f"{instantiations[0]} defines no kernel symbol"
        for obj in sorted(folder.glob("*_dispatch.o")):
            assert obj.stat().st_size < MAX_DISPATCH_OBJECT_BYTES, f"{obj} is {obj.stat().st_size} bytes"
            kernels = _defined_kernel_symbols(obj)
            assert not kernels, f"{obj} compiles kernels that belong to instantiations/*.cu: {kernels[:3]}"
