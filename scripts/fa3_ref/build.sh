#!/usr/bin/env bash
# Builds FlashAttention-3's sm90 forward (bf16, d = 64 / 128 / 256, dv = d; non-split, non-paged,
# no softcap / PackGQA / varlen / local) and our ctypes entry point (fa3_ref.cu) into one torch-free
# shared library with the CUDA runtime linked statically (needs only libcuda.so at run time).
#   scripts/fa3_ref/build.sh FA3_HOPPER_DIR CUTLASS_INCLUDE OUT.so
# FA3_HOPPER_DIR: a checkout's hopper/ directory (not part of this repository); CUTLASS_INCLUDE: the
# CUTLASS include dir (the 4.2 wheel's, or FA3's csrc/cutlass/include). One nvcc at a time (~80 s and
# ~4.5 GB each). ptxas -v output goes to OUT.so.ptxas.log. Env: NVCC (default $CUDA_HOME/bin/nvcc).
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
  -DFLASHATTENTION_DISABLE_BACKWARD -DFLASHATTENTION_DISABLE_SPLIT -DFLASHATTENTION_DISABLE_PAGEDKV
  -DFLASHATTENTION_DISABLE_APPENDKV -DFLASHATTENTION_DISABLE_LOCAL -DFLASHATTENTION_DISABLE_SOFTCAP
  -DFLASHATTENTION_DISABLE_PACKGQA -DFLASHATTENTION_DISABLE_FP16 -DFLASHATTENTION_DISABLE_FP8
  -DFLASHATTENTION_DISABLE_VARLEN -DFLASHATTENTION_DISABLE_HDIM96 -DFLASHATTENTION_DISABLE_HDIM192
  -DFLASHATTENTION_DISABLE_SM8x -DFLASHATTENTION_DISABLE_HDIMDIFF64 -DFLASHATTENTION_DISABLE_HDIMDIFF192
  -gencode arch=compute_90a,code=sm_90a -Xcompiler -fPIC -Xcompiler -fvisibility=hidden
  -I"$FA3" -I"$CUTLASS")

OBJS=()
for unit in 64 128 256 host; do
  def=(); [ "$unit" = host ] || def=(-DFA3REF_HDIM=$unit)
  echo "== nvcc fa3_ref.cu ($unit)" | tee -a "$LOG"
  t0=$(date +%s)
  "$NVCC" "${FLAGS[@]}" "${def[@]}" -Xptxas -v -c "$HERE/fa3_ref.cu" -o "$TMP/fa3_$unit.o" 2>&1 | tee -a "$LOG" | grep -E "error|warning.*spill|bytes spill" || true
  [ -f "$TMP/fa3_$unit.o" ] || { echo "nvcc failed for $unit, see $LOG" >&2; exit 1; }
  echo "   $(( $(date +%s) - t0 )) s" | tee -a "$LOG"
  OBJS+=("$TMP/fa3_$unit.o")
done
echo '{ global: fa3ref_*; local: *; };' > "$TMP/exports.map"
# -cudart static is nvcc's default; the version script keeps the static runtime's symbols private.
"$NVCC" -shared -cudart static -gencode arch=compute_90a,code=sm_90a "${OBJS[@]}" -o "$OUT" \
  -Xlinker --version-script="$TMP/exports.map" -Xlinker --exclude-libs,ALL
strip --strip-unneeded "$OUT"
ls -l "$OUT"
