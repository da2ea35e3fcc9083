#!/usr/bin/env bash
# One device call: issues 11 and 12's tables on the default kernels, FA3 (scripts/fa3_ref, where carried) and
# cuDNN in the same runs (A B B A). Builds the bf16 forward + backward at d = 64 / 128 / 256 (sm_90 and the sm90
# family; no KV cache, no features) unless this tree already has that build, then
#   fwd:  forward at 512 / 1k / 2k / 4k / 8k, causal and not (issue 11's grid);
#   bwd:  backward and fwd+bwd at 512 / 1k / 2k / 4k, causal and not (issue 12's grid; 8k with BWD_SEQLENS).
#   OUT=$OUT scripts/issue_tables_gpu.sh      (carry [".whl", ".fa3"]; about 9 minutes on an H200)
# Results: res/<gpu>_fwd<TAG>.md / _fwd.csv / .png and res/<gpu>_bwd<TAG>.md / ... (TAG default 27, <gpu> the
# benchmarks' name of the GPU that ran them: h200, h100_80gb_hbm3).
set -uo pipefail
. "$(dirname "$0")/gpu_stage_lib.sh"
gpu_setup tables
DEADLINE=${DEADLINE:-580}
fa3_impls
export FLASH_ATTN_CUDA_ARCHS="90;90a" FLASH_ATTN_CUDA_HDIMS=64,128,256 FLASH_ATTN_CUDA_DTYPES=bf16 \
  FLASH_ATTN_CUDA_BACKWARD=1 FLASH_ATTN_CUDA_FEATURES=0 FLASH_ATTN_CUDA_KVCACHE=0 FLASH_ATTN_CUDA_SMEM_TILES=0 \
  MAX_JOBS=16
gpu_build 300
SLUG=$(gpu_result_prefix)
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader) -> results ${SLUG}_*${TAG:-27}"
if [ "${FWD:-1}" = 1 ]; then
  TAILN=0 stage fwd ${FWD_TIMEOUT:-170} python3 -m flash_attn_cuda.bench --directions fwd --hdims 128,64,256 \
    --seqlens ${FWD_SEQLENS:-512,1024,2048,4096,8192} --causal both --impls "$IMPLS" --order abba \
    --prefix "${SLUG}_fwd${TAG:-27}" --out "$OUT/res"
  grep -E "^\| [0-9]" "$OUT/res/${SLUG}_fwd${TAG:-27}.md"
fi
TAILN=0 stage bwd ${BWD_TIMEOUT:-400} python3 -m flash_attn_cuda.bench --directions bwd --hdims 128,64,256 \
  --seqlens ${BWD_SEQLENS:-512,1024,2048,4096} --causal both --impls "$IMPLS" --order abba \
  --prefix "${SLUG}_bwd${TAG:-27}" --out "$OUT/res"
grep -E "^(#|\| [0-9])" "$OUT/res/${SLUG}_bwd${TAG:-27}.md"
gpu_finish
