#!/usr/bin/env bash
# One device call: the dQ rows permuted so the consumers' dQ stores into sdQ meet no bank conflict
# (FLASH_ATTN_CUDA_SM90_BWD_DQ_ROW_PERM=1, csrc/sm90/bwd_traits.h) against the default at d = 64 / 128, as
# compile-time variants of the sm90 backward units (scripts/bwd_fa3_options_gpu.sh), FA3 (scripts/fa3_ref, where
# carried) and cuDNN in every run: pw adds FLASH_ATTN_CUDA_SM90_BWD_DQ_WARP_ARRIVE=1 (dq_full: one arrival per
# consumer warp, not per thread). Runs base / perm / pw / base / perm, backward and fwd+bwd at 2k / 8k, causal and
# not; then the sm90 backward tests on perm and compute-sanitizer (memcheck, racecheck, synccheck) on it at d = 128
# and 64.
#   OUT=$OUT scripts/sdq_perm_gpu.sh      (carry [".whl", ".fa3"]; about 6 minutes on an H100)
# The twenty-seventh session's form of this call measured sdQ in 8-column blocks (SDQ_COL8, removed: bwd_traits.h).
D=-DFLASH_ATTN_CUDA_SM90_BWD_
OUT=${OUT:-$PWD/sdqperm_out} HDIMS=${HDIMS:-128,64} \
VARIANTS=${VARIANTS:-"perm:${D}DQ_ROW_PERM=1 pw:${D}DQ_ROW_PERM=1,${D}DQ_WARP_ARRIVE=1"} \
ORDER=${ORDER:-"base1:base perm:perm pw:pw base2:base perm2:perm"} BENCH_TIMEOUT=${BENCH_TIMEOUT:-70} BENCH_ORDER=${BENCH_ORDER:-ab} \
TEST_VARIANT=${TEST_VARIANT-perm} \
AFTER=${AFTER-"bash scripts/sanitize.sh scripts/sanitize_sm90_bwd.py 128 64"} \
DEADLINE=${DEADLINE:-540} exec bash "$(dirname "$0")/bwd_fa3_options_gpu.sh"
