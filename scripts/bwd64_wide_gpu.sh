#!/usr/bin/env bash
# One device call: FA3's d = 64 backward tile, 128 query rows x 128 keys, for the causal and non-causal kernels
# without dropout (FLASH_ATTN_CUDA_SM90_BWD64_NC_BLOCK_M=128, FLASH_ATTN_CUDA_SM90_BWD64_C_BLOCK_M=128,
# csrc/sm90/bwd_tile_table.h; since the thirty-first session with P^T kept in fp32 and dQ's rows permuted) against
# the default 64-row tile, as compile-time variants of the unit sm90_bwd_hdim64_bf16 (scripts/bwd_fa3_options_gpu.sh),
# FA3 (scripts/fa3_ref, where carried) and cuDNN in every run: base / w / base / w, backward and fwd+bwd at
# 1k / 2k / 8k, causal and not; then the sm90 backward tests (deterministic bit-identity among them: those calls
# take the tile too) and compute-sanitizer (memcheck, racecheck, synccheck, plain and deterministic) on w.
#   OUT=$OUT scripts/bwd64_wide_gpu.sh      (carry [".whl", ".fa3"]; about 8 minutes on an H100)
D=-DFLASH_ATTN_CUDA_SM90_
OUT=${OUT:-$PWD/bwd64wide_out} HDIMS=64 SEQLENS=${SEQLENS:-1024,2048,8192} \
VARIANTS=${VARIANTS:-"w:${D}BWD64_NC_BLOCK_M=128,${D}BWD64_C_BLOCK_M=128"} \
ORDER=${ORDER:-"base1:base w:w base2:base w2:w"} BENCH_TIMEOUT=${BENCH_TIMEOUT:-80} BENCH_ORDER=${BENCH_ORDER:-ab} \
TEST_VARIANT=${TEST_VARIANT-w} AFTER_TIMEOUT=${AFTER_TIMEOUT:-200} \
AFTER=${AFTER-"bash scripts/sanitize.sh scripts/sanitize_sm90_bwd.py 64; bash scripts/sanitize.sh scripts/sanitize_sm90_bwd.py --deterministic 64"} \
DEADLINE=${DEADLINE:-560} exec bash "$(dirname "$0")/bwd_fa3_options_gpu.sh"
