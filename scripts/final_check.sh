#!/usr/bin/env bash
# One GPU-host call: scripts/gpu_check.sh builds (and checks the sm90 SASS), then the GPU tests named
# in $TESTS, optionally flash-attn 2's suite (FA2_SUITE=1; tests/fa2_suite/test_flash_attn.py carried),
# the SDPA model-block benchmark (SDPA_BENCH=1) and the grid benchmark ($BENCH_ARGS, default: forward,
# d=64/128/256, seqlen 1k/4k/16k, both families vs SDPA flash and cuDNN) into $OUT/res.tgz.
#   TESTS="tests/test_attention_gpu.py" FA2_SUITE=1 SDPA_BENCH=1 scripts/final_check.sh
#   BENCH2_ARGS="--dropout 0.1 --prefix h200_dropout ..." adds a second grid benchmark.
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}; export OUT
SKIP_TESTS=1 SKIP_BENCH=1 FLASH_ATTN_CUDA_ARCHS="90;90a" FLASH_ATTN_CUDA_HDIMS=${HDIMS:-64,128,256} \
  FLASH_ATTN_CUDA_DTYPES=${DTYPES:-bf16} MAX_JOBS=16 scripts/gpu_check.sh > "$OUT/gpu_check.log" 2>&1 \
  || { tail -40 "$OUT/gpu_check.log"; exit 1; }
grep -E "build rc|check_sass|prebuilt" "$OUT/summary.txt"
if [ -n "${TESTS:-}" ]; then
  timeout ${TEST_TIMEOUT:-200} python3 -m pytest -q -p no:cacheprovider -rfE ${TESTS} > "$OUT/tests.log" 2>&1
  echo "tests rc=$?"; grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20; tail -2 "$OUT/tests.log"
fi
if [ -n "${FA2_SUITE:-}" ]; then
  timeout ${SUITE_TIMEOUT:-150} python3 -m pytest -q -p no:cacheprovider -rfE tests/fa2_suite > "$OUT/fa2_suite.log" 2>&1
  echo "fa2 suite rc=$?"; grep -E "^(FAILED|ERROR)|flash-attn suite:" "$OUT/fa2_suite.log" | head -20; tail -2 "$OUT/fa2_suite.log"
fi
mkdir -p "$OUT/res"
if [ -n "${SDPA_BENCH:-}" ]; then
  timeout ${SDPA_TIMEOUT:-90} python3 -m flash_attn_cuda.bench_sdpa ${SDPA_ARGS:-} --out "$OUT/res/h200_sdpa_block.md" > "$OUT/sdpa.log" 2>&1
  echo "sdpa bench rc=$?"; tail -12 "$OUT/sdpa.log"
fi
timeout ${BENCH_TIMEOUT:-150} python3 -m flash_attn_cuda.bench ${BENCH_ARGS:---directions fwd --hdims 64,128,256 \
  --seqlens 1024,4096,16384 --impls flash_attn_cuda,flash_attn_cuda_sm90,sdpa_flash,sdpa_cudnn} \
  --out "$OUT/res" > "$OUT/bench.log" 2>&1
echo "bench rc=$?"; grep -E "^(\||#)" "$OUT/bench.log"
# A second grid benchmark (e.g. other impls or --dropout) under its own file prefix.
if [ -n "${BENCH2_ARGS:-}" ]; then
  timeout ${BENCH2_TIMEOUT:-150} python3 -m flash_attn_cuda.bench ${BENCH2_ARGS} --out "$OUT/res" > "$OUT/bench2.log" 2>&1
  echo "bench2 rc=$?"; grep -E "^(\||#)" "$OUT/bench2.log"
fi
# the results as one file ($OUT brings back 8 files at most)
tar -czf "$OUT/res.tgz" -C "$OUT" res && rm -rf "$OUT/res"
