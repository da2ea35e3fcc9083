#!/usr/bin/env bash
# One device call: our sm90 forward against FlashAttention-3's (scripts/fa3_ref) and cuDNN's at d = 128
# bf16, where FA3 leads (benchmarks/NOTES.md, "Twentieth session"):
#   - bench: forward TFLOP/s at 1k-8k, causal both, A B B A, the three in one run;
#   - ncu: launch, speed of light, warp states, scheduler, compute workload, and the spread of the SMs'
#     active cycles (min / avg / max: the tile order's tail) of one call each at 2k and 8k
#     (scripts/ncu_probe.py --forward-only); clocks left alone (--clock-control none);
#   - compute-sanitizer memcheck / racecheck / synccheck on the d = 128 forward (scripts/sanitize_sm90_fwd.py).
#   OUT=$OUT scripts/ncu_fa3_gpu.sh        (device call: carry [".whl", ".fa3"]; about 5 minutes)
#   SOURCE=1: instead, warp-state samples per SASS instruction (SourceCounters) of ours and FA3's forward at
#   8k, causal both, as res/src_<kernel id>.csv (ncu --page source --print-source sass).
set -uo pipefail
. "$(dirname "$0")/gpu_stage_lib.sh"
gpu_setup ncu_fa3
export FLASH_ATTN_CUDA_ARCHS="90;90a" FLASH_ATTN_CUDA_HDIMS=128 FLASH_ATTN_CUDA_DTYPES=bf16 \
  FLASH_ATTN_CUDA_BACKWARD=0 FLASH_ATTN_CUDA_FEATURES=0 FLASH_ATTN_CUDA_KVCACHE=0 FLASH_ATTN_CUDA_SMEM_TILES=0 \
  MAX_JOBS=16
DEADLINE=${DEADLINE:-540}
fa3_required
gpu_build 240
if [ "${SOURCE:-0}" = 1 ]; then
  stage ncu_src 240 ncu --clock-control none --profile-from-start off --section WarpStateStats --section SourceCounters \
    --section InstructionStats -k "regex:fwd_kernel_persistent|device_kernel" -f -o "$OUT/src" \
    python3 scripts/ncu_probe.py --forward-only --seqlens 8192 --fa3-lib "$LIB"
  ncu --import "$OUT/src.ncu-rep" --page source --csv --print-source sass > "$OUT/res/src_all.csv" 2> "$OUT/src.err"
  # launch 0: non-causal, 1: causal (ncu_probe.py's order)
  ncu_source_pages "$OUT/src.ncu-rep" function ours:fwd_kernel_persistent fa3:device_kernel
  ls -la "$OUT/res"; head -c 600 "$OUT/src.err"; mv "$OUT/src.ncu-rep" "$OUT/res/" 2>/dev/null
  gpu_finish; exit 0
fi
stage bench 150 python3 -m flash_attn_cuda.bench --directions fwd --hdims 128 --seqlens 1024,2048,4096,8192 \
  --causal both --impls flash_attn_cuda,fa3_ref,sdpa_cudnn --order abba --out "$OUT/res"
grep -h "^| [0-9]" "$OUT/bench.log"
NCU="ncu --clock-control none --profile-from-start off --section LaunchStats --section SpeedOfLight \
  --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
  --metrics sm__cycles_active.min,sm__cycles_active.avg,sm__cycles_active.max,gpc__cycles_elapsed.max -f"
stage ncu 200 $NCU -o "$OUT/fwd" python3 scripts/ncu_probe.py --forward-only --seqlens 2048,8192 --fa3-lib "$LIB"
grep -h "call:" "$OUT/ncu.log"
if [ -f "$OUT/fwd.ncu-rep" ]; then
  ncu --import "$OUT/fwd.ncu-rep" --csv --page details --print-units base > "$OUT/res/fwd_ncu.csv" 2> "$OUT/import.err"
  ncu --import "$OUT/fwd.ncu-rep" --page details --print-units base > "$OUT/res/fwd_ncu.txt" 2>/dev/null
fi
TAILN=4 stage sanitize 150 bash scripts/sanitize.sh scripts/sanitize_sm90_fwd.py --hdims 128
gpu_finish
