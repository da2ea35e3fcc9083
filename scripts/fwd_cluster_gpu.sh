#!/usr/bin/env bash
# One device call: FA3's d = 128 non-causal forward configuration, piece by piece, as compile-time variants
# of the sm90 d = 128 unit (scripts/variants_gpu.sh), with FA3 (scripts/fa3_ref) and cuDNN in every run:
#   clu:  FLASH_ATTN_CUDA_SM90_FWD128_CLUSTER=2 (fwd_persistent.h kClusterM: K / V multicast to a CTA pair)
#   c176: the cluster with the 128 x 176 tile (FLASH_ATTN_CUDA_SM90_FWD128_NC_BLOCK_N=176), FA3's own
#   hint: FLASH_ATTN_CUDA_SM90_FWD_CACHE_HINTS=1 (K / V evict-last, Q evict-first, as FA3)
# Runs base / clu / c176 / hint / base / clu at 2048 / 8064 / 8192 (FA3 clusters 8192's 64 query tiles, not
# 8064's 63: its own odd / even difference in the same runs). Then the sm90 forward tests and
# compute-sanitizer (memcheck, racecheck, synccheck: ragged shapes, a cluster's second tile past seqlen_q)
# on clu.
#   OUT=$OUT scripts/fwd_cluster_gpu.sh     (carry [".whl", ".fa3"]; .fa3/libfa3ref.so from scripts/fa3_ref/build.sh)
#   TEST_VARIANT= DEADLINE=380: without the pytest stage (smoke and sanitizer only; about 7.5 minutes)
set -uo pipefail
OUT=${OUT:-$PWD/fwdclu_out}
export OUT FLASH_ATTN_CUDA_KVCACHE=0
. "$(dirname "$0")/gpu_stage_lib.sh"
fa3_impls
D=-DFLASH_ATTN_CUDA_SM90_
UNITS="sm90_fwd_hdim128_bf16.o" \
VARIANTS="clu:${D}FWD128_CLUSTER=2 c176:${D}FWD128_CLUSTER=2,${D}FWD128_NC_BLOCK_N=176 hint:${D}FWD_CACHE_HINTS=1" \
ORDER=${ORDER:-"base1:base clu:clu c176:c176 hint:hint base2:base clu2:clu"} BENCH_TIMEOUT=${BENCH_TIMEOUT:-60} \
BENCH="flash_attn_cuda.bench --directions fwd --hdims 128 --seqlens ${SEQLENS:-2048,8064,8192} --causal 0 --impls $IMPLS --order abba" \
SMOKE="python3 scripts/sm90_persistent_smoke.py" TEST_VARIANT=${TEST_VARIANT-clu} TESTS="tests/test_attention_gpu.py tests/test_sm90_persistent_gpu.py -k sm90" \
DEADLINE=${DEADLINE:-470} bash scripts/variants_gpu.sh
if [ -d /tmp/v_clu/flash_attn_cuda ]; then
  mkdir -p "$OUT/san"
  ( cd /tmp/v_clu && OUT=$OUT/san timeout -k 5 ${SANITIZE_TIMEOUT:-100} bash scripts/sanitize.sh scripts/sanitize_sm90_fwd.py --hdims 128 )
  echo "sanitize rc=$?"
fi
