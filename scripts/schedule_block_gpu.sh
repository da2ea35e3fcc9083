#!/usr/bin/env bash
# One device call for the schedule-block options (wg_gemm.h end_block_before_wait; benchmarks/NOTES.md,
# "Twentieth session"). It builds bf16 d = 64 / 128 / 256 with the backward (no feature kernels, no KV
# cache), then recompiles the sm90 forward units and the d = 64 / 128 backward units with
# FLASH_ATTN_CUDA_SM90_FWD_SCHEDULE_BLOCK=1 and _BWD_SCHEDULE_BLOCK=1 into /tmp/v_blk.
# Then it:
#   - prints where the variant's exp2 sit against the wgmma waits (tools/sass_overlap.py);
#   - benchmarks fwd and bwd base / blk / base, with cuDNN and, when .fa3/libfa3ref.so exists, FA3
#     (scripts/fa3_ref/build.sh);
#   - runs the sm90 forward and backward tests on blk;
#   - checks that the forward's O and LSE are bit-identical between the two builds (scripts/fwd_bits.py).
# Since the twenty-first session the base build has the forward's block at d = 128 (its default), so the forward
# comparison there is on against on.
# Needs the nvidia-cutlass wheel in .whl/; device call: carry [".whl", ".fa3"].
#   OUT=$OUT scripts/schedule_block_gpu.sh        (SEQLENS=1024,4096 by default; about 8 minutes)
set -uo pipefail
REPO=$PWD
OUT=${OUT:-$PWD/schedule_block_out}
mkdir -p "$OUT/v"
IMPLS=flash_attn_cuda,sdpa_cudnn
if [ -f .fa3/libfa3ref.so ]; then
  export FLASH_ATTN_CUDA_BENCH_FA3_LIB=$REPO/.fa3/libfa3ref.so
  IMPLS=flash_attn_cuda,fa3_ref,sdpa_cudnn
fi
export FLASH_ATTN_CUDA_HDIMS=64,128,256 FLASH_ATTN_CUDA_DTYPES=bf16 FLASH_ATTN_CUDA_BACKWARD=1 \
  FLASH_ATTN_CUDA_FEATURES=0 FLASH_ATTN_CUDA_KVCACHE=0 MAX_JOBS=${MAX_JOBS:-16}
UNITS="sm90_fwd_hdim64_bf16.o sm90_fwd_hdim128_bf16.o sm90_fwd_hdim256_bf16.o sm90_fwd_hdim64_bf16_short_causal.o"
UNITS="$UNITS sm90_bwd_hdim64_bf16.o sm90_bwd_hdim128_bf16.o"
OUT=$OUT/v DEADLINE=${DEADLINE:-450} UNITS="$UNITS" \
  VARIANTS="blk:-DFLASH_ATTN_CUDA_SM90_FWD_SCHEDULE_BLOCK=1,-DFLASH_ATTN_CUDA_SM90_BWD_SCHEDULE_BLOCK=1" \
  TEST_VARIANT=blk TESTS="tests/test_sm90_persistent_gpu.py tests/test_sm90_bwd_gpu.py" SUMMARY_COLS=160 \
  BENCH_TIMEOUT=${BENCH_TIMEOUT:-100} \
  BENCH="flash_attn_cuda.bench --directions fwd,bwd --hdims 128,64,256 --seqlens ${SEQLENS:-1024,4096} --causal both --impls $IMPLS --order abba" \
  bash scripts/variants_gpu.sh
echo "### exp2 before / after the second wgmma wait, blk build (tools/sass_overlap.py)"
python3 tools/sass_overlap.py /tmp/v_blk/sm90_*.o 2>&1 | grep -oE "MUFU before the wait [0-9]+, after [0-9]+" | sort | uniq -c
echo "### forward bits, base against blk (must be equal)"
PYTHONPATH=$REPO timeout 60 python3 scripts/fwd_bits.py save /tmp/sb_base.pt 64,128,256 &&
  PYTHONPATH=/tmp/v_blk timeout 60 python3 scripts/fwd_bits.py save /tmp/sb_blk.pt 64,128,256 &&
  python3 scripts/fwd_bits.py compare /tmp/sb_base.pt /tmp/sb_blk.pt
