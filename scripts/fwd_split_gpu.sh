#!/usr/bin/env bash
# One device call: the sm90 forward's PV wait inside the softmax (FLASH_ATTN_CUDA_SM90_FWD_EXP_SPLIT, csrc/sm90/
# fwd_mainloop.h; benchmarks/NOTES.md "Twenty-fifth session") at the head dims where it is not on by default,
# and two d = 256 options from the same SASS reading (FA3's d = 256 loop), as compile-time variants of the units
# sm90_fwd_hdim{64,256}_bf16 (scripts/variants_gpu.sh), FA3 (scripts/fa3_ref, where carried) and cuDNN in every run:
#   all8:  FLASH_ATTN_CUDA_SM90_FWD_EXP_SPLIT_DIMS=1 (split 8 at every head dim; d = 64 and 256 change)
#   sprqk: all8 + FLASH_ATTN_CUDA_SM90_FWD_RESCALE_UNDER_QK=1 (the O rescale under the S GEMM, as FA3 at d = 256)
#   nt:    FLASH_ATTN_CUDA_SM90_FWD256_NO_TURNS=1 (no GEMM turn barriers at d = 256, as FA3)
#   ntsp:  nt + sprqk
# Runs base / all8 / sprqk / nt / ntsp / base / all8 / ntsp, forward at 1k / 2k / 8k, causal and not; then the
# sm90 forward tests on ntsp (every option of the call at once).
#   OUT=$OUT scripts/fwd_split_gpu.sh     (carry [".whl", ".fa3"]; about 7 minutes on an H100)
# The d = 128 measurement that made split 8 the default (base / split 4 / 8 / 12 / 16, results/history/
# h100_fwdsplit_call*.md) ran the same way with UNITS=sm90_fwd_hdim128_bf16.o, FLASH_ATTN_CUDA_SM90_FWD_EXP_SPLIT=k
# as the variants and 0 (then the default) as the base: HDIMS=128 VARIANTS="sp0:-DFLASH_ATTN_CUDA_SM90_FWD_EXP_SPLIT=0".
set -uo pipefail
OUT=${OUT:-$PWD/fwdsplit_out}
export OUT FLASH_ATTN_CUDA_KVCACHE=0 FLASH_ATTN_CUDA_BACKWARD=0 FLASH_ATTN_CUDA_HDIMS=${HDIMS:-64,256}
. "$(dirname "$0")/gpu_stage_lib.sh"
fa3_impls
D=-DFLASH_ATTN_CUDA_SM90_
UNITS=${UNITS:-"sm90_fwd_hdim64_bf16.o sm90_fwd_hdim256_bf16.o"} \
VARIANTS=${VARIANTS:-"all8:${D}FWD_EXP_SPLIT_DIMS=1 sprqk:${D}FWD_EXP_SPLIT_DIMS=1,${D}FWD_RESCALE_UNDER_QK=1 nt:${D}FWD256_NO_TURNS=1 ntsp:${D}FWD256_NO_TURNS=1,${D}FWD_EXP_SPLIT_DIMS=1,${D}FWD_RESCALE_UNDER_QK=1"} \
ORDER=${ORDER:-"base1:base all8:all8 sprqk:sprqk nt:nt ntsp:ntsp base2:base all8b:all8 ntspb:ntsp"} BENCH_TIMEOUT=${BENCH_TIMEOUT:-50} \
BENCH="flash_attn_cuda.bench --directions fwd --hdims ${HDIMS:-64,256} --seqlens ${SEQLENS:-1024,2048,8192} --causal both --impls $IMPLS --order abba" \
SMOKE="python3 scripts/sm90_persistent_smoke.py" \
TEST_VARIANT=${TEST_VARIANT-ntsp} TESTS="tests/test_sm90_persistent_gpu.py tests/test_attention_gpu.py" DEADLINE=${DEADLINE:-540} \
bash scripts/variants_gpu.sh
