#!/usr/bin/env bash
# One GPU-host call (scripts/gpu_check.sh builds + checks the sm90 SASS), then the GPU tests of the
# sm90 family / routed decode / drop-in work and the forward benchmark of both families vs SDPA.
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}; export OUT
SKIP_TESTS=1 SKIP_BENCH=1 FLASH_ATTN_CUDA_ARCHS="90;90a" FLASH_ATTN_CUDA_HDIMS=${HDIMS:-64,128,256} \
  FLASH_ATTN_CUDA_DTYPES=bf16 MAX_JOBS=16 scripts/gpu_check.sh || exit 1
timeout ${TEST_TIMEOUT:-200} python3 -m pytest -q -p no:cacheprovider -rfE ${TESTS} > "$OUT/tests.log" 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20; tail -2 "$OUT/tests.log"
timeout ${BENCH_TIMEOUT:-150} python3 -m flash_attn_cuda.bench --directions fwd --hdims 64,128,256 \
  --seqlens 1024,4096,16384 --impls flash_attn_cuda,flash_attn_cuda_sm90,sdpa_flash,sdpa_cudnn \
  --out "$OUT/res" > "$OUT/bench.log" 2>&1
echo "bench rc=$?"; grep -E "^\|" "$OUT/bench.log"
