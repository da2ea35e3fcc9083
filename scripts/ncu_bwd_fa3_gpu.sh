#!/usr/bin/env bash
# One device call: warp-state samples per SASS instruction (Nsight Compute SourceCounters) of our sm90 backward
# main kernel and FlashAttention-3's (scripts/fa3_ref) at d = 128 bf16, 2 x 8k x 16 heads (FA2 grid), non-causal
# and causal, to see where ours stalls that FA3 does not (the dQ hand-off chain: the dq_empty wait before the
# next S^T, the writer's ticket; benchmarks/NOTES.md "Twenty-fifth session"). Clocks left alone.
#   OUT=$OUT scripts/ncu_bwd_fa3_gpu.sh      (device call: carry [".whl", ".fa3"]; about 6 minutes)
# Results: res/src_{ours,fa3}_{0,1}.csv (0 non-causal, 1 causal; ncu --page source --csv --print-source sass),
# res/src_details.csv; summarise them here with tools/ncu_source_summary.py. HDIM=64 profiles d = 64 instead (FA2
# grid: 2 x 8k x 32 heads).
# DTYPES (default bf16) and PRE (commands run after the build, before ncu, each a time-boxed stage; e.g. the
# split-8 forward's owed checks, with DTYPES=fp16,bf16:
#   PRE="bash scripts/sanitize.sh scripts/sanitize_sm90_fwd.py --hdims 128;python3 -m pytest -q -x -rfE
#        tests/test_sm90_persistent_gpu.py tests/test_attention_gpu.py -k 'float16 and not bfloat16'"
# runs the sanitizers on the d = 128 forward and its fp16 tests in the same call).
set -uo pipefail
. "$(dirname "$0")/gpu_stage_lib.sh"
gpu_setup ncu_bwd_fa3
export FLASH_ATTN_CUDA_ARCHS="90;90a" FLASH_ATTN_CUDA_HDIMS=${HDIM:-128} FLASH_ATTN_CUDA_DTYPES=${DTYPES:-bf16} \
  FLASH_ATTN_CUDA_BACKWARD=1 FLASH_ATTN_CUDA_FEATURES=0 FLASH_ATTN_CUDA_KVCACHE=0 FLASH_ATTN_CUDA_SMEM_TILES=0 \
  MAX_JOBS=16
DEADLINE=${DEADLINE:-560}
fa3_required
gpu_build 300
n=0
IFS=';' read -ra pre <<< "${PRE:-}"
for c in "${pre[@]}"; do
  n=$((n + 1)); TAILN=6 stage pre$n ${PRE_TIMEOUT:-120} bash -c "$c"
done
KSEL="regex:sm90::bwd_kernel<|FlashAttnBwdSm90"
stage ncu_src 300 ncu --clock-control none --profile-from-start off --kernel-name-base demangled -k "$KSEL" \
  --section WarpStateStats --section SourceCounters --section InstructionStats --section SpeedOfLight -f -o "$OUT/src" \
  python3 scripts/ncu_bwd_probe.py --hdims ${HDIM:-128} --seqlens ${SEQLEN:-8192} --causal both --impls flash_attn_cuda,fa3_ref
grep -h "call:" "$OUT/ncu_src.log"
if [ -f "$OUT/src.ncu-rep" ]; then
  # launch 0: non-causal, 1: causal (the probe's order)
  ncu_source_pages "$OUT/src.ncu-rep" demangled "ours:sm90::bwd_kernel<" fa3:FlashAttnBwdSm90
  ls -la "$OUT/res"; head -c 600 "$OUT/src.err"
fi
gpu_finish
