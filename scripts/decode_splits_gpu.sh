#!/usr/bin/env bash
# One device call: the decode split count (heuristics.h decode_num_splits) swept by hand at the shapes
# issue 10 still misses (GQA 32/8, d = 128 bf16, contiguous cache): bench_decode once per
# --num-splits (0 = the heuristic, with cuDNN in that run), batch 1 / 8 x 4k / 32k. Build d = 128
# bf16, sm_90, forward + KV cache.
#   OUT=$OUT SPLITS="0 3 5 ..." scripts/decode_splits_gpu.sh   (needs the nvidia-cutlass wheel in .whl/)
set -uo pipefail
. "$(dirname "$0")/gpu_stage_lib.sh"
gpu_setup splits
export FLASH_ATTN_CUDA_ARCHS="90" FLASH_ATTN_CUDA_HDIMS=128 FLASH_ATTN_CUDA_DTYPES=bf16 \
  FLASH_ATTN_CUDA_BACKWARD=0 FLASH_ATTN_CUDA_FEATURES=0 FLASH_ATTN_CUDA_SMEM_TILES=0 MAX_JOBS=16
DEADLINE=${DEADLINE:-570}
gpu_build "${BUILD_TIMEOUT:-200}"
ARGS="--heads 32:8 --batches ${BATCHES:-1,8} --seqlens ${SEQLENS:-4096,32768} --layouts contiguous"
for ns in ${SPLITS:-0 3 5 6 8 12 24 28 40 48 66}; do
  impls=flash_attn_cuda; [ "$ns" = 0 ] && impls=flash_attn_cuda,sdpa_cudnn
  TAILN=0 stage "ns$ns" 60 python3 -m flash_attn_cuda.bench_decode $ARGS --impls $impls --num-splits "$ns" \
    --prefix "h200_splits$ns" --out "$OUT/res"
  grep -E "^\| " "$OUT/res/h200_splits${ns}_decode.md" 2>/dev/null | grep -v -- "---" | grep -vi "^| *batch\|impl" | sed "s/^/ns=$ns /"
done
gpu_finish
