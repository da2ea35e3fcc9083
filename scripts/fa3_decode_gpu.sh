#!/usr/bin/env bash
# One device call (an H200: the issue targets are H200 numbers) for the questions that decide the next work
# when device time is scarce, in the order of what they decide:
#   1. FA3's d = 128 non-causal forward at odd / even query-block counts (scripts/fa3_compare_gpu.sh step 1:
#      what FA3's cluster of 2 gives it), ours and cuDNN in the same runs;
#   2. FA3's backward against ours and cuDNN, d = 128 at 2k / 8k, causal both (whether issue 12's
#      fwd+bwd >= 1.05x cuDNN is reached by FA3 itself on this stack);
#   3. issue 10's decode grid with the wide tile's rule (GQA 32/8, MHA 32/32, batch 1-64 x 4k-128k,
#      contiguous and paged 16, cuDNN in the run);
#   4. tests/test_kvcache_gpu.py (the new test_decode_tiles_with_options) until the deadline.
# One build for all: sm_90 + sm_90a, d = 128 bf16, forward + backward + KV cache (about 2 minutes on 16 cores).
#   OUT=$OUT scripts/fa3_decode_gpu.sh      (carry [".whl", ".fa3"]; .fa3/libfa3ref.so with the backward)
set -uo pipefail
. "$(dirname "$0")/gpu_stage_lib.sh"
gpu_setup fa3dec
DEADLINE=${DEADLINE:-585}
export FLASH_ATTN_CUDA_ARCHS="90;90a" FLASH_ATTN_CUDA_HDIMS=128 FLASH_ATTN_CUDA_DTYPES=bf16 \
  FLASH_ATTN_CUDA_FEATURES=0 FLASH_ATTN_CUDA_SMEM_TILES=0 MAX_JOBS=16
gpu_build 240
fa3_impls
nvidia-smi --query-gpu=name --format=csv,noheader
TAILN=0 stage fwd_cluster ${FWD_TIMEOUT:-100} python3 -m flash_attn_cuda.bench --directions fwd --hdims 128 \
  --seqlens ${FWD_SEQLENS:-1920,2048,3968,4096,8064,8192} --causal 0 --impls $IMPLS --order abba --out "$OUT/res" \
  --prefix fa3_cluster
grep -E "^\| " "$OUT/res/fa3_cluster.md" | head -12
TAILN=0 stage bwd ${BWD_TIMEOUT:-140} python3 -m flash_attn_cuda.bench --directions bwd --hdims 128 \
  --seqlens ${BWD_SEQLENS:-2048,8192} --causal both --impls $IMPLS --order abba --out "$OUT/res" --prefix fa3_bwd
grep -E "^(#|\| )" "$OUT/res/fa3_bwd.md" | head -40
TAILN=0 stage decode ${DECODE_TIMEOUT:-100} python3 -m flash_attn_cuda.bench_decode --heads 32:8,32:32 \
  --batches ${DECODE_BATCHES:-1,8,32,64} --seqlens ${DECODE_SEQLENS:-4k,32k,128k} --impls flash_attn_cuda,sdpa_cudnn \
  --layouts contiguous,paged16 --prefix dec24 --out "$OUT/res"
grep -E "^\| [0-9]" "$OUT/res/dec24_decode.md" | cut -c1-300
TAILN=6 stage tests 200 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_kvcache_gpu.py
gpu_finish
