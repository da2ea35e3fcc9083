#!/usr/bin/env bash
# One device call: issue 10's decode table. Builds d = 128 bf16 (sm_90: forward + KV cache), runs the
# KV-cache GPU tests, then bench_decode over GQA 32/8 and MHA 32/32, batch 1..128 x 2k..128k cached tokens
# (K/V up to 18 GB: the issue's 17 GB points too; larger ones would need a float32 reference beyond the
# GPU's memory), ours (attention_with_kvcache on contiguous and paged 16/64/256 caches, and the one-token
# attention() call) against SDPA flash and cuDNN in the same run; then batch 1 / 2 x 1k..8k (the split
# rule's short-cache branch) as h200_short.
#   OUT=$OUT scripts/decode_table_gpu.sh        (needs the nvidia-cutlass wheel in .whl/)
# Result files are named after the GPU that ran them (bench.gpu_slug: h200, h100_80gb_hbm3). TESTS_FIRST=0 runs
# the tests after the benchmarks, in what time is left (the table first when a call may not fit both). A shorter
# table for a short call: HEADS=32:8 LAYOUTS=contiguous,paged16 BENCH_TIMEOUT=200 SHORT=0 (GQA only, two layouts, no
# short-cache table).
set -uo pipefail
. "$(dirname "$0")/gpu_stage_lib.sh"
gpu_setup table
export FLASH_ATTN_CUDA_ARCHS="90" FLASH_ATTN_CUDA_HDIMS=128 FLASH_ATTN_CUDA_DTYPES=bf16 \
  FLASH_ATTN_CUDA_BACKWARD=0 FLASH_ATTN_CUDA_SMEM_TILES=0 MAX_JOBS=8
DEADLINE=${DEADLINE:-575}
gpu_build 200
SLUG=$(gpu_result_prefix)
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader) -> results $SLUG*"
[ "${TESTS_FIRST:-1}" = 1 ] && TAILN=4 stage tests ${TESTS_TIMEOUT:-200} python3 -m pytest -q -p no:cacheprovider -rfE tests/test_kvcache_gpu.py
TAILN=3 stage bench ${BENCH_TIMEOUT:-420} python3 -m flash_attn_cuda.bench_decode --heads ${HEADS:-32:8,32:32} \
  --batches 1,8,32,64,128 --seqlens 2k,4k,32k,128k --impls flash_attn_cuda,attention,sdpa_flash,sdpa_cudnn \
  --layouts ${LAYOUTS:-contiguous,paged16,paged64,paged256} --max-kv-gb 18 --prefix "$SLUG" --out "$OUT/res"
if [ "${SHORT:-1}" = 1 ]; then
  TAILN=0 stage short 90 python3 -m flash_attn_cuda.bench_decode --heads 32:8,32:32 --batches 1,2 \
    --seqlens 1k,2k,3k,4k,8k --impls flash_attn_cuda,attention,sdpa_cudnn --layouts contiguous,paged16 \
    --prefix "${SLUG}_short" --out "$OUT/res"
  grep -E "^\| [0-9]" "$OUT/res/${SLUG}_short_decode.md"
fi
[ "${TESTS_FIRST:-1}" = 1 ] || TAILN=4 stage tests ${TESTS_TIMEOUT:-200} python3 -m pytest -q -p no:cacheprovider -rfE tests/test_kvcache_gpu.py
gpu_finish
