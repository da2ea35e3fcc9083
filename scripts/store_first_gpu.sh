#!/usr/bin/env bash
# One device call comparing the sm90 backward's store-first dQ tiles on every d = 64 / 128 call
# (FLASH_ATTN_CUDA_SM90_BWD_STORE_FIRST=1, "sf") against the build's default (2: bwd_store_first's
# per-kernel choice, csrc/sm90/bwd_api.h; benchmarks/NOTES.md "Sixteenth session"): builds d = 64 / 128
# bf16 with the backward, recompiles the dispatch (it sizes the semaphores by the macro) and the two sm90
# backward units with the macro into /tmp/v_sf (scripts/variants_gpu.sh), benchmarks base / sf / base
# with cuDNN, runs the sm90 backward tests on sf (test_sm90_gradients_on_poisoned_scratch among them),
# then from sf the sanitizers (plain and deterministic, dq_accum poisoned) and the kernel timeline of
# both builds. Needs the nvidia-cutlass wheel in .whl/.
#   OUT=$OUT scripts/store_first_gpu.sh
set -uo pipefail
REPO=$PWD
OUT=${OUT:-$PWD/store_first_out}
mkdir -p "$OUT/v"
export FLASH_ATTN_CUDA_ARCHS="90;90a" FLASH_ATTN_CUDA_HDIMS=64,128 FLASH_ATTN_CUDA_DTYPES=bf16 \
  FLASH_ATTN_CUDA_BACKWARD=1 FLASH_ATTN_CUDA_FEATURES=0 MAX_JOBS=${MAX_JOBS:-16}
OUT=$OUT/v DEADLINE=${DEADLINE:-420} UNITS="bwd_dispatch.o sm90_bwd_hdim64_bf16.o sm90_bwd_hdim128_bf16.o" \
  VARIANTS="sf:-DFLASH_ATTN_CUDA_SM90_BWD_STORE_FIRST=1" TEST_VARIANT=sf \
  TESTS="tests/test_sm90_bwd_gpu.py tests/test_backward_gpu.py" SUMMARY_COLS=120 BENCH_TIMEOUT=60 \
  BENCH="flash_attn_cuda.bench --directions bwd --hdims 64,128 --seqlens 512,1024,2048,4096 --causal both --impls flash_attn_cuda,sdpa_cudnn --order ab" \
  bash scripts/variants_gpu.sh
[ -d /tmp/v_sf/flash_attn_cuda ] || { echo "store_first: no variant build"; exit 1; }
cd /tmp/v_sf || exit 1
for args in "64 128" "--deterministic 64 128"; do
  echo "### sanitize sf $args"
  OUT=$OUT FLASH_ATTN_CUDA_POISON_SCRATCH=1 timeout 120 bash "$REPO/scripts/sanitize.sh" \
    "$REPO/scripts/sanitize_sm90_bwd.py" $args
done
cd "$REPO" || exit 1
for dir in "$REPO" /tmp/v_sf; do
  echo "### profile $dir"
  PYTHONPATH=$dir timeout 60 python3 scripts/profile_fwdbwd.py --shapes 128:512:1,128:4096:0,64:1024:0 --iters 10 \
    --trace /tmp/tr_sf 2>&1 | grep -E "host|prepass|bwd_kernel|convert" | cut -c1-150
done
