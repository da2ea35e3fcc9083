"""tools/sass_overlap.py on hand-written SASS: the MUFU between a loop's two wgmma waits are counted, loops
without HGMMA or without both waits are not reported, and outer loops give way to the innermost one."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
import sass_overlap  # noqa: E402


def sass(name, body):
    """`cuobjdump -sass`-like text of one function: body is a list of instruction texts at 0x10 steps."""
    lines = [f"\t\tFunction : {name}"]
    lines += [f"        /*{16 * i:04x}*/                   {text} ;  /* 0x0 */" for i, text in enumerate(body)]
    return "\n".join(lines) + "\n"


LOOP = [
    "MOV R1, c[0x0][0x28]",                         # 0x00
    "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ",   # 0x10: loop start
    "WARPGROUP.DEPBAR.LE gsb0, 0x1",                # 0x20
    "MUFU.EX2 R2, R3",                              # 0x30
    "@P0 MUFU.EX2 R4, R5",                          # 0x40
    "WARPGROUP.DEPBAR.LE gsb0, 0x0",                # 0x50
    "MUFU.EX2 R6, R7",                              # 0x60
    "@P1 BRA 0x10",                                 # 0x70: back to the loop start
    "EXIT",
]


def test_counts_mufu_before_and_after_the_wait():
    lines = sass_overlap.report(sass("kern", LOOP))
    assert len(lines) == 1
    assert "loop 0x10-0x70" in lines[0]
    assert lines[0].endswith("MUFU before the wait 2, after 1")


def test_loops_without_hgmma_or_waits_are_skipped():
    no_gemm = [t.replace("HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ", "FADD R0, R0, R1") for t in LOOP]
    assert sass_overlap.report(sass("kern", no_gemm)) == []
    no_wait = [t for t in LOOP if "gsb0, 0x0" not in t] + ["NOP"]
    assert sass_overlap.report(sass("kern", no_wait)) == []


def test_only_the_innermost_loop_is_reported():
    outer = LOOP[:-1] + ["@P2 BRA 0x0", "EXIT"]  # a tile loop around the block loop
    lines = sass_overlap.report(sass("kern", outer))
    assert len(lines) == 1 and "loop 0x10-0x70" in lines[0]
