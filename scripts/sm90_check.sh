#!/usr/bin/env bash
# Build and run benchmarks/cpp/sm90_fwd_check.cu on a Hopper GPU host: the sm90 forward variants
# against an fp32 reference and the sm80 kernel (check + FA2-grid timing), then compute-sanitizer
# (memcheck, racecheck, synccheck) on a small ragged shape. Usage (repo root):
#   scripts/sm90_check.sh [build-dir]     (CUTLASS_DIR or the nvidia-cutlass wheel in .whl/)
# Extra nvcc flags for the sm90 TU: SM90_CHECK_FLAGS. The tuning TU (part 5) may fail alone.
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
if [ "${SM90_REUSE:-0}" = 1 ] && [ -f "$OUTD/sm90.o" ]; then echo "reusing objects in $OUTD"; else
$NVCC "${FLAGS[@]}" ${SM90_CHECK_FLAGS:-} -DSM90_CHECK_PART=0 -c $SRC -o "$OUTD/main.o" & p0=$!
$NVCC "${FLAGS[@]}" -DSM90_CHECK_PART=1 -c $SRC -o "$OUTD/sm80.o" & p1=$!
$NVCC "${FLAGS[@]}" ${SM90_CHECK_FLAGS:-} -DSM90_CHECK_PART=2 -Xptxas -v -c $SRC -o "$OUTD/sm90.o" 2> "$OUTD/ptxas_sm90.txt" & p2=$!
$NVCC "${FLAGS[@]}" -DSM90_CHECK_PART=3 -c $SRC -o "$OUTD/sm80h.o" & p3=$!
$NVCC "${FLAGS[@]}" -DSM90_CHECK_PART=4 -c $SRC -o "$OUTD/sm90h.o" & p4=$!
$NVCC "${FLAGS[@]}" -DSM90_CHECK_PART=5 -Xptxas -v -c $SRC -o "$OUTD/tune.o" 2> "$OUTD/ptxas_tune.txt" & p5=$!
wait $p0 && wait $p1 && wait $p2 && wait $p3 && wait $p4 || { cat "$OUTD/ptxas_sm90.txt"; exit 2; }
TUNE=""
if wait $p5; then TUNE="$OUTD/tune.o"; else echo "tuning TU failed to build:"; grep -m5 error "$OUTD/ptxas_tune.txt"; fi
echo "build: $(( $(date +%s) - t0 )) s"
fi
TUNE=""; [ -f "$OUTD/tune.o" ] && TUNE="$OUTD/tune.o"
cat "$OUTD/ptxas_sm90.txt" "$OUTD/ptxas_tune.txt" | grep -E "Compiling entry|registers|spill|C75[0-9][0-9]|error" | grep -v "^$" | sed 's/^ptxas info *: //' | head -20 || true
$NVCC -gencode arch=compute_90a,code=sm_90a "$OUTD/main.o" "$OUTD/sm80.o" "$OUTD/sm90.o" "$OUTD/sm80h.o" "$OUTD/sm90h.o" $TUNE -o "$OUTD/sm90_fwd_check"
for o in "$OUTD/sm90.o" "$OUTD/sm90h.o" $TUNE; do
  cuobjdump -sass "$o" > "$o.sass" || true
  echo "$(basename $o): HGMMA $(grep -c HGMMA "$o.sass" || true), BPT.TRAP $(grep -c BPT.TRAP "$o.sass" || true)"
done
"$OUTD/sm90_fwd_check" ${SM90_CHECK_MODE:-}
if [ "${SM90_SANITIZE:-1}" = 1 ]; then
  for tool in memcheck racecheck synccheck; do
    compute-sanitizer --tool $tool --error-exitcode 9 "$OUTD/sm90_fwd_check" --small > "$OUTD/san_$tool.txt" 2>&1 \
      && echo "compute-sanitizer $tool: clean" || { echo "compute-sanitizer $tool: FAILED"; tail -30 "$OUTD/san_$tool.txt"; }
  done
fi
