#!/usr/bin/env bash
# One device call: the sm90 d = 128 backward's options taken from FA3's loop (csrc/sm90/bwd_mainloop.h,
# bwd_tma.h; benchmarks/NOTES.md "Twenty-fourth session"), as compile-time variants of the unit
# sm90_bwd_hdim128_bf16 (scripts/variants_gpu.sh), FA3 (scripts/fa3_ref) and cuDNN in every run:
#   se1:  FLASH_ATTN_CUDA_SM90_BWD_STATS_EARLY=1 (causal: LSE into registers before the S^T wait)
#   sp8:  FLASH_ATTN_CUDA_SM90_BWD_EXP_SPLIT=8 (16 of 32 exp2 before the dP^T wait, as FA3's 14)
#   both: the two together
#   bh:   FLASH_ATTN_CUDA_SM90_BWD_CACHE_HINTS=1 (Q / dO evict-last, as FA3)
# Runs base / se1 / sp8 / both / bh / base, backward (and fwd+bwd) at 2k / 8k, causal and not; then the sm90
# backward tests on `both`.
#   OUT=$OUT scripts/bwd_fa3_options_gpu.sh     (carry [".whl", ".fa3"]; about 8 minutes on an H100)
# Other options of the same unit: VARIANTS, ORDER and TEST_VARIANT, e.g. the dQ writer's early ticket:
#   VARIANTS="te:-DFLASH_ATTN_CUDA_SM90_BWD_TICKET_EARLY=1" ORDER="base1:base te:te base2:base te2:te" TEST_VARIANT=te
# HDIMS (default 128): the head dims built, recompiled (sm90_bwd_hdim<d>_bf16) and benchmarked; AFTER (variants_gpu.sh)
# runs in the tested variant's copy after its tests.
set -uo pipefail
OUT=${OUT:-$PWD/bwdfa3_out}
HDIMS=${HDIMS:-128}
export OUT FLASH_ATTN_CUDA_HDIMS=$HDIMS FLASH_ATTN_CUDA_KVCACHE=0 FLASH_ATTN_CUDA_BACKWARD=1
. "$(dirname "$0")/gpu_stage_lib.sh"
fa3_impls
D=-DFLASH_ATTN_CUDA_SM90_
UNITS=$(for d in ${HDIMS//,/ }; do printf "sm90_bwd_hdim%s_bf16.o " "$d"; done) \
VARIANTS=${VARIANTS:-"se1:${D}BWD_STATS_EARLY=1 sp8:${D}BWD_EXP_SPLIT=8 both:${D}BWD_STATS_EARLY=1,${D}BWD_EXP_SPLIT=8 bh:${D}BWD_CACHE_HINTS=1"} \
ORDER=${ORDER:-"base1:base se1:se1 sp8:sp8 both:both bh:bh base2:base"} BENCH_TIMEOUT=${BENCH_TIMEOUT:-50} \
BENCH="flash_attn_cuda.bench --directions bwd --hdims $HDIMS --seqlens ${SEQLENS:-2048,8192} --causal both --impls $IMPLS --order ${BENCH_ORDER:-abba}" \
TEST_VARIANT=${TEST_VARIANT-both} TESTS=${TESTS:-tests/test_sm90_bwd_gpu.py} DEADLINE=${DEADLINE:-540} bash scripts/variants_gpu.sh
