#!/usr/bin/env bash
# GPU host (H200), one call: the sm90 backward's dropout variant (branch bwddrop). Builds d = 64, 128
# bf16 for "90;90a" with the feature kernels (the dropout variants are built with them:
# tools/gen_instantiations.py VARIANTS; FEATURES=0 would build and test no dropout at all), no KV-cache,
# no small-memory tiles; checks the sm90 objects' SASS; runs the dropout and sm90-backward GPU tests,
# compute-sanitizer on scripts/sanitize_sm90_bwd_dropout.py, and the bwd benchmark with dropout 0.1
# (ours = sm90 backward for bf16 by default, ours forced to sm80, SDPA flash: one run). Every stage
# under `timeout` (sum 530 s). Logs in $OUT (default ./gpu_out).
#   scripts/bwddrop_gpu.sh
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}; export OUT
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
status=0
stage() { echo "[bwddrop $(date +%H:%M:%S)] $*"; }

if [ -z "${CUTLASS_DIR:-}" ] && ! python3 third_party/find_cutlass.py > /dev/null 2>&1; then
  wheel=$(ls .whl/nvidia_cutlass-*.whl 2>/dev/null | head -1)
  [ -n "$wheel" ] || { stage "no CUTLASS: put the nvidia-cutlass wheel in .whl/ or set CUTLASS_DIR"; exit 1; }
  rm -rf /tmp/cutlass_wheel && mkdir -p /tmp/cutlass_wheel
  python3 -c "import zipfile,sys; zipfile.ZipFile(sys.argv[1]).extractall('/tmp/cutlass_wheel')" "$wheel"
  export CUTLASS_DIR=/tmp/cutlass_wheel/cutlass_library/source
fi
export FLASH_ATTN_CUDA_ARCHS="90;90a" FLASH_ATTN_CUDA_HDIMS=64,128 FLASH_ATTN_CUDA_DTYPES=bf16
export FLASH_ATTN_CUDA_FEATURES=1 FLASH_ATTN_CUDA_KVCACHE=0 FLASH_ATTN_CUDA_SMEM_TILES=0 MAX_JOBS=16
export FLASH_ATTN_CUDA_PTXAS_VERBOSE=1

stage "build"
timeout 290 python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1
rc=$?; stage "build rc=$rc"
[ $rc -eq 0 ] || { tail -30 "$OUT/build.log"; exit 1; }
# ptxas of the sm90 backward kernels (bwd_kernel<Traits, causal, dropout>): spills, registers
awk '/Function properties for _ZN5flash4sm9010bwd_kernel/{name=$NF; getline a; getline b; print name ": " a " |" b}' \
  "$OUT/build.log" | sed -E 's/_ZN5flash4sm9010bwd_kernelINS0_9BwdTraitsILi([0-9]+)E.*ELb([01])ELb([01])EEEv[^:]*/d=\1 causal=\2 dropout=\3/; s/ptxas info *: //'
echo
timeout 60 python3 tools/check_sass.py --log "$OUT/build.log" build/temp*/csrc/instantiations/sm90_*.o || status=1

stage "tests"
timeout 110 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_dropout_gpu.py tests/test_sm90_bwd_gpu.py \
  > "$OUT/tests.log" 2>&1
rc=$?; [ $rc -eq 0 ] || status=1
stage "tests rc=$rc"; grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20; tail -2 "$OUT/tests.log"

stage "compute-sanitizer"
timeout 80 scripts/sanitize.sh scripts/sanitize_sm90_bwd_dropout.py || status=1
grep -h "sanitize_sm90_bwd_dropout:" "$OUT"/sanitize_*.log | head -1

stage "bench"
mkdir -p "$OUT/res"
timeout 50 python3 -m flash_attn_cuda.bench --directions bwd --hdims 64,128 --seqlens 1024,4096 --causal both \
  --dropout 0.1 --impls flash_attn_cuda,flash_attn_cuda_sm80,sdpa_flash --out "$OUT/res" --prefix h200_bwd_dropout \
  > "$OUT/bench.log" 2>&1
rc=$?; [ $rc -eq 0 ] || status=1
stage "bench rc=$rc"; grep -E "^(\||#)" "$OUT/bench.log" | head -40
exit $status
