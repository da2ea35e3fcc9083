#!/usr/bin/env bash
# One device call: Nsight Compute on SDPA's cuDNN kernels and ours at the shapes of scripts/ncu_probe.py
# (decode 8 x 4k / 1 x 32k / 32 x 4k, forward FA2 grid 1k / 4k, cuDNN's backward 1k): launch
# configuration (grid, block, registers, shared memory, cluster), occupancy, speed of light, memory
# and compute workload. cuDNN first (no build needed), while ours builds (d = 128 bf16, forward + KV
# cache, archs 90;90a); clocks left alone (--clock-control none).
#   OUT=$OUT scripts/ncu_gpu.sh        (needs the nvidia-cutlass wheel in .whl/)
set -uo pipefail
. "$(dirname "$0")/gpu_stage_lib.sh"
gpu_setup ncu
export FLASH_ATTN_CUDA_ARCHS="90;90a" FLASH_ATTN_CUDA_HDIMS=128 FLASH_ATTN_CUDA_DTYPES=bf16 \
  FLASH_ATTN_CUDA_BACKWARD=0 FLASH_ATTN_CUDA_FEATURES=0 FLASH_ATTN_CUDA_SMEM_TILES=0 MAX_JOBS=12
DEADLINE=${DEADLINE:-570}
NCU="ncu --clock-control none --profile-from-start off --section LaunchStats --section Occupancy \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis -f"
which ncu; ncu --version | tail -1
( gpu_build 300 > "$OUT/build_stage.log" 2>&1 ) &
BUILD=$!
stage ncu_cudnn 200 $NCU -o "$OUT/cudnn" python3 scripts/ncu_probe.py --skip-ours
wait $BUILD; cat "$OUT/build_stage.log"
stage ncu_ours 200 $NCU -o "$OUT/ours" python3 scripts/ncu_probe.py
for r in cudnn ours; do
  [ -f "$OUT/$r.ncu-rep" ] || continue
  ncu --import "$OUT/$r.ncu-rep" --csv --page details > "$OUT/res/$r.csv" 2> "$OUT/$r.import.err"
  ncu --import "$OUT/$r.ncu-rep" --page details --print-units base > "$OUT/res/$r.txt" 2>/dev/null
  mv "$OUT/$r.ncu-rep" "$OUT/res/"
done
grep -h "call:" "$OUT"/ncu_*.log | head -40
gpu_finish
