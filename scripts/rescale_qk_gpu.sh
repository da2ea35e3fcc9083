#!/usr/bin/env bash
# One device call for FLASH_ATTN_CUDA_SM90_FWD_RESCALE_UNDER_QK (fwd_mainloop.h: O's rescale between the S and
# PV GEMM issues, FA3's place). Builds the bf16 d = 64 / 128 / 256 forward (no backward, features or KV cache),
# recompiles the sm90 forward units with the option on into /tmp/v_rq, then:
#   - benchmarks the forward base / rq / base / rq with FA3 (when .fa3/libfa3ref.so exists) and cuDNN;
#   - runs the sm90 forward tests on rq;
#   - checks that O and LSE are bit-identical between the two builds (scripts/fwd_bits.py).
#   OUT=$OUT scripts/rescale_qk_gpu.sh     (device call: carry [".whl", ".fa3"]; about 6 minutes)
set -uo pipefail
REPO=$PWD
OUT=${OUT:-$PWD/rescale_qk_out}
mkdir -p "$OUT/v"
IMPLS=flash_attn_cuda,sdpa_cudnn
if [ -f .fa3/libfa3ref.so ]; then
  export FLASH_ATTN_CUDA_BENCH_FA3_LIB=$REPO/.fa3/libfa3ref.so
  IMPLS=flash_attn_cuda,fa3_ref,sdpa_cudnn
fi
export FLASH_ATTN_CUDA_HDIMS=64,128,256 FLASH_ATTN_CUDA_DTYPES=bf16 FLASH_ATTN_CUDA_BACKWARD=0 \
  FLASH_ATTN_CUDA_FEATURES=0 FLASH_ATTN_CUDA_KVCACHE=0 MAX_JOBS=${MAX_JOBS:-16}
OUT=$OUT/v DEADLINE=${DEADLINE:-420} \
  UNITS="sm90_fwd_hdim64_bf16.o sm90_fwd_hdim128_bf16.o sm90_fwd_hdim256_bf16.o sm90_fwd_hdim64_bf16_short_causal.o" \
  VARIANTS="rq:-DFLASH_ATTN_CUDA_SM90_FWD_RESCALE_UNDER_QK=1" ORDER="base1:base rq1:rq base2:base rq2:rq" \
  TEST_VARIANT=rq TESTS="tests/test_sm90_persistent_gpu.py" SUMMARY_COLS=160 BENCH_TIMEOUT=${BENCH_TIMEOUT:-80} \
  BENCH="flash_attn_cuda.bench --directions fwd --hdims 128,64,256 --seqlens ${SEQLENS:-1024,4096,8192} --causal both --impls $IMPLS --order abba" \
  bash scripts/variants_gpu.sh
echo "### forward bits, base against rq (must be equal)"
PYTHONPATH=$REPO timeout 60 python3 scripts/fwd_bits.py save /tmp/rq_base.pt 64,128,256 &&
  PYTHONPATH=/tmp/v_rq timeout 60 python3 scripts/fwd_bits.py save /tmp/rq_rq.pt 64,128,256 &&
  python3 scripts/fwd_bits.py compare /tmp/rq_base.pt /tmp/rq_rq.pt
