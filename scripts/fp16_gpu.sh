#!/usr/bin/env bash
# One device call: the sm90 backward in fp16 (its default is bf16 only until this runs), plus the
# decode checks that fit the same fp16 build. Builds d = 64/128/256 fp16 (archs 90;90a, KV cache on),
# then: the sm90 backward's GPU tests (FLASH_ATTN_CUDA_FAMILY=sm90, fp16), its dropout tests,
# racecheck + synccheck of the fp16 sm90 backward, the dependent-chain PDL test of the KV cache,
# fp16 fwd/bwd speed (sm90, sm80, cuDNN in one run), decode on a head-major cache vs flash-attn's.
#   OUT=$OUT scripts/fp16_gpu.sh        (needs the nvidia-cutlass wheel in .whl/)
set -uo pipefail
. "$(dirname "$0")/gpu_stage_lib.sh"
gpu_setup fp16
export FLASH_ATTN_CUDA_ARCHS="90;90a" FLASH_ATTN_CUDA_HDIMS=${HDIMS:-64,128,256} FLASH_ATTN_CUDA_DTYPES=fp16 \
  FLASH_ATTN_CUDA_SMEM_TILES=0 MAX_JOBS=16 FLASH_ATTN_CUDA_PTXAS_VERBOSE=1
gpu_build "${BUILD_TIMEOUT:-300}"
TAILN=12 stage tests_bwd 100 python3 -m pytest -q --maxfail=5 -p no:cacheprovider -rfE tests/test_sm90_bwd_gpu.py
TAILN=12 stage tests_kv 40 python3 -m pytest -q --maxfail=3 -p no:cacheprovider -rfE tests/test_kvcache_gpu.py -k "dependent_chain or graph"
stage san_race 50 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --error-exitcode 9 --tool racecheck python3 scripts/sanitize_sm90_bwd.py 64 128
stage san_sync 40 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --error-exitcode 9 --tool synccheck python3 scripts/sanitize_sm90_bwd.py
stage bench_bwd 110 python3 -m flash_attn_cuda.bench --dtype fp16 --directions fwd,bwd --hdims 64,128,256 --seqlens 1024,4096,16384 \
  --causal 0 --impls flash_attn_cuda_sm90,flash_attn_cuda_sm80,sdpa_cudnn --prefix h200_fp16 --out "$OUT/res"
grep -E "^\|" "$OUT/bench_bwd.log" | grep -v -- "---" | head -30
stage bench_dec 60 python3 -m flash_attn_cuda.bench_decode --dtype fp16 --heads 32:8 --batches 1,8,64 --seqlens 4096,32768 \
  --impls flash_attn_cuda,sdpa_cudnn --layouts contiguous,headmajor --max-kv-gb 8 --prefix h200_headmajor --out "$OUT/res"
grep -E "^\|" "$OUT/res/h200_headmajor_decode.md" 2>/dev/null | grep -v -- "---"
TAILN=12 stage tests_drop 80 python3 -m pytest -q --maxfail=5 -p no:cacheprovider -rfE tests/test_dropout_gpu.py -k sm90_backward
gpu_finish
