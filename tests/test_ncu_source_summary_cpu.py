"""tools/ncu_source_summary.py on a synthetic ncu source page (no GPU)."""
import csv
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HDR = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed", "stall_barrier",
       "stall_long_sb", "stall_wait"]
ROWS = [  # address, sass, samples, executed, barrier, long_sb, wait
    ("0x10", "BAR.SYNC.DEFER_BLOCKING R9, 0x100", 1, 500, 0, 0, 1),
    ("0x20", "UMOV UR45, 0x40000040", 8, 500, 8, 0, 0),
    ("0x30", "HGMMA.64x128x16.F32.BF16 R88, gdesc[UR16], R88", 5, 500, 0, 0, 5),
    ("0x40", "@!P1 BRA 0x100", 3, 500, 0, 3, 0),
    ("0x50", "WARPGROUP.DEPBAR.LE gsb0, 0x1", 4, 500, 4, 0, 0),
    ("0x60", "MUFU.EX2 R89, R89", 6, 500, 0, 0, 6),
    ("0x70", "EXIT", 2, 10, 0, 0, 2),
]


def write(path, listings):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Kernel Name", "k"])
        w.writerow(HDR)
        for _ in range(listings):  # FA3's pages list the SASS twice
            for r in ROWS:
                w.writerow([str(x) for x in r])


def test_summary_counts_first_listing_and_splits_the_loop(tmp_path):
    once, twice = tmp_path / "a.csv", tmp_path / "b.csv"
    write(once, 1)
    write(twice, 2)
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "ncu_source_summary.py"), str(once), str(twice),
                          "--loop-exec", "400:600"], capture_output=True, text=True, check=True).stdout
    assert out.count("29 samples, 3010 warp instructions executed") == 2, out
    assert "turn barrier 8 / 27.6" in out and "HGMMA issue 5 / 17.2" in out, out
    assert "S wait 4 / 13.8" in out and "mbarrier wait 3 / 10.3" in out and "rest 7 / 24.1" in out, out
    mufu = next(line for line in out.splitlines() if line.startswith("MUFU"))
    assert mufu.split()[1:] == ["500", "500"], mufu
