#!/usr/bin/env bash
# Build and run benchmarks/cpp/sm90_fwd_check.cu on a Hopper GPU host: the sm90 forward variants
# against an fp32 reference and the sm80 kernel (check + FA2-grid timing), then compute-sanitizer
# (memcheck, racecheck, synccheck) on a small ragged shape. Usage (repo root):
#   scripts/sm90_check.sh [build-dir]     (CUTLASS_DIR or the nvidia-cutlass wheel in .whl/)
# Extra nvcc flags for the sm90 TU: SM90_CHECK_FLAGS. The tuning TU (part 5) may fail alone.
# SM90_PARTS: the parts to build (default all, 0-16; e.g. "0 1 2 6 7 8 13 14 15 16" = bf16 with the
# persistent kernel, parts 13-15, and its watchdog build, part 16). SM90_RUN_TIMEOUT: seconds for the harness and each sanitizer.
set -euo pipefail
OUTD=${1:-/tmp/sm90_check}
mkdir -p "$OUTD"
if [ -z "${CUTLASS_DIR:-}" ]; then
  python3 -c "import zipfile,glob,sys; zipfile.ZipFile(glob.glob('.whl/nvidia_cutlass-*.whl')[0]).extractall(sys.argv[1])" "$OUTD/cutlass"
  CUTLASS_DIR="$OUTD/cutlass/cutlass_library/source"
fi
NVCC=${NVCC:-nvcc}
FLAGS=(-gencode arch=compute_90a,code=sm_90a -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED -DFLASH_ATTN_CUDA_NO_FEATURES
       -O3 -std=c++20 --use_fast_math --expt-relaxed-constexpr -Icsrc -I"$CUTLASS_DIR/include"
       -I"$CUTLASS_DIR/tools/util/include")
SRC=benchmarks/cpp/sm90_fwd_check.cu
t0=$(date +%s)
if [ "${SM90_REUSE:-0}" = 1 ] && [ -f "$OUTD/part2.o" ]; then echo "reusing objects in $OUTD"; else
# Parts 0-4 (main, d=128 sm80/sm90 bf16/fp16) must build; 5-12 (other head dims, tuning
# candidates) are linked when they build (weak symbols in main).
PARTS=(${SM90_PARTS:-0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16})
declare -A pids=()
for part in "${PARTS[@]}"; do
  rm -f "$OUTD/part$part.o"
  $NVCC "${FLAGS[@]}" ${SM90_CHECK_FLAGS:-} -DSM90_CHECK_PART=$part -Xptxas -v -c $SRC -o "$OUTD/part$part.o" \
    > "$OUTD/ptxas_$part.txt" 2>&1 & pids[$part]=$!
done
for part in "${PARTS[@]}"; do
  if wait ${pids[$part]}; then :
  elif [ $part -le 4 ]; then echo "part $part failed:"; grep -m10 -i error "$OUTD/ptxas_$part.txt"; exit 2
  else echo "optional part $part failed:"; grep -m5 -i error "$OUTD/ptxas_$part.txt"; rm -f "$OUTD/part$part.o"; fi
done
echo "build: $(( $(date +%s) - t0 )) s"
fi
OBJS=(); for part in $(seq 0 16); do [ -f "$OUTD/part$part.o" ] && OBJS+=("$OUTD/part$part.o"); done
for part in 2 4 5 7 8 10 11 12 13 14 15 16; do
  [ -f "$OUTD/ptxas_$part.txt" ] || continue
  grep -E "Compiling entry|registers|spill|C75[0-9][0-9]" "$OUTD/ptxas_$part.txt" | sed 's/^ptxas info *: //' \
    | sed -E 's/Compiling entry function .*FwdTraitsILi([0-9]+)ELi([0-9]+)ELi([0-9]+)EN7cutlass([0-9a-z_]+)ELb([01])EEELb([01]).*/d=\1 N=\2 stages=\3 \4 overlap=\5 causal=\6/' \
    | paste -sd' ' | sed 's/d=/\nd=/g' | grep -v "^$" || true
done
$NVCC -gencode arch=compute_90a,code=sm_90a "${OBJS[@]}" -o "$OUTD/sm90_fwd_check"
for o in "${OBJS[@]}"; do
  cuobjdump -sass "$o" > "$o.sass" 2>/dev/null || true
  echo "$(basename $o): HGMMA $(grep -c HGMMA "$o.sass" || true), BPT.TRAP $(grep -c BPT.TRAP "$o.sass" || true)"
done
# Timeouts: a hung kernel must not eat the device budget (one did: 500 s, NOTES "Hopper forward").
timeout -k 10 ${SM90_RUN_TIMEOUT:-180} "$OUTD/sm90_fwd_check" ${SM90_CHECK_MODE:-}
if [ "${SM90_SANITIZE:-1}" = 1 ]; then
  for tool in memcheck racecheck synccheck; do
    timeout -k 10 ${SM90_RUN_TIMEOUT:-180} compute-sanitizer --tool $tool --error-exitcode 9 "$OUTD/sm90_fwd_check" --small > "$OUTD/san_$tool.txt" 2>&1 \
      && echo "compute-sanitizer $tool: clean" || { echo "compute-sanitizer $tool: FAILED"; tail -30 "$OUTD/san_$tool.txt"; }
  done
fi
