#!/usr/bin/env bash
# GPU host (H200): build d = 256 bf16 for "90;90a" (no feature / KV-cache / small-memory kernels),
# check the sm90 backward's SASS, run its gradient tests at d = 256, compute-sanitizer on the d = 256
# workload, and the d = 256 backward benchmark (sm80 vs sm90 family vs cuDNN). Every stage under
# `timeout`; total < 8 min. Logs in $OUT (default ./gpu_out): summary.txt build.log tests.log
# sanitize_*.log bench.log. Needs the nvidia-cutlass wheel in .whl/ unless CUTLASS_DIR is set.
#   scripts/bwd256_gpu.sh
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
summary="$OUT/summary.txt"
log() { echo "[bwd256 $(date +%H:%M:%S)] $*" | tee -a "$summary"; }
status=0

if [ -z "${CUTLASS_DIR:-}" ] && ! python3 third_party/find_cutlass.py > /dev/null 2>&1; then
  wheel=$(ls .whl/nvidia_cutlass-*.whl 2>/dev/null | head -1)
  [ -n "$wheel" ] || { log "no CUTLASS: put the nvidia-cutlass wheel in .whl/ or set CUTLASS_DIR"; exit 1; }
  rm -rf /tmp/cutlass_wheel && mkdir -p /tmp/cutlass_wheel
  python3 -c "import zipfile,sys; zipfile.ZipFile(sys.argv[1]).extractall('/tmp/cutlass_wheel')" "$wheel"
  export CUTLASS_DIR=/tmp/cutlass_wheel/cutlass_library/source
fi

export FLASH_ATTN_CUDA_ARCHS="90;90a" FLASH_ATTN_CUDA_HDIMS=256 FLASH_ATTN_CUDA_DTYPES=bf16
export FLASH_ATTN_CUDA_FEATURES=0 FLASH_ATTN_CUDA_KVCACHE=0 FLASH_ATTN_CUDA_SMEM_TILES=0
export MAX_JOBS=16 FLASH_ATTN_CUDA_PTXAS_VERBOSE=1
log "build (d = 256 bf16, 90;90a)"
timeout 240 python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1
rc=$?
log "build rc=$rc"
[ $rc -eq 0 ] || { tail -40 "$OUT/build.log" | tee -a "$summary"; exit $rc; }
grep -A2 "Function properties for .*sm9010bwd_kernel" "$OUT/build.log" | grep -E "spill|registers" | tee -a "$summary"
timeout 15 python3 tools/check_sass.py --log "$OUT/build.log" build/temp*/csrc/instantiations/sm90_bwd_*.o 2>&1 \
  | tee -a "$summary"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

log "tests: tests/test_sm90_bwd_gpu.py -k 256"
timeout -k 5 75 python3 -m pytest tests/test_sm90_bwd_gpu.py -k 256 -q -p no:cacheprovider > "$OUT/tests.log" 2>&1
trc=$?
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20 | tee -a "$summary"
log "tests rc=$trc: $(grep -E "[0-9]+ (passed|failed)" "$OUT/tests.log" | tail -1)"
[ $trc -eq 0 ] || status=1
# A hang (rc 124: a barrier or pipeline phase never completing) would hang the stages below too.
[ $trc -eq 124 ] && { log "tests timed out: sanitizer and benchmark skipped"; exit 1; }

log "sanitize d = 256"
OUT=$OUT timeout -k 5 90 scripts/sanitize.sh scripts/sanitize_sm90_bwd.py 2>&1 | tee -a "$summary"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

log "bench"
timeout -k 5 60 python3 -m flash_attn_cuda.bench --directions bwd --hdims 256 --seqlens 1024,4096,16384 --causal both \
  --impls flash_attn_cuda_sm80,flash_attn_cuda_sm90,sdpa_cudnn > "$OUT/bench.log" 2>&1
brc=$?
tail -30 "$OUT/bench.log" | tee -a "$summary"
log "bench rc=$brc"
[ $brc -eq 0 ] || status=1
exit $status
