"""tools/check_sass.py on canned cuobjdump / ptxas text (no compiler, no GPU): an sm90 object passes
only with sm_90a HGMMA and no BPT.TRAP, and a build log fails on ptxas C7510-C7520."""
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import check_sass  # noqa: E402

HEADER = """
Fatbin elf code:
================
arch = {arch}
code version = [1,8]
host = linux
compile_size = 64bit

\tcode for {arch}
"""


def function(name, *instructions):
    body = "".join(f"        /*{16 * i:04x}*/                   {ins} ;  /* 0x000fe20000000f00 */\n"
                   for i, ins in enumerate(instructions))
    return (f"\t\tFunction : {name}\n\t.headerflags\t@\"EF_CUDA_TEXMODE_UNIFIED EF_CUDA_64BIT_ADDRESS\"\n"
            f"{body}        ..........\n\n")


GOOD = HEADER.format(arch="sm_90a") + function(
    "_ZN5flash4sm9010fwd_kernelILi128EEEvNS_9FwdParamsE",
    "LDC R1, c[0x0][0x28]", "UTMALDG.2D [UR8], [UR4]", "WARPGROUP.ARRIVE",
    "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT, gsb0", "WARPGROUP.DEPBAR.LE gsb0, 0x0", "EXIT")
# The same kernel compiled for plain sm_90: builds, but every wgmma is a trap.
TRAPPED = HEADER.format(arch="sm_90") + function(
    "_ZN5flash4sm9010fwd_kernelILi128EEEvNS_9FwdParamsE", "LDC R1, c[0x0][0x28]", "BPT.TRAP 0x1", "EXIT")


def test_good_object_passes():
    sass = check_sass.parse_sass(GOOD)
    assert sass.archs == ["sm_90a"]
    assert list(sass.hgmma.values()) == [1] and list(sass.traps.values()) == [0]
    assert check_sass.sass_failures("good.o", sass) == []


def test_plain_sm90_object_fails_on_the_trap_and_the_arch():
    failures = check_sass.sass_failures("plain.o", check_sass.parse_sass(TRAPPED))
    assert any("no sm_90a SASS (archs: sm_90)" in f for f in failures)
    assert any("1 BPT.TRAP in sm_90 function _ZN5flash4sm9010fwd_kernel" in f for f in failures)
    assert any("no HGMMA" in f for f in failures)


def test_a_trap_next_to_hgmma_fails():
    text = HEADER.format(arch="sm_90a") + function("k1", "HGMMA.64x64x16.F32.BF16 R0, gdesc[UR4], R0") + \
        function("k2", "BPT.TRAP 0x1", "EXIT")
    assert check_sass.sass_failures("o", check_sass.parse_sass(text)) == [
        "o: 1 BPT.TRAP in sm_90a function k2 (wgmma compiled for a non-sm_90a target becomes a trap)"]


def test_no_hgmma_fails():
    text = HEADER.format(arch="sm_90a") + function("k", "LDC R1, c[0x0][0x28]", "EXIT")
    [failure] = check_sass.sass_failures("o", check_sass.parse_sass(text))
    assert "no HGMMA instruction in its sm_90a SASS" in failure


def test_code_for_other_archs_besides_sm90a_fails():
    text = GOOD + HEADER.format(arch="sm_80") + function("k", "HMMA.16816.F32.BF16 R0, R4, R8, R0", "EXIT")
    [failure] = check_sass.sass_failures("o", check_sass.parse_sass(text))
    assert "SASS for sm_80 besides sm_90a" in failure


def test_empty_or_host_only_object_fails():
    assert any("no sm_90a SASS (archs: none)" in f for f in check_sass.sass_failures("o", check_sass.parse_sass("")))


# ptxas's messages as builds print them (nvcc 12.x / 13.x; function names cut)
SERIALISED = [
    "ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non "
    "wgmma instructions defining accumulator registers of a wgmma between start and end of the pipeline stage in "
    "the function '_ZN5flash4sm9010fwd_kernel'",
    "ptxas info    : (C7510) Potential Performance Loss: wgmma.mma_async instructions are serialized due to the "
    "presence of Extern calls in the function 'k'",
    "ptxas info    : (C7520) Potential Performance Loss: wgmma.mma_async instructions are serialized due to program "
    "dependence on compiler-inserted WG.AR in divergent path in the function 'k'",
]
CLEAN = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_ZN5flash4sm9010fwd_kernel' for 'sm_90a'
ptxas info    : Function properties for _ZN5flash4sm9010fwd_kernel
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 512 bytes cmem[0]
ptxas info    : (C7509) an unrelated code
"""


@pytest.mark.parametrize("line", SERIALISED, ids=["C7515", "C7510", "C7520"])
def test_serialisation_warning_in_log_fails(line):
    [failure] = check_sass.log_failures("build.log", CLEAN + line + "\n")
    assert failure.startswith("build.log: 1 ptxas wgmma serialisation warning(s) (C7510-C7520): ptxas info")


def test_clean_log_passes():
    assert check_sass.log_failures("build.log", CLEAN) == []
    assert check_sass.log_failures("build.log", "ptxas info : (C7521) not ours\n(C751) short\n") == []


def test_command_line_exit_codes(tmp_path):
    """Exit 0 / 1 / 2 with a stand-in cuobjdump that prints the canned SASS."""
    fake = tmp_path / "cuobjdump"
    fake.write_text('#!/bin/sh\ncat "$2.sass"\n')
    fake.chmod(0o755)
    good, bad, log = tmp_path / "good.o", tmp_path / "bad.o", tmp_path / "build.log"
    for obj, text in ((good, GOOD), (bad, TRAPPED)):
        obj.write_bytes(b"")
        pathlib.Path(f"{obj}.sass").write_text(text)
    log.write_text(CLEAN)
    env = {"CUOBJDUMP": str(fake), "PATH": "/usr/bin:/bin"}

    def run(*args):
        return subprocess.run([sys.executable, str(ROOT / "tools" / "check_sass.py"), *map(str, args)],
                              capture_output=True, text=True, env=env, timeout=60)

    ok = run("--log", log, good)
    assert ok.returncode == 0 and ok.stdout.startswith("check_sass: ok: 1 object(s)"), ok.stdout + ok.stderr
    failed = run(good, bad)
    assert failed.returncode == 1 and "good.o" not in failed.stdout
    assert all(line.startswith("check_sass: FAIL ") and "bad.o" in line for line in failed.stdout.splitlines())
    log.write_text(CLEAN + SERIALISED[0] + "\n")
    assert run("--log", log, good).returncode == 1
    assert run(tmp_path / "missing.o").returncode == 2
