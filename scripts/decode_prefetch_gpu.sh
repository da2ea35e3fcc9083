#!/usr/bin/env bash
# One device call for the decode kernel's L2 prefetch under the programmatic dependent launch's wait
# (decode_kernel.h prefetch_kv_rows_l2): build d = 128 bf16 (sm_90, forward + KV cache) of this tree
# and of .ab_base/ (`git archive` of the commit before, untracked) in parallel, the KV-cache GPU
# tests, compute-sanitizer memcheck on scripts/sanitize_kvcache.py, then bench_decode B, A, B (each
# with cuDNN in the same run). Logs in $OUT.
#   OUT=$OUT scripts/decode_prefetch_gpu.sh        (needs the nvidia-cutlass wheel in .whl/)
set -uo pipefail
. "$(dirname "$0")/gpu_stage_lib.sh"
gpu_setup prefetch
export FLASH_ATTN_CUDA_ARCHS="90" FLASH_ATTN_CUDA_HDIMS=128 FLASH_ATTN_CUDA_DTYPES=bf16 \
  FLASH_ATTN_CUDA_BACKWARD=0 FLASH_ATTN_CUDA_SMEM_TILES=0 MAX_JOBS=8
DEADLINE=${DEADLINE:-570}
( cd .ab_base && ln -sfn ../.whl .whl && timeout 200 python3 setup.py build_ext --inplace > "$OUT/build_A.log" 2>&1; echo "build A rc=$?" ) &
gpu_build 200
wait
TAILN=6 stage tests 120 python3 -m pytest -q --maxfail=5 -p no:cacheprovider -rfE tests/test_kvcache_gpu.py
stage san_mem 60 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --error-exitcode 9 --tool memcheck python3 scripts/sanitize_kvcache.py
ARGS="--heads 32:8 --batches 1,8,32,64 --seqlens 4096,32768 --impls flash_attn_cuda,sdpa_cudnn --layouts contiguous,paged16 --max-kv-gb 8"
TAILN=0 stage bench_B1 50 python3 -m flash_attn_cuda.bench_decode $ARGS --prefix h200_pfB1 --out "$OUT/res"
( cd .ab_base && PYTHONPATH=$PWD TAILN=0 stage bench_A 50 python3 -m flash_attn_cuda.bench_decode $ARGS --prefix h200_pfA --out "$OUT/res" )
TAILN=0 stage bench_B2 50 python3 -m flash_attn_cuda.bench_decode $ARGS --prefix h200_pfB2 --out "$OUT/res"
for t in pfB1 pfA pfB2; do echo "## $t"; grep -E "^\| [0-9]" "$OUT/res/h200_${t}_decode.md" 2>/dev/null | awk -F'|' '{print $2,$3,"ours",$5,"pct",$7,"p16",$8,"cudnn",$11,"ratio",$14,$15}'; done
gpu_finish
