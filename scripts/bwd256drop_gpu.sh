#!/usr/bin/env bash
# One device call for branch bwd256drop (the sm90 backward's dropout variant at d = 256, the role-split
# tile): build d = 256 bf16 (archs 90;90a, feature kernels on), check the sm90 objects' SASS, then each
# stage under timeout against a 570 s deadline; logs in $OUT. From the repository root:
#   OUT=$OUT scripts/bwd256drop_gpu.sh
set -uo pipefail
T0=$(date +%s)
OUT=${OUT:-$PWD/bwd256drop_out}; mkdir -p "$OUT" "$OUT/res"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
rm -rf /tmp/cw && mkdir -p /tmp/cw
python3 -c "import zipfile,glob; zipfile.ZipFile(glob.glob('.whl/nvidia_cutlass-*.whl')[0]).extractall('/tmp/cw')"
export CUTLASS_DIR=/tmp/cw/cutlass_library/source
export FLASH_ATTN_CUDA_ARCHS="90;90a" FLASH_ATTN_CUDA_HDIMS=256 FLASH_ATTN_CUDA_DTYPES=bf16 \
  FLASH_ATTN_CUDA_KVCACHE=0 FLASH_ATTN_CUDA_SMEM_TILES=0 MAX_JOBS=16 FLASH_ATTN_CUDA_PTXAS_VERBOSE=1
t0=$(date +%s)
timeout -k 10 ${BUILD_TIMEOUT:-240} python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1; brc=$?
echo "build rc=$brc in $(( $(date +%s) - t0 )) s"
[ $brc -eq 0 ] || { grep -E "error" "$OUT/build.log" | head -20; tail -20 "$OUT/build.log"; exit 1; }
python3 tools/check_sass.py --log "$OUT/build.log" build/temp*/csrc/instantiations/sm90_*.o 2>&1 | tail -3
grep -B1 -A2 "Function properties for .*sm90" "$OUT/build.log" | grep -E "spill" | sort | uniq -c | sort -rn | head -5
DEADLINE=${DEADLINE:-570}
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
stage() {  # stage NAME TIMEOUT CMD...: CMD under timeout (cut to the deadline), output in $OUT/NAME.log, its tail
  local name=$1 t=$2; shift 2
  if [ "$(left)" -lt "$t" ]; then t=$(left); fi
  if [ "$t" -lt 15 ]; then echo "== $name skipped (deadline)"; return 99; fi
  local s0=$(date +%s)
  timeout -k 5 "$t" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc ($(( $(date +%s) - s0 )) s)"
  grep -E "^(FAILED|ERROR)|passed|failed|SUMMARY|Error|error|^sanitize" "$OUT/$name.log" | tail -${TAILN:-8}
  return $rc
}
san() {  # san TOOL SCRIPT ARGS...: compute-sanitizer on a script
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool "$1" --error-exitcode 9 python3 "${@:2}"
}
# Tests: the sm90 dropout backward at d = 256 (test_sm90_backward_*: SM90_BWD_HDIMS from the build).
TAILN=12 stage tests 90 python3 -m pytest -q --maxfail=5 -p no:cacheprovider -rfE tests/test_dropout_gpu.py \
  -k sm90_backward
# Speed: dropout p = 0.1 against SDPA flash with the same dropout and the sm80 dropout backward; the plain
# sm90 backward in the same run for the ratio.
stage bench_drop 90 python3 -m flash_attn_cuda.bench --directions fwd,bwd --hdims 256 --seqlens 1024,4096 --causal 0 \
  --dropout 0.1 --impls flash_attn_cuda_sm90,flash_attn_cuda_sm80,sdpa_flash --prefix h200_bwd256drop --out "$OUT/res"
grep -E "^\|" "$OUT/bench_drop.log" | head -30
stage bench_plain 45 python3 -m flash_attn_cuda.bench --directions bwd --hdims 256 --seqlens 1024,4096 --causal 0 \
  --impls flash_attn_cuda_sm90 --prefix h200_bwd256drop_plain --out "$OUT/res"
grep -E "^\|" "$OUT/bench_plain.log" | head -12
# Sanitizers on the d = 256 dropout workload; synccheck of the plain d = 256 tile too (its __syncwarp()
# fix, ae7ebd3, has not run: params.h kSm90BwdHdim256ByDefault waits on it).
stage san_drop_sync 50 san synccheck scripts/sanitize_sm90_bwd_dropout.py 256
stage san_drop_race 60 san racecheck scripts/sanitize_sm90_bwd_dropout.py 256
stage san_plain_sync 50 san synccheck scripts/sanitize_sm90_bwd.py 256
stage san_drop_mem 50 san memcheck scripts/sanitize_sm90_bwd_dropout.py 256
# Whatever time is left: the whole dropout file at d = 256 (sm80 and sm90 forward paths too).
TAILN=12 stage tests_all 170 python3 -m pytest -q --maxfail=5 -p no:cacheprovider -rfE tests/test_dropout_gpu.py
tar -czf "$OUT/res.tgz" -C "$OUT" res && rm -rf "$OUT/res"
echo "total $(( $(date +%s) - T0 )) s"
