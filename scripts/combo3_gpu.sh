#!/usr/bin/env bash
# Device calls for branch combo3 (main + bwd256drop + lpt): `part1` builds (d = 64/128/256 bf16, archs
# 90;90a, feature kernels, persistent forward) unless a build of these sources is already here, then
# synccheck of the plain d = 256 backward, the sm90 dropout backward tests, d = 256 dropout speed vs
# SDPA flash, the persistent smoke and causal persistent speed. `part2`: sanitizers on the dropout
# backward (d = 256 and 128), persistent tests, routing tests, the whole dropout file. Logs in $OUT.
set -uo pipefail
. "$(dirname "$0")/gpu_stage_lib.sh"
gpu_setup combo3
export FLASH_ATTN_CUDA_ARCHS="90;90a" FLASH_ATTN_CUDA_HDIMS=${HDIMS:-64,128,256} FLASH_ATTN_CUDA_DTYPES=bf16 \
  FLASH_ATTN_CUDA_KVCACHE=0 FLASH_ATTN_CUDA_SMEM_TILES=0 FLASH_ATTN_CUDA_SM90_PERSISTENT=1 MAX_JOBS=16 \
  FLASH_ATTN_CUDA_PTXAS_VERBOSE=1
gpu_build "${BUILD_TIMEOUT:-260}"
case "${1:-}" in
part1)
  stage san_plain_sync 60 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool synccheck --error-exitcode 9 python3 scripts/sanitize_sm90_bwd.py 256
  TAILN=12 stage tests_drop 100 python3 -m pytest -q --maxfail=5 -p no:cacheprovider -rfE tests/test_dropout_gpu.py -k sm90_backward
  stage bench_drop 100 python3 -m flash_attn_cuda.bench --directions fwd,bwd --hdims 256 --seqlens 1024,4096 --causal 0 \
    --dropout 0.1 --impls flash_attn_cuda_sm90,flash_attn_cuda_sm80,sdpa_flash --prefix h200_bwd256drop --out "$OUT/res"
  grep -E "^\|" "$OUT/bench_drop.log" | head -30
  stage smoke 60 python3 scripts/sm90_persistent_smoke.py
  stage bench_persist 130 python3 -m flash_attn_cuda.bench --directions fwd --hdims 64,128 --seqlens 1024,4096,16384 \
    --causal 1 --impls flash_attn_cuda_sm90,flash_attn_cuda_sm90_persistent,sdpa_cudnn --prefix h200_lpt --out "$OUT/res"
  grep -E "^\|" "$OUT/bench_persist.log" | head -30
  ;;
part2)
  stage san_plain_sync 60 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool synccheck --error-exitcode 9 python3 scripts/sanitize_sm90_bwd.py 256
  stage san_drop_sync 60 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool synccheck --error-exitcode 9 python3 scripts/sanitize_sm90_bwd.py --dropout 0.2 256 128
  stage san_drop_race 90 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool racecheck --error-exitcode 9 python3 scripts/sanitize_sm90_bwd.py --dropout 0.2 256 128
  stage san_drop_mem 60 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 9 python3 scripts/sanitize_sm90_bwd.py --dropout 0.2 256 128
  TAILN=12 stage tests_persist 110 python3 -m pytest -q --maxfail=5 -p no:cacheprovider -rfE tests/test_sm90_persistent_gpu.py
  TAILN=12 stage tests_route 60 python3 -m pytest -q --maxfail=5 -p no:cacheprovider -rfE tests/test_sm90_bwd_gpu.py -k d256
  TAILN=12 stage tests_all 170 python3 -m pytest -q --maxfail=5 -p no:cacheprovider -rfE tests/test_dropout_gpu.py
  ;;
part3)  # HDIMS=256: the role-split tile's converged waits (sanitizers), tests, speed
  stage san_plain_sync 60 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --error-exitcode 9 --tool synccheck python3 scripts/sanitize_sm90_bwd.py 256
  stage san_drop_sync 60 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --error-exitcode 9 --tool synccheck python3 scripts/sanitize_sm90_bwd.py --dropout 0.2 256
  stage san_drop_race 80 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --error-exitcode 9 --tool racecheck python3 scripts/sanitize_sm90_bwd.py --dropout 0.2 256
  stage san_plain_race 80 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --error-exitcode 9 --tool racecheck python3 scripts/sanitize_sm90_bwd.py 256
  stage san_drop_mem 50 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --error-exitcode 9 --tool memcheck python3 scripts/sanitize_sm90_bwd.py --dropout 0.2 256
  TAILN=12 stage tests 150 python3 -m pytest -q --maxfail=5 -p no:cacheprovider -rfE tests/test_sm90_bwd_gpu.py tests/test_dropout_gpu.py
  stage bench_drop 70 python3 -m flash_attn_cuda.bench --directions fwd,bwd --hdims 256 --seqlens 1024,4096 --causal 0 \
    --dropout 0.1 --impls flash_attn_cuda,flash_attn_cuda_sm80,sdpa_flash --prefix h200_bwd256drop --out "$OUT/res"
  grep -E "^\|" "$OUT/bench_drop.log" | head -30
  stage bench_plain 90 python3 -m flash_attn_cuda.bench --directions fwd,bwd --hdims 256 --seqlens 1024,4096,16384 --causal both \
    --impls flash_attn_cuda,flash_attn_cuda_sm80,sdpa_cudnn --prefix h200_bwd256_conv --out "$OUT/res"
  grep -E "^\|" "$OUT/bench_plain.log" | head -40
  ;;
part4)  # HDIMS=256: the role-split dropout tile (mask in registers since 2026-12-02): sanitizers, tests, speed
  stage san_drop_race 60 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --error-exitcode 9 --tool racecheck python3 scripts/sanitize_sm90_bwd.py --dropout 0.2 256
  stage san_drop_sync 40 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --error-exitcode 9 --tool synccheck python3 scripts/sanitize_sm90_bwd.py --dropout 0.2 256
  stage san_drop_mem 40 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --error-exitcode 9 --tool memcheck python3 scripts/sanitize_sm90_bwd.py --dropout 0.2 256
  TAILN=12 stage tests 90 python3 -m pytest -q --maxfail=5 -p no:cacheprovider -rfE tests/test_dropout_gpu.py tests/test_sm90_bwd_gpu.py -k "256 or d256 or sm90_backward"
  stage bench_drop 60 python3 -m flash_attn_cuda.bench --directions fwd,bwd --hdims 256 --seqlens 1024,4096 --causal 0 \
    --dropout 0.1 --impls flash_attn_cuda,flash_attn_cuda_sm80,sdpa_flash --prefix h200_bwd256drop_reg --out "$OUT/res"
  grep -E "^\|" "$OUT/bench_drop.log" | head -30
  ;;
*) echo "usage: $0 part1|part2|part3|part4" >&2; exit 2 ;;
esac
gpu_finish
