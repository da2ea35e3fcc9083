"""Summaries of Nsight Compute source pages (`ncu --import R --page source --csv --print-source sass`, as
scripts/ncu_fa3_gpu.sh SOURCE=1 writes them), one or more kernels side by side, no GPU needed:
  - warp-stall samples by reason, over the whole kernel;
  - executed warp instructions by opcode (the first 40);
  - the loop body's samples (instructions executed within --loop-exec, e.g. 250000:600000 for the blocks of
    d = 128 causal 8k) split into: the GEMM-turn named barrier, the S wait (WARPGROUP.DEPBAR 0x1), the PV
    wait (0x0), mbarrier waits (long scoreboard), HGMMA issue, and the rest (softmax, conversion, bookkeeping).
ncu lists some kernels' SASS twice in one page (FA3's); only the first listing is counted.
    python3 tools/ncu_source_summary.py src_ours_1.csv src_fa3_1.csv --loop-exec 250000:600000
"""
import argparse
import collections
import csv

SAMPLES = "Warp Stall Sampling (All Samples)"


def num(x):
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0


def load(path):
    """(header, rows of the first SASS listing) of one source-page csv (line 1: the kernel name)."""
    rows = list(csv.reader(open(path)))
    hdr = rows[1]
    seen, out = set(), []
    for r in rows[2:]:
        if len(r) != len(hdr):
            continue
        d = dict(zip(hdr, r))
        if d["Address"] in seen:
            break
        seen.add(d["Address"])
        out.append(d)
    return hdr, out


def opcode(src):
    src = src.strip()
    if src.startswith("@"):
        src = src.split(None, 1)[1] if " " in src else ""
    return src.split()[0].split(".")[0] if src else "?"


def phases(hdr, rows, lo, hi):
    total = sum(num(d[SAMPLES]) for d in rows)
    cat = collections.Counter()
    for d in rows:
        if not lo <= num(d["Instructions Executed"]) <= hi:
            continue
        s, v = d["Source"], num(d[SAMPLES])
        if "DEPBAR.LE gsb0, 0x1" in s:
            cat["S wait"] += v
        elif "DEPBAR.LE gsb0, 0x0" in s:
            cat["PV wait"] += v
        elif "HGMMA" in s:
            cat["HGMMA issue"] += v
        elif v > 0 and num(d.get("stall_barrier", "0")) > v / 2:
            cat["turn barrier"] += v
        elif v > 0 and num(d.get("stall_long_sb", "0")) > v / 2:
            cat["mbarrier wait"] += v
        else:
            cat["rest"] += v
    return total, cat


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--loop-exec", default="", help="LO:HI executions of the loop body's instructions")
    args = ap.parse_args()
    for path in args.csv:
        hdr, rows = load(path)
        stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
        tot = collections.Counter()
        for d in rows:
            for s in stalls:
                tot[s[6:]] += num(d[s])
        t = sum(tot.values()) or 1.0
        ex = sum(num(d["Instructions Executed"]) for d in rows)
        print(f"{path}: {int(t)} samples, {int(ex)} warp instructions executed")
        print("  stalls %: " + ", ".join(f"{k} {100 * v / t:.1f}" for k, v in tot.most_common(12)))
        if args.loop_exec:
            lo, hi = (float(x) for x in args.loop_exec.split(":"))
            total, cat = phases(hdr, rows, lo, hi)
            print(f"  loop samples (abs / % of kernel): " +
                  ", ".join(f"{k} {int(v)} / {100 * v / total:.1f}" for k, v in cat.most_common()))
    mixes = {}
    for path in args.csv:
        _, rows = load(path)
        c = collections.Counter()
        for d in rows:
            c[opcode(d["Source"])] += num(d["Instructions Executed"])
        mixes[path] = c
    print("opcode".ljust(12) + "".join(f"{p[-24:]:>26}" for p in mixes))
    ops = set().union(*mixes.values())
    for op in sorted(ops, key=lambda o: -max(c[o] for c in mixes.values()))[:40]:
        print(op.ljust(12) + "".join(f"{int(c[op]):>26}" for c in mixes.values()))


if __name__ == "__main__":
    main()
