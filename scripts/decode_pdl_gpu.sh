#!/usr/bin/env bash
# One device call for the decode kernel's programmatic dependent launch (FLASH_ATTN_CUDA_DECODE_PDL):
# build d = 128 bf16 (sm_90, forward + KV cache), the KV-cache GPU tests, compute-sanitizer on
# scripts/sanitize_kvcache.py, then bench_decode twice in one process lifetime each, PDL off and on,
# each with cuDNN in the same run (ratios hold across runs, absolute times may not). Logs in $OUT.
#   OUT=$OUT scripts/decode_pdl_gpu.sh        (needs the nvidia-cutlass wheel in .whl/)
set -uo pipefail
T0=$(date +%s)
OUT=${OUT:-$PWD/decode_out}; mkdir -p "$OUT" "$OUT/res"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
if [ ! -d /tmp/cw/cutlass_library ]; then
  rm -rf /tmp/cw && mkdir -p /tmp/cw
  python3 -c "import zipfile,glob; zipfile.ZipFile(glob.glob('.whl/nvidia_cutlass-*.whl')[0]).extractall('/tmp/cw')"
fi
export CUTLASS_DIR=/tmp/cw/cutlass_library/source
export FLASH_ATTN_CUDA_ARCHS="90" FLASH_ATTN_CUDA_HDIMS=${HDIMS:-128} FLASH_ATTN_CUDA_DTYPES=bf16 \
  FLASH_ATTN_CUDA_BACKWARD=0 FLASH_ATTN_CUDA_SMEM_TILES=0 MAX_JOBS=16
so=$(ls flash_attn_cuda/_C*.so 2>/dev/null | head -1)
if [ -z "$so" ] || [ -n "$(find csrc setup.py tools -newer "$so" -type f | grep -v instantiations | head -1)" ]; then
  t0=$(date +%s)
  timeout -k 10 ${BUILD_TIMEOUT:-240} python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1; brc=$?
  echo "build rc=$brc in $(( $(date +%s) - t0 )) s"
  [ $brc -eq 0 ] || { grep -E "error" "$OUT/build.log" | head -20; tail -20 "$OUT/build.log"; exit 1; }
fi
DEADLINE=${DEADLINE:-570}
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
stage() {  # stage NAME TIMEOUT CMD...
  local name=$1 t=$2; shift 2
  if [ "$(left)" -lt "$t" ]; then t=$(left); fi
  if [ "$t" -lt 15 ]; then echo "== $name skipped (deadline)"; return 99; fi
  local s0=$(date +%s)
  timeout -k 5 "$t" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc ($(( $(date +%s) - s0 )) s)"
  grep -E "^(FAILED|ERROR)|passed|failed|SUMMARY|Error|error|mismatch" "$OUT/$name.log" | tail -${TAILN:-8}
  return $rc
}
ARGS="--heads 32:8,32:32 --batches 1,8,32,64 --seqlens 4096,32768,131072 --impls flash_attn_cuda,sdpa_cudnn --layouts contiguous,paged16 --max-kv-gb 8"
stage bench_pdl0 120 env FLASH_ATTN_CUDA_DECODE_PDL=0 python3 -m flash_attn_cuda.bench_decode $ARGS --prefix h200_pdl0 --out "$OUT/res"
stage bench_pdl1 120 env FLASH_ATTN_CUDA_DECODE_PDL=1 python3 -m flash_attn_cuda.bench_decode $ARGS --prefix h200_pdl1 --out "$OUT/res"
TAILN=12 stage tests 150 python3 -m pytest -q --maxfail=5 -p no:cacheprovider -rfE tests/test_kvcache_gpu.py
stage san_mem 60 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --error-exitcode 9 --tool memcheck python3 scripts/sanitize_kvcache.py
stage san_race 60 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --error-exitcode 9 --tool racecheck python3 scripts/sanitize_kvcache.py
for t in pdl0 pdl1; do echo "## $t"; grep -E "^\|" "$OUT/res/h200_${t}_decode.md" 2>/dev/null | grep -v -- "---"; done
tar -czf "$OUT/logs.tgz" -C "$OUT" --exclude logs.tgz . 2>/dev/null
rm -rf "$OUT"/*.log "$OUT/res"
echo "total $(( $(date +%s) - T0 )) s"
