#!/usr/bin/env bash
# On the GPU host: build for sm_90 and the sm90 (Hopper, sm_90a) family with all cores, check the
# sm90 objects' SASS (tools/check_sass.py, on a fresh build), run the tests, run the benchmark (forward,
# backward, fwd+bwd vs SDPA, and the fwd+bwd peak memory), optionally the C++ --check matrix and
# tile sweeps. Logs and results go to $OUT (default ./gpu_out), 8 files at most:
#   summary.txt build.log tests.log bench.log results.tar.gz (<gpu>_*.csv/md/png) check.log tune.log
#   tune_bwd.log. FEATURES_BENCH=1 adds no file: its log is appended to bench.log and its
#   <gpu>_gqa.csv, <gpu>_varlen.csv, <gpu>_features.md go into results.tar.gz. <gpu> is the GPU's
#   name as the benchmarks write it (flash_attn_cuda.bench.gpu_slug): h200 on the H200.
#   DECODE_BENCH=1 likewise: log appended to bench.log, <gpu>_decode.csv/md/png into results.tar.gz.
# Needs the nvidia-cutlass wheel in .whl/ (no package registry there) unless CUTLASS_DIR is set.
#
#   scripts/gpu_check.sh                         build + tests + benchmark
#   SKIP_BENCH=1 scripts/gpu_check.sh            build + tests
#   TESTS="tests/test_attention_gpu.py -k compile" BENCH_ARGS="--hdims 128" scripts/gpu_check.sh
#   BENCH_ARGS="--order ab" scripts/gpu_check.sh  the grid measured once per point (half the time of the
#                                                default A B B A; flash_attn_cuda/bench.py --order)
#   CHECK_MATRIX=1 scripts/gpu_check.sh          also make bench-cpp + benchmarks/cpp/check_matrix.sh
#   TUNE="96:128x64x4x1 96:64x64x4x1" scripts/gpu_check.sh     also run benchmarks/cpp/tune_fwd.sh
#   TUNE_BWD="128:64x128x8x2x4x2" scripts/gpu_check.sh          also run benchmarks/cpp/tune_bwd.sh
#   FEATURES_BENCH=1 scripts/gpu_check.sh        also the GQA/varlen benchmark (make bench-features)
#   SKIP_BENCH=1 FEATURES_BENCH=1 FEATURES_ARGS="--benches varlen" scripts/gpu_check.sh
#   DECODE_BENCH=1 scripts/gpu_check.sh          also the KV-cache decode benchmark (make bench-decode)
#   SKIP_BENCH=1 DECODE_BENCH=1 DECODE_ARGS="--heads 32:8 --layouts contiguous" scripts/gpu_check.sh
#   SAVE_SO=1 scripts/gpu_check.sh               also put the built extension in $OUT as so.tgz.partNN
#                                                (15 MB pieces; counted in the 8 files)
#   PREBUILT=.prebuilt scripts/gpu_check.sh      skip the build: unpack DIR/so.tgz.part* (carried from a
#                                                SAVE_SO run of the same sources) into flash_attn_cuda/
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
status=0  # non-zero when tests, benchmark or sweep fail
summary="$OUT/summary.txt"
log() { echo "[gpu_check $(date +%H:%M:%S)] $*" | tee -a "$summary"; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,utilization.gpu \
  --format=csv 2>&1 | tee "$summary"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))" \
  | tee -a "$summary"

if [ -z "${CUTLASS_DIR:-}" ] && ! python3 third_party/find_cutlass.py > /dev/null 2>&1; then
  wheel=$(ls .whl/nvidia_cutlass-*.whl 2>/dev/null | head -1)
  [ -n "$wheel" ] || { log "no CUTLASS: put the nvidia-cutlass wheel in .whl/ or set CUTLASS_DIR"; exit 1; }
  rm -rf /tmp/cutlass_wheel && mkdir -p /tmp/cutlass_wheel
  python3 -c "import zipfile,sys; zipfile.ZipFile(sys.argv[1]).extractall('/tmp/cutlass_wheel')" "$wheel"
  export CUTLASS_DIR=/tmp/cutlass_wheel/cutlass_library/source
fi

export FLASH_ATTN_CUDA_ARCHS=${FLASH_ATTN_CUDA_ARCHS:-90;90a}
# The small-memory tiles (A100 / sm86-sm89 rows) too, so the H200 runs them under FLASH_ATTN_CUDA_SMEM_BUDGET.
export FLASH_ATTN_CUDA_SMEM_TILES=${FLASH_ATTN_CUDA_SMEM_TILES:-1}
export MAX_JOBS=${MAX_JOBS:-$(nproc)}
export FLASH_ATTN_CUDA_PTXAS_VERBOSE=1
if [ -n "${PREBUILT:-}" ]; then
  cat "$PREBUILT"/so.tgz.part* | tar -xzf - -C flash_attn_cuda
  rc=$?
  log "prebuilt extension from $PREBUILT: rc=$rc $(ls flash_attn_cuda/_C*.so)"
  [ $rc -eq 0 ] || exit $rc
else
  log "build: archs=$FLASH_ATTN_CUDA_ARCHS hdims=${FLASH_ATTN_CUDA_HDIMS:-all} dtypes=${FLASH_ATTN_CUDA_DTYPES:-all} backward=${FLASH_ATTN_CUDA_BACKWARD:-1} features=${FLASH_ATTN_CUDA_FEATURES:-1} jobs=$MAX_JOBS"
  TIMEFORMAT="%R s wall, %U s user + %S s sys CPU (all nvcc/ptxas processes)"
  { time python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1; } 2> /tmp/gpu_check_build_time
  rc=$?
  log "build rc=$rc: $(cat /tmp/gpu_check_build_time)"
  if [ $rc -eq 0 ] && [ -n "${SAVE_SO:-}" ]; then
    (cd flash_attn_cuda && tar -czf - _C*.so) | split -b 15M -d - "$OUT/so.tgz.part"
    log "saved the extension: $(ls "$OUT"/so.tgz.part* | wc -l) piece(s)"
  fi
fi
# registers / spills of every forward kernel instance
[ -f "$OUT/build.log" ] && awk '/Function properties for .*(fwd|bwd)_kernel/{name=$NF; getline a; getline b; print name ": " a " |" b}' \
  "$OUT/build.log" | sed -E 's/_ZN5flash10fwd_kernelINS_9FwdTraitsI/fwd /; s/_ZN5flash10bwd_kernelINS_9BwdTraitsI/bwd /; s/ptxas info *: //' \
  | tee -a "$summary"
[ $rc -eq 0 ] || { tail -40 "$OUT/build.log"; exit $rc; }
# The sm90 family's objects: sm_90a HGMMA, no BPT.TRAP; ptxas printed no wgmma serialisation (the
# log only holds what this run compiled: a full check needs a fresh build).
sm90_objects=$(ls build/temp*/csrc/instantiations/sm90_*.o 2>/dev/null)
if [ -n "$sm90_objects" ] && [ -z "${PREBUILT:-}" ]; then
  python3 tools/check_sass.py --log "$OUT/build.log" $sm90_objects 2>&1 | tee -a "$summary"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

if [ -z "${SKIP_TESTS:-}" ]; then
  log "tests"
  python3 -m pytest ${TESTS:-tests} -q -p no:cacheprovider > "$OUT/tests.log" 2>&1
  trc=$?
  grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20
  log "tests rc=$trc: $(grep -E "[0-9]+ (passed|failed)" "$OUT/tests.log" | tail -1)"
  [ $trc -eq 0 ] || status=1
fi

results=/tmp/gpu_check_results
rm -rf "$results" && mkdir -p "$results"
if [ -z "${SKIP_BENCH:-}" ]; then
  log "benchmark: ${BENCH_ARGS:-FA2-paper grid}"
  python3 -m flash_attn_cuda.bench ${BENCH_ARGS:-} --out "$results" > "$OUT/bench.log" 2>&1
  brc=$?
  log "bench rc=$brc"
  [ $brc -eq 0 ] || status=1
  grep -E "^(\||#)" "$OUT/bench.log"
  if [ -z "${SKIP_MEMORY:-}" ]; then
    python3 -m flash_attn_cuda.bench --memory --out "$results" >> "$OUT/bench.log" 2>&1 \
      || status=1
    tail -8 "$OUT/bench.log"
  fi
fi

# extra_bench NAME MODULE ARGS: python -m flash_attn_cuda.MODULE ARGS --out $results, log appended
# to bench.log, its $results/*_NAME.md tables printed.
extra_bench() {
  log "$1 benchmark: ${3:-defaults}"
  echo "== python -m flash_attn_cuda.$2 $3" >> "$OUT/bench.log"
  python3 -m "flash_attn_cuda.$2" $3 --out "$results" >> "$OUT/bench.log" 2>&1
  local rc=$?
  log "$1 bench rc=$rc"
  [ $rc -eq 0 ] || status=1
  for md in "$results"/*_"$1".md; do [ -f "$md" ] && grep -E "^(\||#|- d2d)" "$md"; done
}
[ -n "${FEATURES_BENCH:-}" ] && extra_bench features bench_features "${FEATURES_ARGS:-}"
[ -n "${DECODE_BENCH:-}" ] && extra_bench decode bench_decode "${DECODE_ARGS:-}"
[ -n "$(ls -A "$results")" ] && tar -czf "$OUT/results.tar.gz" -C "$results" .

if [ -n "${CHECK_MATRIX:-}" ]; then
  log "C++ benchmarks: make bench-cpp + check matrix"
  { make bench-cpp -j"$(nproc)" && FAMILIES="${FAMILIES:-sm80 sm90}" benchmarks/cpp/check_matrix.sh; } \
    > "$OUT/check.log" 2>&1
  crc=$?
  log "check matrix rc=$crc: $(tail -1 "$OUT/check.log")"
  [ $crc -eq 0 ] || status=1
fi

if [ -n "${TUNE:-}" ]; then
  log "tile sweep: $TUNE"
  benchmarks/cpp/tune_fwd.sh "$TUNE" /tmp/tune > "$OUT/tune.log" 2>&1
  log "tune rc=$?"
  grep -q "MISMATCH\|BUILD FAILED" "$OUT/tune.log" && { log "tune: a config failed its check or build"; status=1; }
fi

if [ -n "${TUNE_BWD:-}" ]; then
  log "backward tile sweep: $TUNE_BWD"
  benchmarks/cpp/tune_bwd.sh "$TUNE_BWD" /tmp/tune_bwd > "$OUT/tune_bwd.log" 2>&1
  log "tune_bwd rc=$?"
  grep -q "MISMATCH\|BUILD FAILED" "$OUT/tune_bwd.log" && { log "tune_bwd: a config failed its check or build"; status=1; }
fi
exit $status
