#!/usr/bin/env bash
# One device call: what the d = 128 forward's PV-wait split (FLASH_ATTN_CUDA_SM90_FWD_EXP_SPLIT, default 8 since
# the twenty-fifth session) still owes: compute-sanitizer memcheck / racecheck / synccheck on it (ragged shapes,
# scripts/sanitize_sm90_fwd.py), the fp16 unit's tests (its split was compiled, never run), and the fp16 unit's
# speed against the same unit without the split (sp0), cuDNN in every run.
#   OUT=$OUT scripts/split_check_gpu.sh       (carry [".whl"]; about 8 minutes on an H100)
set -uo pipefail
OUT=${OUT:-$PWD/split_check_out}
export OUT FLASH_ATTN_CUDA_KVCACHE=0 FLASH_ATTN_CUDA_BACKWARD=0 FLASH_ATTN_CUDA_FEATURES=0 FLASH_ATTN_CUDA_HDIMS=128 \
  FLASH_ATTN_CUDA_DTYPES=fp16,bf16
UNITS=sm90_fwd_hdim128_fp16.o VARIANTS="sp0:-DFLASH_ATTN_CUDA_SM90_FWD_EXP_SPLIT=0" \
ORDER="base1:base sp0:sp0 base2:base" BENCH_TIMEOUT=45 DEADLINE=${VDEADLINE:-330} \
BENCH="flash_attn_cuda.bench --dtype fp16 --directions fwd --hdims 128 --seqlens 2048,8192 --causal both --impls flash_attn_cuda,sdpa_cudnn --order ab" \
bash scripts/variants_gpu.sh
mkdir -p "$OUT/san"
OUT=$OUT/san timeout -k 5 ${SAN_TIMEOUT:-150} bash scripts/sanitize.sh scripts/sanitize_sm90_fwd.py --hdims 128
echo "sanitize rc=$?"
PYTHONPATH=$PWD timeout -k 5 ${TEST_TIMEOUT:-100} python3 -m pytest -q -p no:cacheprovider -rfE -x \
  tests/test_sm90_persistent_gpu.py tests/test_attention_gpu.py -k "float16 and not bfloat16" > "$OUT/tests_fp16.log" 2>&1
echo "tests fp16 rc=$?: $(tail -1 "$OUT/tests_fp16.log")"
