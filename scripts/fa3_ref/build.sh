#!/usr/bin/env bash
# Builds FlashAttention-3's sm90 forward and backward (bf16, d = 64 / 128 / 256, dv = d; non-split,
# non-paged, no softcap / PackGQA / varlen / local) and our ctypes entry points (fa3_ref.cu) into one
# torch-free shared library with the CUDA runtime linked statically (needs only libcuda.so at run time).
#   scripts/fa3_ref/build.sh FA3_HOPPER_DIR CUTLASS_INCLUDE OUT.so
# FA3_HOPPER_DIR: a checkout's hopper/ directory (not part of this repository); CUTLASS_INCLUDE: the
# CUTLASS include dir (the 4.2 wheel's, or FA3's csrc/cutlass/include). JOBS nvccs at a time (default 1;
# a forward unit ~80 s and ~4.5 GB, a backward unit (causal x GQA x deterministic: 8 kernels) longer).
# ptxas -v output goes to OUT.so.ptxas.log. Env: NVCC (default $CUDA_HOME/bin/nvcc), JOBS, BWD=0 (forward only).
set -euo pipefail
if [ $# -ne 3 ]; then echo "usage: $0 FA3_HOPPER_DIR CUTLASS_INCLUDE OUT.so" >&2; exit 2; fi
FA3=$(cd "$1" && pwd); CUTLASS=$(cd "$2" && pwd); OUT=$3
HERE=$(cd "$(dirname "$0")" && pwd)
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$CUDA_HOME/bin/nvcc}
[ -f "$FA3/flash_fwd_launch_template.h" ] || { echo "$FA3 is not FA3's hopper/ dir" >&2; exit 2; }
[ -f "$CUTLASS/cute/tensor.hpp" ] || { echo "$CUTLASS has no cute/tensor.hpp" >&2; exit 2; }
mkdir -p "$(dirname "$OUT")"
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
LOG=$OUT.ptxas.log; : > "$LOG"

# hopper/setup.py's nvcc flags (less -lineinfo / --resource-usage: -Xptxas -v instead) and the
# feature switches it would pass for a build of only what we use.
FLAGS=(-O3 -std=c++17 --ftemplate-backtrace-limit=0 --use_fast_math --expt-relaxed-constexpr
  -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED -DCUTLASS_ENABLE_GDC_FOR_SM90 -DCUTLASS_DEBUG_TRACE_LEVEL=0 -DNDEBUG
  -DFLASHATTENTION_DISABLE_SPLIT -DFLASHATTENTION_DISABLE_PAGEDKV
  -DFLASHATTENTION_DISABLE_APPENDKV -DFLASHATTENTION_DISABLE_LOCAL -DFLASHATTENTION_DISABLE_SOFTCAP
  -DFLASHATTENTION_DISABLE_PACKGQA -DFLASHATTENTION_DISABLE_FP16 -DFLASHATTENTION_DISABLE_FP8
  -DFLASHATTENTION_DISABLE_VARLEN -DFLASHATTENTION_DISABLE_HDIM96 -DFLASHATTENTION_DISABLE_HDIM192
  -DFLASHATTENTION_DISABLE_SM8x -DFLASHATTENTION_DISABLE_HDIMDIFF64 -DFLASHATTENTION_DISABLE_HDIMDIFF192
  -gencode arch=compute_90a,code=sm_90a -Xcompiler -fPIC -Xcompiler -fvisibility=hidden
  -I"$FA3" -I"$CUTLASS")

UNITS=(64 128 256 host); [ "${BWD:-1}" = 1 ] && UNITS+=(bwd64 bwd128 bwd256)
compile_unit() {  # unit -> $TMP/fa3_<unit>.o, its ptxas log in $TMP/fa3_<unit>.log
  local unit=$1 def=() t0
  case $unit in
    host) [ "${BWD:-1}" = 1 ] || def=(-DFA3REF_NO_BWD) ;;
    bwd*) def=(-DFA3REF_BWD_HDIM=${unit#bwd}) ;;
    *) def=(-DFA3REF_HDIM=$unit) ;;
  esac
  t0=$(date +%s)
  # never fails (set -e would stop the script at `wait` with nvcc's output deleted): a missing object is
  # reported below with its log
  "$NVCC" "${FLAGS[@]}" "${def[@]}" -Xptxas -v -c "$HERE/fa3_ref.cu" -o "$TMP/fa3_$unit.o" > "$TMP/fa3_$unit.log" 2>&1 ||
    echo "   $unit: nvcc rc=$?" >> "$TMP/fa3_$unit.log"
  echo "   $unit: $(( $(date +%s) - t0 )) s" >> "$TMP/fa3_$unit.log"
}
running=0
for unit in "${UNITS[@]}"; do
  compile_unit "$unit" &
  running=$((running + 1))
  if [ "$running" -ge "${JOBS:-1}" ]; then wait -n || true; running=$((running - 1)); fi
done
wait || true
OBJS=()
for unit in "${UNITS[@]}"; do
  echo "== nvcc fa3_ref.cu ($unit)" | tee -a "$LOG"
  tee -a "$LOG" < "$TMP/fa3_$unit.log" | grep -E "error|[1-9][0-9]* bytes spill| s$|rc=" || true
  [ -f "$TMP/fa3_$unit.o" ] || { echo "nvcc failed for $unit, see $LOG" >&2; exit 1; }
  OBJS+=("$TMP/fa3_$unit.o")
done
echo '{ global: fa3ref_*; local: *; };' > "$TMP/exports.map"
# -cudart static is nvcc's default; the version script keeps the static runtime's symbols private.
"$NVCC" -shared -cudart static -gencode arch=compute_90a,code=sm_90a "${OBJS[@]}" -o "$OUT" \
  -Xlinker --version-script="$TMP/exports.map" -Xlinker --exclude-libs,ALL
strip --strip-unneeded "$OUT"
ls -l "$OUT"
