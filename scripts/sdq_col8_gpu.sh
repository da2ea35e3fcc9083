#!/usr/bin/env bash
# One device call: sdQ in 8-column blocks (FLASH_ATTN_CUDA_SM90_BWD_SDQ_COL8=1, csrc/sm90/bwd_traits.h: no bank
# conflict on the consumers' dQ stores) against the default at d = 64 / 128, as compile-time variants of the
# sm90 backward units (scripts/bwd_fa3_options_gpu.sh), FA3 (scripts/fa3_ref, where carried) and cuDNN in every run:
# c8w adds FLASH_ATTN_CUDA_SM90_BWD_DQ_WARP_ARRIVE=1 (dq_full: one arrival per consumer warp, not per thread).
# Runs base / c8 / c8w / base / c8 / c8w, backward and fwd+bwd at 2k / 8k, causal and not; then the sm90 backward
# tests on c8w (both options) and, in the time left, compute-sanitizer (memcheck, racecheck, synccheck) on it.
#   OUT=$OUT scripts/sdq_col8_gpu.sh      (carry [".whl", ".fa3"]; about 9 minutes on an H100)
# A shorter call: HDIMS=128 ORDER="base1:base c8:c8 c8w:c8w base2:base" DEADLINE=380.
D=-DFLASH_ATTN_CUDA_SM90_BWD_
OUT=${OUT:-$PWD/sdqcol8_out} HDIMS=${HDIMS:-128,64} \
VARIANTS=${VARIANTS:-"c8:${D}SDQ_COL8=1 c8w:${D}SDQ_COL8=1,${D}DQ_WARP_ARRIVE=1"} \
ORDER=${ORDER:-"base1:base c8:c8 c8w:c8w base2:base c82:c8 c8w2:c8w"} BENCH_TIMEOUT=${BENCH_TIMEOUT:-70} BENCH_ORDER=${BENCH_ORDER:-ab} \
TEST_VARIANT=${TEST_VARIANT-c8w} AFTER=${AFTER-"bash scripts/sanitize.sh scripts/sanitize_sm90_bwd.py 128"} \
DEADLINE=${DEADLINE:-570} exec bash "$(dirname "$0")/bwd_fa3_options_gpu.sh"
