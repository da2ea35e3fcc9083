#!/usr/bin/env bash
# One device call for the decode kernel's programmatic dependent launch (FLASH_ATTN_CUDA_DECODE_PDL):
# build d = 128 bf16 (sm_90, forward + KV cache), the KV-cache GPU tests, compute-sanitizer on
# scripts/sanitize_kvcache.py, then bench_decode twice in one process lifetime each, PDL off and on,
# each with cuDNN in the same run (ratios hold across runs, absolute times may not). Logs in $OUT.
#   OUT=$OUT scripts/decode_pdl_gpu.sh        (needs the nvidia-cutlass wheel in .whl/)
set -uo pipefail
. "$(dirname "$0")/gpu_stage_lib.sh"
gpu_setup decode
export FLASH_ATTN_CUDA_ARCHS="90" FLASH_ATTN_CUDA_HDIMS=${HDIMS:-128} FLASH_ATTN_CUDA_DTYPES=bf16 \
  FLASH_ATTN_CUDA_BACKWARD=0 FLASH_ATTN_CUDA_SMEM_TILES=0 MAX_JOBS=16
DEADLINE=${DEADLINE:-570}
gpu_build "${BUILD_TIMEOUT:-240}"
ARGS="--heads 32:8,32:32 --batches 1,8,32,64 --seqlens 4096,32768,131072 --impls flash_attn_cuda,sdpa_cudnn --layouts contiguous,paged16 --max-kv-gb 8"
stage bench_pdl0 120 env FLASH_ATTN_CUDA_DECODE_PDL=0 python3 -m flash_attn_cuda.bench_decode $ARGS --prefix h200_pdl0 --out "$OUT/res"
stage bench_pdl1 120 env FLASH_ATTN_CUDA_DECODE_PDL=1 python3 -m flash_attn_cuda.bench_decode $ARGS --prefix h200_pdl1 --out "$OUT/res"
TAILN=12 stage tests 150 python3 -m pytest -q --maxfail=5 -p no:cacheprovider -rfE tests/test_kvcache_gpu.py
stage san_mem 60 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --error-exitcode 9 --tool memcheck python3 scripts/sanitize_kvcache.py
stage san_race 60 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --error-exitcode 9 --tool racecheck python3 scripts/sanitize_kvcache.py
for t in pdl0 pdl1; do echo "## $t"; grep -E "^\|" "$OUT/res/h200_${t}_decode.md" 2>/dev/null | grep -v -- "---"; done
gpu_finish
