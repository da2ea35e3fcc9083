#!/usr/bin/env bash
# Tile sweep for the backward kernel: builds bench_bwd once per config
# D:BMxBNxWARPSxSDPxDKVxDQ[xSTAGES] (BwdTraits<D, BM, BN, WARPS, SdP/dKV/dQ warp rows, Q/dO stages,
# default 2>) replacing the default (227 KB) rows of csrc/bwd_tile_config.h, from a private
# copy of csrc/ with -DFLASH_BWD_TUNE_*, in parallel; then checks each against the reference at
# one ragged causal size and times it at seqlen 2k/8k (16k tokens, hidden 2048), causal and not.
#
#   benchmarks/cpp/tune_bwd.sh "128:64x128x8x2x4x4 128:64x128x8x2x4x2" [OUTDIR]
set -uo pipefail
configs=$1
out=${2:-build/tune_bwd}
mkdir -p "$out"
CUTLASS_INC=$(python3 third_party/find_cutlass.py)
arch=${FLASH_ATTN_CUDA_ARCHS:-90}
build_one() {
  local cfg=$1 hdim=${1%%:*} tile=${1#*:}
  local bm bn w sdp dkv dq st
  IFS=x read -r bm bn w sdp dkv dq st <<< "$tile"
  local dir="$out/src_h${hdim}_${tile}"
  rm -rf "$dir" && mkdir -p "$dir" && cp -r csrc "$dir/csrc" && rm -rf "$dir/csrc/instantiations"
  FLASH_ATTN_CUDA_BACKWARD=1 python3 tools/gen_instantiations.py --hdims "$hdim" --dtypes bf16 \
    --out "$dir/csrc/instantiations" > /dev/null
  ${NVCC:-/usr/local/cuda/bin/nvcc} -O3 -std=c++20 -DNDEBUG --use_fast_math --expt-relaxed-constexpr \
    -gencode=arch=compute_${arch},code=sm_${arch} -I"$dir/csrc" -I"$CUTLASS_INC" -Xptxas -v \
    -DFLASH_ATTN_CUDA_BACKWARD -DFLASH_BWD_TUNE_BM=$bm -DFLASH_BWD_TUNE_BN=$bn -DFLASH_BWD_TUNE_WARPS=$w \
    -DFLASH_BWD_TUNE_SDP=$sdp -DFLASH_BWD_TUNE_DKV=$dkv -DFLASH_BWD_TUNE_DQ=$dq -DFLASH_BWD_TUNE_STAGES=${st:-2} \
    benchmarks/cpp/bench_bwd.cu "$dir/csrc/fwd_dispatch.cu" "$dir/csrc/bwd_dispatch.cu" "$dir"/csrc/instantiations/*.cu \
    -o "$out/bench_h${hdim}_${tile}" > "$out/build_h${hdim}_${tile}.log" 2>&1 \
    && echo "$cfg: $(awk '/Function properties for .*bwd_kernel/{getline a; getline b; print a b}' \
         "$out/build_h${hdim}_${tile}.log" | tr -s ' ' | sed 's/ptxas info : //')" \
    || { echo "$cfg: BUILD FAILED"; grep -m5 error "$out/build_h${hdim}_${tile}.log"; }
}
export -f build_one
export out CUTLASS_INC arch
echo $configs | tr ' ' '\n' | xargs -P "$(nproc)" -I{} bash -c 'build_one {}'
for cfg in $configs; do
  hdim=${cfg%%:*} tile=${cfg#*:}
  bin="$out/bench_h${hdim}_${tile}"
  [ -x "$bin" ] || continue
  echo "== hdim $hdim tile $tile"
  "$bin" --hdim "$hdim" --batch 2 --heads 3 --seqlen 1000 --seqlen-k 1337 --causal 1 --check | tail -1
  for s in 2048 8192; do
    for c in 0 1; do
      "$bin" --hdim "$hdim" --batch $((16384 / s)) --heads $((2048 / hdim)) --seqlen $s --causal $c --reps 20 | tail -1
    done
  done
done
