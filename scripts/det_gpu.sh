#!/usr/bin/env bash
# One device call for the sm90 backward's deterministic mode (dq_turns.h): build d = 64/128 bf16
# (archs 90;90a; HDIMS=64,128,256 adds the d = 256 routing to sm80), its tests (bit identity, routing,
# dropout), compute-sanitizer on a deterministic workload under timeouts (a wrong turn order would
# hang, not crash), the speed of deterministic vs default vs cuDNN in one run.
#   OUT=$OUT scripts/det_gpu.sh        (needs the nvidia-cutlass wheel in .whl/)
#   CAUSAL=both|1|0                  the bench's causal axis (default both)
set -uo pipefail
. "$(dirname "$0")/gpu_stage_lib.sh"
gpu_setup det
export FLASH_ATTN_CUDA_ARCHS="90;90a" FLASH_ATTN_CUDA_HDIMS=${HDIMS:-64,128} FLASH_ATTN_CUDA_DTYPES=bf16 \
  FLASH_ATTN_CUDA_KVCACHE=0 FLASH_ATTN_CUDA_SMEM_TILES=0 MAX_JOBS=16 FLASH_ATTN_CUDA_PTXAS_VERBOSE=1
DEADLINE=${DEADLINE:-570}
gpu_build 240
TAILN=12 stage tests 150 python3 -m pytest -q --maxfail=5 -p no:cacheprovider -rfE tests/test_sm90_bwd_gpu.py \
  tests/test_dropout_gpu.py tests/test_backward_gpu.py -k "deterministic or sm90 or gradients"
stage bench_det 100 python3 -m flash_attn_cuda.bench --directions bwd --hdims 64,128 --seqlens 1024,4096,16384 \
  --causal "${CAUSAL:-both}" --impls flash_attn_cuda,flash_attn_cuda_deterministic,sdpa_cudnn --prefix h200_det --out "$OUT/res"
grep -E "^\|" "$OUT/bench_det.log" | grep -v -- "---" | head -16
stage san_race 60 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --error-exitcode 9 --tool racecheck python3 scripts/sanitize_sm90_bwd.py --deterministic 64 128
stage san_sync 45 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --error-exitcode 9 --tool synccheck python3 scripts/sanitize_sm90_bwd.py --deterministic 64 128
stage san_mem 45 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --error-exitcode 9 --tool memcheck python3 scripts/sanitize_sm90_bwd.py --deterministic
gpu_finish
