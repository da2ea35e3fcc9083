#!/usr/bin/env bash
# One device call for the sm90 backward's rotated walk (FLASH_ATTN_CUDA_SM90_BWD_ROTATE, csrc/sm90/bwd_walk.h;
# benchmarks/NOTES.md "Sixteenth session"): builds d = 64 / 128 bf16 with the backward (no feature
# kernels), recompiles the dispatch and the two sm90 backward units as "rot" (rotated, store-first by
# the default policy: d = 64 non-causal without it) and "rotsf" (rotated, store-first on every d = 64 / 128
# call) into /tmp/v_rot, /tmp/v_rotsf (scripts/variants_gpu.sh), benchmarks the non-causal backward
# base / rot / rotsf / base with cuDNN, runs the sm90 backward tests on rotsf, then from rotsf and rot the
# sanitizers with dq_accum poisoned. Needs the nvidia-cutlass wheel in .whl/.
#   OUT=$OUT scripts/rotate_gpu.sh
set -uo pipefail
REPO=$PWD
OUT=${OUT:-$PWD/rotate_out}
mkdir -p "$OUT/v"
export FLASH_ATTN_CUDA_ARCHS="90;90a" FLASH_ATTN_CUDA_HDIMS=64,128 FLASH_ATTN_CUDA_DTYPES=bf16 \
  FLASH_ATTN_CUDA_BACKWARD=1 FLASH_ATTN_CUDA_FEATURES=0 MAX_JOBS=${MAX_JOBS:-16}
OUT=$OUT/v DEADLINE=${DEADLINE:-390} UNITS="bwd_dispatch.o sm90_bwd_hdim64_bf16.o sm90_bwd_hdim128_bf16.o" \
  VARIANTS="rot:-DFLASH_ATTN_CUDA_SM90_BWD_ROTATE=1 rotsf:-DFLASH_ATTN_CUDA_SM90_BWD_ROTATE=1,-DFLASH_ATTN_CUDA_SM90_BWD_STORE_FIRST=1" \
  TEST_VARIANT=rotsf TESTS="tests/test_sm90_bwd_gpu.py" SUMMARY_COLS=120 BENCH_TIMEOUT=60 \
  BENCH="flash_attn_cuda.bench --directions bwd --hdims 64,128 --seqlens 512,1024,2048,4096 --causal 0 --impls flash_attn_cuda,sdpa_cudnn --order ab" \
  bash scripts/variants_gpu.sh
for v in rotsf rot; do
  [ -d /tmp/v_$v/flash_attn_cuda ] || { echo "rotate: no variant build $v"; continue; }
  ( cd /tmp/v_$v && echo "### sanitize $v" &&
    OUT=$OUT FLASH_ATTN_CUDA_POISON_SCRATCH=1 timeout 95 bash "$REPO/scripts/sanitize.sh" "$REPO/scripts/sanitize_sm90_bwd.py" 64 128 )
done
