#!/usr/bin/env bash
# One device call for the sm90 backward's deterministic mode (dq_turns.h): build d = 64/128/256 bf16
# (archs 90;90a), its tests (bit identity, routing, dropout), compute-sanitizer on a deterministic
# workload, the speed of deterministic vs default vs cuDNN in one run, and the plain backward's speed
# against the sources before the change (A/B: .ab_base/, a `git archive` of that commit, built d = 128
# only; bench B, A, B, each with cuDNN in the same run).
#   OUT=$OUT scripts/det_gpu.sh        (needs the nvidia-cutlass wheel in .whl/)
set -uo pipefail
. "$(dirname "$0")/gpu_stage_lib.sh"
gpu_setup det
export FLASH_ATTN_CUDA_ARCHS="90;90a" FLASH_ATTN_CUDA_HDIMS=${HDIMS:-64,128,256} FLASH_ATTN_CUDA_DTYPES=bf16 \
  FLASH_ATTN_CUDA_KVCACHE=0 FLASH_ATTN_CUDA_SMEM_TILES=0 MAX_JOBS=16 FLASH_ATTN_CUDA_PTXAS_VERBOSE=1
DEADLINE=${DEADLINE:-570}
gpu_build 240
TAILN=12 stage tests 120 python3 -m pytest -q --maxfail=5 -p no:cacheprovider -rfE tests/test_sm90_bwd_gpu.py \
  tests/test_dropout_gpu.py tests/test_backward_gpu.py -k "deterministic or sm90 or gradients"
stage san_race 40 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --error-exitcode 9 --tool racecheck python3 scripts/sanitize_sm90_bwd.py --deterministic 64 128
stage san_sync 30 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --error-exitcode 9 --tool synccheck python3 scripts/sanitize_sm90_bwd.py --deterministic 64 128
stage san_mem 30 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --error-exitcode 9 --tool memcheck python3 scripts/sanitize_sm90_bwd.py --deterministic
B_ARGS="--directions bwd --hdims 128 --seqlens 1024,4096,16384 --causal both --impls flash_attn_cuda,sdpa_cudnn"
stage bench_det 90 python3 -m flash_attn_cuda.bench --directions bwd --hdims 64,128 --seqlens 1024,4096,16384 --causal both \
  --impls flash_attn_cuda,flash_attn_cuda_deterministic,sdpa_cudnn --prefix h200_det --out "$OUT/res"
grep -E "^\|" "$OUT/bench_det.log" | grep -v -- "---" | head -16
stage bench_B1 45 python3 -m flash_attn_cuda.bench $B_ARGS --prefix h200_abB1 --out "$OUT/res"
( cd .ab_base && ln -sfn ../.whl .whl && FLASH_ATTN_CUDA_HDIMS=128 timeout 150 python3 setup.py build_ext --inplace > "$OUT/build_A.log" 2>&1; echo "build A rc=$?" )
( cd .ab_base && PYTHONPATH=$PWD stage bench_A 45 python3 -m flash_attn_cuda.bench $B_ARGS --prefix h200_abA --out "$OUT/res" )
stage bench_B2 45 python3 -m flash_attn_cuda.bench $B_ARGS --prefix h200_abB2 --out "$OUT/res"
for t in abB1 abA abB2; do echo "## $t"; grep -E "^\| 128" "$OUT/res/h200_${t}.md" 2>/dev/null | head -6; done
gpu_finish
