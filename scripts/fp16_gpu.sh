#!/usr/bin/env bash
# One device call: the sm90 backward in fp16 (its default is bf16 only until this runs), plus the
# decode checks that fit the same fp16 build. Builds d = 64/128/256 fp16 (archs 90;90a, KV cache on),
# then: the sm90 backward's GPU tests (FLASH_ATTN_CUDA_FAMILY=sm90, fp16), its dropout tests,
# racecheck + synccheck of the fp16 sm90 backward, the dependent-chain PDL test of the KV cache,
# fp16 fwd/bwd speed (sm90, sm80, cuDNN in one run), decode on a head-major cache vs flash-attn's.
#   OUT=$OUT scripts/fp16_gpu.sh        (needs the nvidia-cutlass wheel in .whl/)
set -uo pipefail
T0=$(date +%s)
OUT=${OUT:-$PWD/fp16_out}; mkdir -p "$OUT" "$OUT/res"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
if [ ! -d /tmp/cw/cutlass_library ]; then
  rm -rf /tmp/cw && mkdir -p /tmp/cw
  python3 -c "import zipfile,glob; zipfile.ZipFile(glob.glob('.whl/nvidia_cutlass-*.whl')[0]).extractall('/tmp/cw')"
fi
export CUTLASS_DIR=/tmp/cw/cutlass_library/source
export FLASH_ATTN_CUDA_ARCHS="90;90a" FLASH_ATTN_CUDA_HDIMS=${HDIMS:-64,128,256} FLASH_ATTN_CUDA_DTYPES=fp16 \
  FLASH_ATTN_CUDA_SMEM_TILES=0 MAX_JOBS=16 FLASH_ATTN_CUDA_PTXAS_VERBOSE=1
so=$(ls flash_attn_cuda/_C*.so 2>/dev/null | head -1)
if [ -z "$so" ] || [ -n "$(find csrc setup.py tools -newer "$so" -type f | grep -v instantiations | head -1)" ]; then
  t0=$(date +%s)
  timeout -k 10 ${BUILD_TIMEOUT:-300} python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1; brc=$?
  echo "build rc=$brc in $(( $(date +%s) - t0 )) s"
  [ $brc -eq 0 ] || { grep -E "error" "$OUT/build.log" | head -20; tail -20 "$OUT/build.log"; exit 1; }
  python3 tools/check_sass.py --log "$OUT/build.log" build/temp*/csrc/instantiations/sm90_*.o 2>&1 | tail -2
  grep -A2 "Function properties for .*sm90" "$OUT/build.log" | grep -E "spill" | sort | uniq -c | sort -rn | head -4
fi
DEADLINE=${DEADLINE:-575}
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
stage() {  # stage NAME TIMEOUT CMD...
  local name=$1 t=$2; shift 2
  if [ "$(left)" -lt "$t" ]; then t=$(left); fi
  if [ "$t" -lt 15 ]; then echo "== $name skipped (deadline)"; return 99; fi
  local s0=$(date +%s)
  timeout -k 5 "$t" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc ($(( $(date +%s) - s0 )) s)"
  grep -E "^(FAILED|ERROR)|passed|failed|SUMMARY|Error|error|^sanitize|mismatch" "$OUT/$name.log" | tail -${TAILN:-8}
  return $rc
}
TAILN=12 stage tests_bwd 100 python3 -m pytest -q --maxfail=5 -p no:cacheprovider -rfE tests/test_sm90_bwd_gpu.py
TAILN=12 stage tests_kv 40 python3 -m pytest -q --maxfail=3 -p no:cacheprovider -rfE tests/test_kvcache_gpu.py -k "dependent_chain or graph"
stage san_race 50 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --error-exitcode 9 --tool racecheck python3 scripts/sanitize_sm90_bwd.py 64 128
stage san_sync 40 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --error-exitcode 9 --tool synccheck python3 scripts/sanitize_sm90_bwd.py
stage bench_bwd 110 python3 -m flash_attn_cuda.bench --dtype fp16 --directions fwd,bwd --hdims 64,128,256 --seqlens 1024,4096,16384 \
  --causal 0 --impls flash_attn_cuda_sm90,flash_attn_cuda_sm80,sdpa_cudnn --prefix h200_fp16 --out "$OUT/res"
grep -E "^\|" "$OUT/bench_bwd.log" | grep -v -- "---" | head -30
stage bench_dec 60 python3 -m flash_attn_cuda.bench_decode --dtype fp16 --heads 32:8 --batches 1,8,64 --seqlens 4096,32768 \
  --impls flash_attn_cuda,sdpa_cudnn --layouts contiguous,headmajor --max-kv-gb 8 --prefix h200_headmajor --out "$OUT/res"
grep -E "^\|" "$OUT/res/h200_headmajor_decode.md" 2>/dev/null | grep -v -- "---"
TAILN=12 stage tests_drop 80 python3 -m pytest -q --maxfail=5 -p no:cacheprovider -rfE tests/test_dropout_gpu.py -k sm90_backward
tar -czf "$OUT/logs.tgz" -C "$OUT" --exclude logs.tgz . 2>/dev/null
rm -rf "$OUT"/*.log "$OUT/res"
echo "total $(( $(date +%s) - T0 )) s"
