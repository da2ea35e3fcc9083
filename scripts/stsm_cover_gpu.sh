#!/usr/bin/env bash
# One device call: what the backward issues between its dS^T stores and their fence
# (FLASH_ATTN_CUDA_SM90_BWD_STSM_COVER, csrc/sm90/bwd_traits.h), as compile-time variants of the sm90 backward
# units (scripts/bwd_fa3_options_gpu.sh), FA3 (scripts/fa3_ref, where carried) and cuDNN in every run:
#   c1: STSM_COVER=1 (dV issued between the stores and the fence: FA3's order)
#   c2: STSM_COVER=2 (dK issued there; dQ last, waited before the hand-over, the next S^T after it)
# Runs base / c1 / c2 / base / c1 / c2, backward and fwd+bwd at 2k / 8k, causal and not (d = 128 unless HDIMS);
# then the sm90 backward tests on c1 and compute-sanitizer (memcheck, racecheck, synccheck) on it at d = 128.
#   OUT=$OUT scripts/stsm_cover_gpu.sh      (carry [".whl", ".fa3"]; about 8 minutes on an H100)
D=-DFLASH_ATTN_CUDA_SM90_BWD_
OUT=${OUT:-$PWD/stsmcover_out} HDIMS=${HDIMS:-128} \
VARIANTS=${VARIANTS:-"c1:${D}STSM_COVER=1 c2:${D}STSM_COVER=2"} \
ORDER=${ORDER:-"base1:base c1:c1 c2:c2 base2:base c1b:c1 c2b:c2"} BENCH_TIMEOUT=${BENCH_TIMEOUT:-60} \
BENCH_ORDER=${BENCH_ORDER:-ab} TEST_VARIANT=${TEST_VARIANT-c1} \
AFTER=${AFTER-"bash scripts/sanitize.sh scripts/sanitize_sm90_bwd.py 128"} \
DEADLINE=${DEADLINE:-560} exec bash "$(dirname "$0")/bwd_fa3_options_gpu.sh"
