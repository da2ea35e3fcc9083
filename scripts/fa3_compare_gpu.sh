#!/usr/bin/env bash
# One device call: FlashAttention-3 (scripts/fa3_ref, forward and backward) against ours and cuDNN in the
# same runs, on the extension already built in this tree (a warm machine after scripts/build_time_gpu.sh)
# or, if none is there, a build of the bf16 forward + backward at d = 64 / 128 / 256 (sm_90, sm90 family).
#   1. fwd d = 128 non-causal at q-block counts odd and even (seqlen 1920 / 2048, 3968 / 4096, 8064 / 8192):
#      FA3 runs its 128 x 176 tile in a cluster of 2 only when a sequence's 128-row query blocks are even
#      (hopper/flash_fwd_launch_template.h Use_cluster), so FA3 odd / even against ours odd / even is what
#      the cluster gives it.
#   2. bwd (forward, backward, fwd+bwd) at BWD_HDIMS x BWD_SEQLENS, causal both.
#   OUT=$OUT scripts/fa3_compare_gpu.sh      (carry [".whl", ".fa3"]; .fa3/libfa3ref.so built with the backward)
set -uo pipefail
. "$(dirname "$0")/gpu_stage_lib.sh"
gpu_setup fa3cmp
DEADLINE=${DEADLINE:-580}
export FLASH_ATTN_CUDA_BENCH_FA3_LIB=$PWD/.fa3/libfa3ref.so
[ -f "$FLASH_ATTN_CUDA_BENCH_FA3_LIB" ] || { echo "no $FLASH_ATTN_CUDA_BENCH_FA3_LIB (scripts/fa3_ref/build.sh)"; exit 1; }
if ! python3 -c "import flash_attn_cuda._C" 2> /dev/null; then
  export FLASH_ATTN_CUDA_ARCHS="90;90a" FLASH_ATTN_CUDA_HDIMS=64,128,256 FLASH_ATTN_CUDA_DTYPES=bf16 \
    FLASH_ATTN_CUDA_FEATURES=0 FLASH_ATTN_CUDA_KVCACHE=0 MAX_JOBS=16
  gpu_build 300
fi
nvidia-smi --query-gpu=name --format=csv,noheader
IMPLS=flash_attn_cuda,fa3_ref,sdpa_cudnn
if [ "${FWD:-1}" = 1 ]; then
  TAILN=0 stage fwd_cluster ${FWD_TIMEOUT:-150} python3 -m flash_attn_cuda.bench --directions fwd --hdims 128 \
    --seqlens ${FWD_SEQLENS:-1920,2048,3968,4096,8064,8192} --causal 0 --impls $IMPLS --order abba --out "$OUT/res" --prefix fa3_cluster
  grep -E "^\| " "$OUT/res/fa3_cluster.md" | head -20
fi
TAILN=0 stage bwd ${BWD_TIMEOUT:-400} python3 -m flash_attn_cuda.bench --directions bwd --hdims ${BWD_HDIMS:-128,64,256} \
  --seqlens ${BWD_SEQLENS:-2048,8192} --causal both --impls $IMPLS --order abba --out "$OUT/res" --prefix fa3_bwd
grep -E "^(#|\| )" "$OUT/res/fa3_bwd.md" | head -80
gpu_finish
