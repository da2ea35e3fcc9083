#!/usr/bin/env bash
# On the GPU host: build for sm_90 with all cores, run the tests, run the forward benchmark.
# Logs and results go to $OUT (default ./gpu_out). Needs the nvidia-cutlass wheel in .whl/
# (no package registry there) unless CUTLASS_DIR is set.
#
#   scripts/gpu_check.sh                 build + tests + benchmark
#   SKIP_BENCH=1 scripts/gpu_check.sh    build + tests
#   TESTS="tests/test_attention_gpu.py -k compile" BENCH_ARGS="--hdims 128" scripts/gpu_check.sh
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
log() { echo "[gpu_check $(date +%H:%M:%S)] $*"; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,utilization.gpu \
  --format=csv > "$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"

if [ -z "${CUTLASS_DIR:-}" ]; then
  wheel=$(ls .whl/nvidia_cutlass-*.whl 2>/dev/null | head -1)
  [ -n "$wheel" ] || { log "no CUTLASS: put the nvidia-cutlass wheel in .whl/ or set CUTLASS_DIR"; exit 1; }
  rm -rf /tmp/cutlass_wheel && mkdir -p /tmp/cutlass_wheel
  python3 -c "import zipfile,sys; zipfile.ZipFile(sys.argv[1]).extractall('/tmp/cutlass_wheel')" "$wheel"
  export CUTLASS_DIR=/tmp/cutlass_wheel/cutlass_library/source
fi

export FLASH_ATTN_CUDA_ARCHS=${FLASH_ATTN_CUDA_ARCHS:-90}
export MAX_JOBS=${MAX_JOBS:-$(nproc)}
export FLASH_ATTN_CUDA_PTXAS_VERBOSE=1
log "build: archs=$FLASH_ATTN_CUDA_ARCHS hdims=${FLASH_ATTN_CUDA_HDIMS:-all} dtypes=${FLASH_ATTN_CUDA_DTYPES:-all} jobs=$MAX_JOBS"
start=$(date +%s)
python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1
rc=$?
log "build rc=$rc in $(( $(date +%s) - start )) s"
grep -E "registers|spill" "$OUT/build.log" | paste - - | sed -E 's/ptxas info *: //g' > "$OUT/ptxas.txt" || true
grep -B1 -A0 "Compiling entry" "$OUT/build.log" | grep -o "fwd_kernelINS_9FwdTraitsILi[0-9]*ELi[0-9]*ELi[0-9]*ELi[0-9]*EN7cutlass[0-9]*[a-z0-9_]*" > "$OUT/kernels.txt" || true
[ $rc -eq 0 ] || { tail -40 "$OUT/build.log"; exit $rc; }
tar czf "$OUT/build.tgz" flash_attn_cuda/_C*.so

if [ -z "${SKIP_TESTS:-}" ]; then
  log "tests"
  python3 -m pytest ${TESTS:-tests} -q -x -p no:cacheprovider > "$OUT/tests.log" 2>&1
  trc=$?
  tail -25 "$OUT/tests.log"
  log "tests rc=$trc"
fi

if [ -z "${SKIP_BENCH:-}" ]; then
  log "benchmark"
  python3 -m flash_attn_cuda.bench ${BENCH_ARGS:-} --csv "$OUT/h200_fwd.csv" --md "$OUT/h200_fwd.md" \
    --plot "$OUT/h200_fwd.png" 2> "$OUT/bench.err"
  log "bench rc=$?"
fi
cat "$OUT/ptxas.txt" 2>/dev/null | head -40
