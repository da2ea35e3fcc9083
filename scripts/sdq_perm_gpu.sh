#!/usr/bin/env bash
# One device call: dQ's rows permuted so the consumers' dQ stores into sdQ meet no bank conflict
# (FLASH_ATTN_CUDA_SM90_BWD_DQ_ROW_PERM, csrc/sm90/bwd_traits.h; the default, mode 2, has it at d = 64 and 128) at
# d = 64 / 128, as compile-time variants of the sm90 backward units (scripts/bwd_fa3_options_gpu.sh), FA3
# (scripts/fa3_ref, where carried) and cuDNN in every run:
#   off: DQ_ROW_PERM=0 (neither head dim; d = 128 as before the twenty-eighth session)
#   all: DQ_ROW_PERM=1 (every head dim; d = 64 and 128 as the base since the thirtieth session)
#   aw:  all + FLASH_ATTN_CUDA_SM90_BWD_DQ_WARP_ARRIVE=1 (dq_full: one arrival per consumer warp, not per thread)
# Runs base / all / off / base / all / aw, backward and fwd+bwd at 2k / 8k, causal and not; then the sm90 backward
# tests on `all` and compute-sanitizer (memcheck, racecheck, synccheck) on it at d = 128 and 64.
#   OUT=$OUT scripts/sdq_perm_gpu.sh      (carry [".whl", ".fa3"]; about 7 minutes on an H100)
# The twenty-eighth session measured mode 1 against off at d = 128 (results/history/h100_dqperm28.md) with
#   HDIMS=128 VARIANTS="perm:-DFLASH_ATTN_CUDA_SM90_BWD_DQ_ROW_PERM=1" ORDER="base1:base perm:perm base2:base perm2:perm"
# and the base then off; the thirtieth session measured d = 64 (results/history/h100_dqperm64_30.md) with
#   HDIMS=64 ORDER="base1:base all:all base2:base all2:all aw:aw" (all, aw as below; the base then off at d = 64)
# (the twenty-seventh session's form of this call measured sdQ in 8-column blocks, removed).
D=-DFLASH_ATTN_CUDA_SM90_BWD_
OUT=${OUT:-$PWD/sdqperm_out} HDIMS=${HDIMS:-128,64} \
VARIANTS=${VARIANTS:-"off:${D}DQ_ROW_PERM=0 all:${D}DQ_ROW_PERM=1 aw:${D}DQ_ROW_PERM=1,${D}DQ_WARP_ARRIVE=1"} \
ORDER=${ORDER:-"base1:base all:all off:off base2:base all2:all aw:aw"} BENCH_TIMEOUT=${BENCH_TIMEOUT:-70} BENCH_ORDER=${BENCH_ORDER:-ab} \
TEST_VARIANT=${TEST_VARIANT-all} \
AFTER=${AFTER-"bash scripts/sanitize.sh scripts/sanitize_sm90_bwd.py 128 64"} \
DEADLINE=${DEADLINE:-560} exec bash "$(dirname "$0")/bwd_fa3_options_gpu.sh"
