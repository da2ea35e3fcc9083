#!/usr/bin/env bash
# Tile-size sweep for the forward kernel: builds bench_fwd once per config D:BMxBNxWARPSxSPLIT
# (SPLIT: kSplitMaskedLoop 1/0) with -DBENCH_*, in parallel, then checks each against the
# reference kernel at one ragged size and times it on the FA2-paper grid (bf16).
#
#   benchmarks/cpp/tune_fwd.sh "64:128x128x4x1 64:128x64x4x1 256:64x64x4x0" [OUTDIR]
# CSRC=path/to/other/csrc (and BENCH_SRC=its bench_fwd.cu) compares another version of the kernels.
set -uo pipefail
configs=$1
out=${2:-build/tune}
csrc=${CSRC:-csrc}
bench_src=${BENCH_SRC:-benchmarks/cpp/bench_fwd.cu}
mkdir -p "$out"
CUTLASS_INC=$(python3 third_party/find_cutlass.py)
arch=${FLASH_ATTN_CUDA_ARCHS:-90}
build_one() {
  local cfg=$1 hdim=${1%%:*} tile=${1#*:}
  local bm bn w split
  IFS=x read -r bm bn w split <<< "$tile"
  ${NVCC:-/usr/local/cuda/bin/nvcc} -O3 -std=c++20 -DNDEBUG --use_fast_math --expt-relaxed-constexpr \
    -gencode=arch=compute_${arch},code=sm_${arch} -I"$csrc" -I"$CUTLASS_INC" -Xptxas -v \
    -DBENCH_HDIM=$hdim -DBENCH_BM=$bm -DBENCH_BN=$bn -DBENCH_WARPS=$w -DBENCH_SPLIT=${split:-1} "$bench_src" \
    -o "$out/bench_h${hdim}_${tile}" > "$out/build_h${hdim}_${tile}.log" 2>&1 \
    && echo "$cfg: $(awk '/Function properties for .*fwd_kernel/{getline a; getline b; print a b}' \
         "$out/build_h${hdim}_${tile}.log" | tr -s ' ' | sed 's/ptxas info : //')" \
    || { echo "$cfg: BUILD FAILED"; tail -5 "$out/build_h${hdim}_${tile}.log"; }
}
export -f build_one
export out csrc bench_src CUTLASS_INC arch
echo $configs | tr ' ' '\n' | xargs -P "$(nproc)" -I{} bash -c 'build_one {}'
for cfg in $configs; do
  hdim=${cfg%%:*} tile=${cfg#*:}
  [ -x "$out/bench_h${hdim}_${tile}" ] || continue
  echo "== hdim $hdim tile $tile ($csrc)"
  "$out/bench_h${hdim}_${tile}" --hdim "$hdim" --batch 2 --heads 3 --seqlen 1000 --seqlen-k 1337 --causal 1 --check \
    | tail -1
  "$out/bench_h${hdim}_${tile}" --hdim "$hdim" --grid --reps 30
done
