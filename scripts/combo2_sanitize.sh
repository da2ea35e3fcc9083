#!/usr/bin/env bash
# combo2's second device call: a d = 64 / 256 build (the new kernels: sm90 forward 3-warpgroup d = 64 tile,
# STSM epilogue, persistent forward; sm90 backward d = 256 role split, dropout variant at d = 64), the
# changed dropout test, then compute-sanitizer on each new kernel until the deadline. Logs: $OUT/logs.tgz.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-340}
OUT=${OUT:-$PWD/san_out}; L=/tmp/san_logs; mkdir -p "$OUT" "$L"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
rm -rf /tmp/cw && mkdir -p /tmp/cw
python3 -c "import zipfile,glob; zipfile.ZipFile(glob.glob('.whl/nvidia_cutlass-*.whl')[0]).extractall('/tmp/cw')"
export CUTLASS_DIR=/tmp/cw/cutlass_library/source
export FLASH_ATTN_CUDA_ARCHS="90;90a" FLASH_ATTN_CUDA_HDIMS=64,256 FLASH_ATTN_CUDA_DTYPES=bf16 \
  FLASH_ATTN_CUDA_KVCACHE=0 FLASH_ATTN_CUDA_SMEM_TILES=0 FLASH_ATTN_CUDA_SM90_PERSISTENT=1 MAX_JOBS=16
timeout -k 10 200 python3 setup.py build_ext --inplace > "$L/build.log" 2>&1; brc=$?
echo "build rc=$brc in $(( $(date +%s) - T0 )) s"
[ $brc -eq 0 ] || { grep error "$L/build.log" | head; tar -czf "$OUT/logs.tgz" -C /tmp san_logs; exit 1; }
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
maybe() {  # maybe NAME TIMEOUT CMD...
  local name=$1 t=$2; shift 2
  [ "$(left)" -lt "$t" ] && t=$(left)
  [ "$t" -lt 15 ] && { echo "== $name skipped (deadline)"; return; }
  local s0=$(date +%s)
  timeout -k 5 "$t" "$@" > "$L/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc ($(( $(date +%s) - s0 )) s) $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed|smoke:|sanitize_" "$L/$name.log" | tr '\n' ' ' | cut -c1-300)"
}
CS="env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --error-exitcode 9 --tool"
maybe test 60 python3 -m pytest -q -p no:cacheprovider tests/test_dropout_gpu.py -k "sm90_backward_with_dropout and not gqa"
maybe mem_fwd 50 $CS memcheck python3 scripts/sanitize_sm90_fwd.py
maybe mem_bwd256 50 $CS memcheck python3 scripts/sanitize_sm90_bwd.py 256
maybe mem_bwddrop 50 $CS memcheck python3 scripts/sanitize_sm90_bwd_dropout.py
maybe race_bwd256 50 $CS racecheck python3 scripts/sanitize_sm90_bwd.py 256
maybe race_bwddrop 50 $CS racecheck python3 scripts/sanitize_sm90_bwd_dropout.py
maybe race_fwd 50 $CS racecheck python3 scripts/sanitize_sm90_fwd.py
maybe mem_persist 50 $CS memcheck python3 scripts/sm90_persistent_smoke.py
maybe sync_bwd256 40 $CS synccheck python3 scripts/sanitize_sm90_bwd.py 256
maybe sync_bwddrop 40 $CS synccheck python3 scripts/sanitize_sm90_bwd_dropout.py
maybe sync_fwd 40 $CS synccheck python3 scripts/sanitize_sm90_fwd.py
tar -czf "$OUT/logs.tgz" -C /tmp san_logs
echo "total $(( $(date +%s) - T0 )) s"
