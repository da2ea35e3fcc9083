#!/usr/bin/env bash
# One device call for an sm90 backward build experiment (scripts/variants_gpu.sh underneath): builds
# d = 64 / 128 bf16 with the backward (no feature kernels), recompiles the dispatch (it sizes the dQ
# semaphores by the build's store-first choice) and the two sm90 backward units per variant into
# /tmp/v_<name>, benchmarks the backward base / variants / base with cuDNN, runs the sm90 backward tests on
# TEST_VARIANT, then the sanitizers (dq_accum poisoned, plain and deterministic) from each of SANITIZE,
# and with PROFILE=1 the kernel timelines of base and the variants. Needs the nvidia-cutlass wheel in .whl/.
#   OUT=$OUT VARIANTS="rot:-DFLASH_ATTN_CUDA_SM90_BWD_ROTATE=1 rotsf:-DFLASH_ATTN_CUDA_SM90_BWD_ROTATE=1,-DFLASH_ATTN_CUDA_SM90_BWD_STORE_FIRST=1" \
#     CAUSAL=0 TEST_VARIANT=rotsf SANITIZE=rotsf scripts/bwd_variants_gpu.sh             (the rotated walk)
#   OUT=$OUT VARIANTS="sf:-DFLASH_ATTN_CUDA_SM90_BWD_STORE_FIRST=1" TEST_VARIANT=sf SANITIZE=sf PROFILE=1 \
#     scripts/bwd_variants_gpu.sh                                                          (store-first, 16th session)
set -uo pipefail
REPO=$PWD
OUT=${OUT:-$PWD/bwd_variants_out}
mkdir -p "$OUT/v"
export FLASH_ATTN_CUDA_ARCHS="90;90a" FLASH_ATTN_CUDA_HDIMS=64,128 FLASH_ATTN_CUDA_DTYPES=bf16 \
  FLASH_ATTN_CUDA_BACKWARD=1 FLASH_ATTN_CUDA_FEATURES=0 MAX_JOBS=${MAX_JOBS:-16}
OUT=$OUT/v DEADLINE=${DEADLINE:-390} UNITS="bwd_dispatch.o sm90_bwd_hdim64_bf16.o sm90_bwd_hdim128_bf16.o" \
  VARIANTS="$VARIANTS" TEST_VARIANT=${TEST_VARIANT:-} TESTS="tests/test_sm90_bwd_gpu.py" SUMMARY_COLS=120 BENCH_TIMEOUT=${BENCH_TIMEOUT:-60} \
  BENCH="flash_attn_cuda.bench --directions bwd --hdims 64,128 --seqlens 512,1024,2048,4096 --causal ${CAUSAL:-both} --impls flash_attn_cuda,sdpa_cudnn --order ${BENCH_ORDER:-ab}" \
  bash scripts/variants_gpu.sh
for v in ${SANITIZE:-}; do
  [ -d /tmp/v_$v/flash_attn_cuda ] || { echo "bwd_variants: no variant build $v"; continue; }
  for args in "64 128" "--deterministic 64 128"; do
    ( cd /tmp/v_$v && echo "### sanitize $v $args" &&
      OUT=$OUT FLASH_ATTN_CUDA_POISON_SCRATCH=1 timeout ${SANITIZE_TIMEOUT:-60} bash "$REPO/scripts/sanitize.sh" \
        "$REPO/scripts/sanitize_sm90_bwd.py" $args )
  done
done
if [ "${PROFILE:-0}" = 1 ]; then
  for dir in "$REPO" $(for v in $VARIANTS; do echo /tmp/v_${v%%:*}; done); do
    echo "### profile $dir"
    PYTHONPATH=$dir timeout 60 python3 scripts/profile_fwdbwd.py --shapes 128:512:1,128:4096:0,64:1024:0 --iters 10 \
      --trace /tmp/tr_bwdv 2>&1 | grep -E "host|prepass|bwd_kernel|convert" | cut -c1-150
  done
fi
