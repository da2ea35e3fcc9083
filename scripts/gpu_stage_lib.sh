# Sourced by the one-call device scripts (combo3_gpu.sh, decode_pdl_gpu.sh, fp16_gpu.sh): setup,
# a build of the stale extension, time-boxed stages, the logs tarball. The caller sets OUT (default
# $PWD/<name>_out) and the FLASH_ATTN_CUDA_* build variables before gpu_build.
#   gpu_setup NAME           T0, OUT (+ OUT/res), PYTHONPATH, CUTLASS_DIR from the wheel in .whl/
#   gpu_build [TIMEOUT]      setup.py build_ext --inplace unless flash_attn_cuda/_C*.so is newer than
#                            the sources; then the sm90 objects' SASS check and ptxas spills, if any
#   stage NAME TIMEOUT CMD   CMD under timeout (cut to what is left before DEADLINE), log OUT/NAME.log,
#                            its rc and the lines that say pass/fail
#   gpu_finish               OUT/logs.tgz of the logs and results, the loose copies removed
#   fa3_impls / fa3_required FA3 (scripts/fa3_ref) in the benchmarks where carried / required
#   ncu_source_pages         per-kernel SASS source pages of an Nsight Compute report
#   gpu_result_prefix        the benchmarks' own name for this GPU (bench.gpu_slug: h200, h100_80gb_hbm3)
gpu_setup() {
  T0=$(date +%s)
  OUT=${OUT:-$PWD/$1_out}; mkdir -p "$OUT" "$OUT/res"
  export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
  if [ ! -d /tmp/cw/cutlass_library ]; then
    rm -rf /tmp/cw && mkdir -p /tmp/cw
    python3 -c "import zipfile,glob; zipfile.ZipFile(glob.glob('.whl/nvidia_cutlass-*.whl')[0]).extractall('/tmp/cw')"
  fi
  export CUTLASS_DIR=/tmp/cw/cutlass_library/source
}

gpu_build() {
  local so t0 brc config
  config=$(env | grep -E "^FLASH_ATTN_CUDA_" | sort | tr '\n' ' ')
  so=$(ls flash_attn_cuda/_C*.so 2>/dev/null | head -1)
  # Reused only when no source is newer and the build had the same FLASH_ATTN_CUDA_* settings; its log
  # (build/last_build.log) comes back as OUT/build.log, where variants_gpu.sh reads the nvcc lines.
  if [ -n "$so" ] && [ -z "$(find csrc setup.py tools -newer "$so" -type f | grep -v instantiations | head -1)" ] &&
     [ "$(cat build/last_config 2>/dev/null)" = "$config" ] && [ -f build/last_build.log ]; then
    cp build/last_build.log "$OUT/build.log"
    echo "build: reusing $so (same settings: $config)"; return 0
  fi
  t0=$(date +%s)
  rm -f build/last_config
  timeout -k 10 "${1:-260}" python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1; brc=$?
  echo "build rc=$brc in $(( $(date +%s) - t0 )) s"
  [ $brc -eq 0 ] || { grep -E "error" "$OUT/build.log" | head -20; tail -20 "$OUT/build.log"; exit 1; }
  # A build that compiled nothing (the objects were current) logs no nvcc line: keep the last log that has them,
  # the command lines scripts/variants_gpu.sh recompiles units from (they are still the objects' commands).
  if ! grep -q "nvcc" "$OUT/build.log" && grep -q "nvcc" build/last_build.log 2>/dev/null; then
    cat build/last_build.log >> "$OUT/build.log"
  fi
  mkdir -p build && cp "$OUT/build.log" build/last_build.log && echo "$config" > build/last_config
  if ls build/temp*/csrc/instantiations/sm90_*.o > /dev/null 2>&1; then
    python3 tools/check_sass.py --log "$OUT/build.log" build/temp*/csrc/instantiations/sm90_*.o 2>&1 | tail -3
  fi
  grep -A2 "Function properties for .*sm90" "$OUT/build.log" | grep -E "spill" | sort | uniq -c | sort -rn | head -5
}

left() { echo $(( ${DEADLINE:-575} - ($(date +%s) - T0) )); }

stage() {
  local name=$1 t=$2; shift 2
  if [ "$(left)" -lt "$t" ]; then t=$(left); fi
  if [ "$t" -lt 15 ]; then echo "== $name skipped (deadline)"; return 99; fi
  local s0=$(date +%s)
  timeout -k 5 "$t" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc ($(( $(date +%s) - s0 )) s)"
  grep -E "^(FAILED|ERROR)|passed|failed|SUMMARY|Error|error|^sanitize|mismatch|smoke" "$OUT/$name.log" | tail -${TAILN:-8}
  return $rc
}

gpu_finish() {
  tar -czf "$OUT/logs.tgz" -C "$OUT" --exclude logs.tgz . 2>/dev/null
  rm -rf "$OUT"/*.log "$OUT/res"
  echo "total $(( $(date +%s) - T0 )) s"
}

# fa3_impls: IMPLS for the benchmarks, with FA3 (scripts/fa3_ref) where .fa3/libfa3ref.so was carried
# (FLASH_ATTN_CUDA_BENCH_FA3_LIB exported), else ours and cuDNN only.
fa3_impls() {
  export FLASH_ATTN_CUDA_BENCH_FA3_LIB=$PWD/.fa3/libfa3ref.so
  if [ -f "$FLASH_ATTN_CUDA_BENCH_FA3_LIB" ]; then
    IMPLS=flash_attn_cuda,fa3_ref,sdpa_cudnn
  else
    echo "no $FLASH_ATTN_CUDA_BENCH_FA3_LIB: the runs go on without FA3"
    IMPLS=flash_attn_cuda,sdpa_cudnn
  fi
}

# fa3_required: LIB, the carried .fa3/libfa3ref.so (FLASH_ATTN_CUDA_BENCH_FA3_LIB exported), for calls that measure
# FA3 itself; exits 2 without it.
fa3_required() {
  LIB=$PWD/.fa3/libfa3ref.so
  [ -f "$LIB" ] || { echo "no $LIB (scripts/fa3_ref/build.sh)"; exit 2; }
  export FLASH_ATTN_CUDA_BENCH_FA3_LIB=$LIB
}

# ncu_source_pages REP NAME_BASE TAG:REGEX ...: from an Nsight Compute report of SourceCounters, each kernel's first
# two launches (REGEX over its NAME_BASE name: function or demangled) as OUT/res/src_<TAG>_<0|1>.csv (the source
# page, SASS), and OUT/res/src_details.csv; ncu's errors in OUT/src.err.
ncu_source_pages() {
  local rep=$1 base=$2 k skip
  shift 2
  for k in "$@"; do
    for skip in 0 1; do
      ncu --import "$rep" --kernel-name-base "$base" -k "regex:${k#*:}" --launch-skip $skip --launch-count 1 \
        --page source --csv --print-source sass > "$OUT/res/src_${k%%:*}_$skip.csv" 2>> "$OUT/src.err"
    done
  done
  ncu --import "$rep" --page details --csv --print-units base > "$OUT/res/src_details.csv" 2>/dev/null
}

# gpu_result_prefix: the prefix of result files, the benchmarks' own name for this GPU (bench.gpu_slug: h200,
# h100_80gb_hbm3), so that a call that got another GPU than asked for names its results after it; "gpu" when
# torch cannot say.
gpu_result_prefix() {
  python3 -c "import torch; from flash_attn_cuda.bench import gpu_slug; print(gpu_slug(torch.cuda.get_device_name()))" \
    2>/dev/null || echo gpu
}
