#!/usr/bin/env bash
# One device call for a compile-time option of the sm90 forward: builds the bf16 forward at HDIMS (no backward,
# features or KV cache), recompiles its sm90 forward units with DEFINE into /tmp/v_opt, then
#   - benchmarks the forward base / opt / base / opt with FA3 (when .fa3/libfa3ref.so exists and FA3=1) and cuDNN;
#   - runs the sm90 forward tests on opt;
#   - checks that O and LSE are bit-identical between the two builds (scripts/fwd_bits.py; BITS=0 skips it,
#     for an option that changes the arithmetic).
#   OUT=$OUT DEFINE=-DFLASH_ATTN_CUDA_SM90_FWD_RESCALE_UNDER_QK=1 scripts/fwd_option_gpu.sh
#       (twenty-first session: HDIMS=64,128,256 SEQLENS=1024,4096,8192 FA3=1, about 5 minutes)
#   OUT=$OUT DEFINE=-DFLASH_ATTN_CUDA_SM90_FWD_GUARD_MASKED_ONLY=1 HDIMS=128 SEQLENS=2048,8192 FA3=0 ...  (~3 min)
# Device call: carry [".whl", ".fa3"].
set -uo pipefail
REPO=$PWD
OUT=${OUT:-$PWD/fwd_option_out}
HDIMS=${HDIMS:-64,128,256}
mkdir -p "$OUT/v"
IMPLS=flash_attn_cuda,sdpa_cudnn
if [ "${FA3:-1}" = 1 ] && [ -f .fa3/libfa3ref.so ]; then
  export FLASH_ATTN_CUDA_BENCH_FA3_LIB=$REPO/.fa3/libfa3ref.so
  IMPLS=flash_attn_cuda,fa3_ref,sdpa_cudnn
fi
UNITS=""
for d in ${HDIMS//,/ }; do UNITS="$UNITS sm90_fwd_hdim${d}_bf16.o"; done
case ",$HDIMS," in *,64,*) UNITS="$UNITS sm90_fwd_hdim64_bf16_short_causal.o" ;; esac
export FLASH_ATTN_CUDA_HDIMS=$HDIMS FLASH_ATTN_CUDA_DTYPES=bf16 FLASH_ATTN_CUDA_BACKWARD=0 \
  FLASH_ATTN_CUDA_FEATURES=0 FLASH_ATTN_CUDA_KVCACHE=0 MAX_JOBS=${MAX_JOBS:-16}
OUT=$OUT/v DEADLINE=${DEADLINE:-420} UNITS="$UNITS" \
  VARIANTS="opt:${DEFINE:?DEFINE=-D... names the option}" ORDER="base1:base opt1:opt base2:base opt2:opt" \
  TEST_VARIANT=opt TESTS="tests/test_sm90_persistent_gpu.py" SUMMARY_COLS=160 BENCH_TIMEOUT=${BENCH_TIMEOUT:-80} \
  BENCH="flash_attn_cuda.bench --directions fwd --hdims $HDIMS --seqlens ${SEQLENS:-1024,4096,8192} --causal both --impls $IMPLS --order abba" \
  bash scripts/variants_gpu.sh
if [ "${BITS:-1}" = 1 ]; then
  echo "### forward bits, base against opt (must be equal)"
  PYTHONPATH=$REPO timeout 60 python3 scripts/fwd_bits.py save /tmp/opt_base.pt $HDIMS &&
    PYTHONPATH=/tmp/v_opt timeout 60 python3 scripts/fwd_bits.py save /tmp/opt_opt.pt $HDIMS &&
    python3 scripts/fwd_bits.py compare /tmp/opt_base.pt /tmp/opt_opt.pt
fi
