#!/usr/bin/env bash
# One device call for the decode split rule's short-cache branch (heuristics.h decode_num_splits):
# build d = 128 bf16 (sm_90, forward + KV cache), the KV-cache GPU tests, bench_decode at batch 1 x
# 1k..8k (GQA 32/8; ours contiguous / paged 16, the one-token attention() call, cuDNN in the same run),
# then --num-splits sweeps at 1 x 1k and 1 x 8k (the shapes the rule has not been measured at).
#   OUT=$OUT scripts/decode_short_gpu.sh        (needs the nvidia-cutlass wheel in .whl/)
set -uo pipefail
. "$(dirname "$0")/gpu_stage_lib.sh"
gpu_setup short
export FLASH_ATTN_CUDA_ARCHS="90" FLASH_ATTN_CUDA_HDIMS=128 FLASH_ATTN_CUDA_DTYPES=bf16 \
  FLASH_ATTN_CUDA_BACKWARD=0 FLASH_ATTN_CUDA_SMEM_TILES=0 MAX_JOBS=16
DEADLINE=${DEADLINE:-570}
gpu_build 200
TAILN=4 stage tests 120 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_kvcache_gpu.py
TAILN=0 stage bench 90 python3 -m flash_attn_cuda.bench_decode --heads 32:8,32:32 --batches 1,2 \
  --seqlens 1k,2k,3k,4k,8k --impls flash_attn_cuda,attention,sdpa_cudnn --layouts contiguous,paged16 \
  --prefix h200_short --out "$OUT/res"
grep -E "^\| [0-9]" "$OUT/res/h200_short_decode.md"
for ns in 4 8 16 32; do
  TAILN=0 stage "ns$ns" 40 python3 -m flash_attn_cuda.bench_decode --heads 32:8 --batches 1 --seqlens 1k,8k \
    --layouts contiguous --impls flash_attn_cuda --num-splits "$ns" --prefix "h200_short_ns$ns" --out "$OUT/res"
  grep -E "^\| [0-9]" "$OUT/res/h200_short_ns${ns}_decode.md" | awk -F'|' -v ns=$ns '{print "ns="ns,$2,$3,$5}'
done
gpu_finish
