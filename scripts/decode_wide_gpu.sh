#!/usr/bin/env bash
# One device call for the decode kernel's wide tile (csrc/decode_traits.h kWide, heuristics.h decode_pick_wide):
# builds d = 128 bf16 (sm_90: forward + KV cache), runs the KV-cache GPU tests, compute-sanitizer on the wide
# kernel (FLASH_ATTN_CUDA_DECODE_WIDE=1), then bench_decode with the base tile forced, the wide tile forced,
# the rule, and the base tile again, each with cuDNN in the run (GQA 32/8 and MHA 32/32, contiguous and paged 16).
#   OUT=$OUT scripts/decode_wide_gpu.sh        (needs the nvidia-cutlass wheel in .whl/; about 6 minutes)
#   RUNS="rule:auto" SANITIZE=0: the tests and one bench run with the rule (about 2.5 minutes)
set -uo pipefail
. "$(dirname "$0")/gpu_stage_lib.sh"
gpu_setup wide
export FLASH_ATTN_CUDA_ARCHS="90" FLASH_ATTN_CUDA_HDIMS=128 FLASH_ATTN_CUDA_DTYPES=bf16 \
  FLASH_ATTN_CUDA_BACKWARD=0 FLASH_ATTN_CUDA_SMEM_TILES=0 MAX_JOBS=16
DEADLINE=${DEADLINE:-575}
gpu_build 200
TAILN=4 stage tests ${TESTS_TIMEOUT:-150} python3 -m pytest -q -p no:cacheprovider -rfE tests/test_kvcache_gpu.py
[ "${SANITIZE:-1}" = 1 ] && FLASH_ATTN_CUDA_DECODE_WIDE=1 TAILN=3 stage sanitize 150 bash scripts/sanitize.sh scripts/sanitize_kvcache.py
ARGS="--heads ${HEADS:-32:8,32:32} --batches ${BATCHES:-1,2,8,16,32,64} --seqlens ${SEQLENS:-1k,2k,4k,8k,32k}
  --impls flash_attn_cuda,sdpa_cudnn --layouts contiguous,paged16 --max-kv-gb 9"
export RUNS=${RUNS:-"base1:0 wide:1 rule:auto base2:0"}  # tag:mode (0 base, 1 wide, auto the rule)
for run in $RUNS; do
  tag=${run%%:*} mode=${run#*:}
  if [ "$mode" = auto ]; then unset FLASH_ATTN_CUDA_DECODE_WIDE; else export FLASH_ATTN_CUDA_DECODE_WIDE=$mode; fi
  TAILN=0 stage "bench_$tag" ${BENCH_TIMEOUT:-100} python3 -m flash_attn_cuda.bench_decode $ARGS \
    --prefix "h200_wide_$tag" --out "$OUT/res"
done
unset FLASH_ATTN_CUDA_DECODE_WIDE
python3 - "$OUT/res" <<'PY'
# ours us per shape and layout, the runs side by side, and ours / cuDNN of each run
import csv, glob, sys, collections
import os
runs = [r.split(":")[0] for r in os.environ["RUNS"].split()]
rows = collections.OrderedDict()
for r in runs:
    for f in glob.glob(f"{sys.argv[1]}/h200_wide_{r}_decode.csv"):
        for row in csv.DictReader(open(f)):
            rows.setdefault(tuple(row[k] for k in ("hk", "batch", "seqlen_k", "impl", "layout")), {})[r] = row
keys = list(rows)
print("hk batch seqlen_k impl layout | us " + " / ".join(runs) + " | vs cuDNN " + " / ".join(runs))
for k in keys:
    us = [rows[k].get(r, {}).get("us", "-") for r in runs]
    vs = [rows[k].get(r, {}).get("vs_sdpa_cudnn", "-") for r in runs]
    print(" ".join(k), "|", " / ".join(us), "|", " / ".join(vs))
PY
gpu_finish
