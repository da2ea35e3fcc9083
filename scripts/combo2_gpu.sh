#!/usr/bin/env bash
# One device call for the merged branches (combo2): build d64/128(/256) bf16 with the persistent sm90
# forward, then each stage under timeout; logs in $OUT.
set -uo pipefail
T0=$(date +%s)
OUT=${OUT:-$PWD/combo2_out}; mkdir -p "$OUT" "$OUT/res"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
rm -rf /tmp/cw && mkdir -p /tmp/cw
python3 -c "import zipfile,glob; zipfile.ZipFile(glob.glob('.whl/nvidia_cutlass-*.whl')[0]).extractall('/tmp/cw')"
export CUTLASS_DIR=/tmp/cw/cutlass_library/source
export FLASH_ATTN_CUDA_ARCHS="90;90a" FLASH_ATTN_CUDA_HDIMS=${HDIMS:-64,128,256} FLASH_ATTN_CUDA_DTYPES=bf16 \
  FLASH_ATTN_CUDA_KVCACHE=0 FLASH_ATTN_CUDA_SMEM_TILES=0 FLASH_ATTN_CUDA_SM90_PERSISTENT=1 MAX_JOBS=16 \
  FLASH_ATTN_CUDA_PTXAS_VERBOSE=1
t0=$(date +%s)
timeout -k 10 ${BUILD_TIMEOUT:-240} python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1; brc=$?
echo "build rc=$brc in $(( $(date +%s) - t0 )) s"
[ $brc -eq 0 ] || { grep -E "error" "$OUT/build.log" | head -20; tail -20 "$OUT/build.log"; exit 1; }
python3 tools/check_sass.py --log "$OUT/build.log" build/temp*/csrc/instantiations/sm90_*.o 2>&1 | tail -3
grep -B1 -A2 "Function properties for .*sm90" "$OUT/build.log" | grep -E "spill" | sort | uniq -c | sort -rn | head -5
stage() {  # stage NAME TIMEOUT CMD...: runs CMD under timeout, output in $OUT/NAME.log, prints its tail
  local name=$1 t=$2; shift 2
  local s0=$(date +%s)
  timeout -k 5 "$t" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc ($(( $(date +%s) - s0 )) s)"
  grep -E "^(FAILED|ERROR)|passed|failed|SUMMARY|rc=|smoke|Error|error" "$OUT/$name.log" | grep -v "^$" | tail -${TAILN:-8}
  return $rc
}
T0=${T0:-$(date +%s)}
DEADLINE=${DEADLINE:-570}
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
maybe() {  # maybe NAME TIMEOUT CMD...: the stage if the deadline leaves room for its timeout
  local t=$2
  if [ "$(left)" -lt "$t" ]; then t=$(left); fi
  if [ "$t" -lt 15 ]; then echo "== $1 skipped (deadline)"; return 99; fi
  stage "$1" "$t" "${@:3}"
}
san() {  # san TOOL SCRIPT ARGS...: compute-sanitizer on a script
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool "$1" --error-exitcode 9 python3 "${@:2}"
}
TAILN=12 maybe smoke 60 python3 scripts/sm90_persistent_smoke.py
maybe tests 170 python3 -m pytest -q --maxfail=5 -p no:cacheprovider -rfE tests/test_sm90_bwd_gpu.py tests/test_sm90_persistent_gpu.py \
  tests/test_dropout_gpu.py "tests/test_attention_gpu.py::test_query_tile_edges" ${EXTRA_TESTS:-}
maybe bench_fwd 70 python3 -m flash_attn_cuda.bench --directions fwd --hdims 64,128 --seqlens 1024,4096,16384 --causal both \
  --impls flash_attn_cuda_sm90,flash_attn_cuda_sm90_persistent,sdpa_cudnn --prefix h200_fwd_combo2 --out "$OUT/res"
grep -E "^\|" "$OUT/bench_fwd.log" | head -24
maybe bench_drop 70 python3 -m flash_attn_cuda.bench --directions bwd --hdims 64,128,256 --seqlens 1024,4096 --causal 0 \
  --dropout 0.1 --impls flash_attn_cuda,flash_attn_cuda_sm80,sdpa_flash --prefix h200_dropout_combo2 --out "$OUT/res"
grep -E "^\|" "$OUT/bench_drop.log" | head -24
maybe bench_bwd256 60 python3 -m flash_attn_cuda.bench --directions bwd --hdims 256 --seqlens 1024,4096,16384 --causal both \
  --impls flash_attn_cuda_sm80,flash_attn_cuda_sm90,sdpa_cudnn --prefix h200_bwd256 --out "$OUT/res"
grep -E "^\|" "$OUT/bench_bwd256.log" | head -24
maybe san_bwd256_mem 45 san memcheck scripts/sanitize_sm90_bwd.py 256
maybe san_bwddrop_mem 45 san memcheck scripts/sanitize_sm90_bwd_dropout.py
maybe san_fwd_mem 45 san memcheck scripts/sanitize_sm90_fwd.py
maybe san_bwd256_race 50 san racecheck scripts/sanitize_sm90_bwd.py 256
maybe san_bwddrop_race 50 san racecheck scripts/sanitize_sm90_bwd_dropout.py
maybe san_fwd_race 50 san racecheck scripts/sanitize_sm90_fwd.py
${EXTRA_STAGES:-true}
tar -czf "$OUT/res.tgz" -C "$OUT" res && rm -rf "$OUT/res"
echo "total $(( $(date +%s) - T0 )) s"
