#!/usr/bin/env bash
# The persistent sm90 forward on the GPU host (issue 11, benchmarks/NOTES.md "v4"): two stages, each
# one device command of < 10 min; every process under `timeout -k`, output line-buffered, logs in $OUT.
#   scripts/sm90_persistent_gpu.sh harness   C++ harness (benchmarks/cpp/sm90_fwd_check.cu), bf16
#       d = 64/128/256: the watchdog build first ("persistent wd x3": a stuck mbarrier wait prints its
#       site and traps), then "persistent x3" (3 CTAs, many tiles each, empty causal tiles) and
#       "persistent" (one CTA per SM) on 40 ragged/causal/GQA shapes each, bit for bit against the
#       one-tile kernel and within 2x sm80's error of an fp32 reference; at every timed FA2-grid shape
#       bit for bit again, then TFLOP/s of sm80 / tile / persistent; compute-sanitizer x3 on --small
#       (tile + persistent x3). ~6 min.
#   scripts/sm90_persistent_gpu.sh package   the extension with FLASH_ATTN_CUDA_SM90_PERSISTENT=1 (bf16,
#       d = 64/128, forward only; ~2 min), then scripts/sm90_persistent_smoke.py under `timeout 60`
#       (first the autouse fixture's call: 1 CTA, q = k = v (1, 256, 2, d), the call that hung on
#       2026-12-02; then multi-tile shapes on 1/3/all CTAs, bit for bit vs the one-tile kernel; a
#       hang costs 1 min and stops the stage), tests/test_sm90_persistent_gpu.py (1/3/7 CTAs and one
#       per SM vs the one-tile kernel, bit for bit; causal over L2 sections and from a CUDA graph), then
#       the forward benchmark: tile vs persistent vs cuDNN at 1k/4k/16k, causal and not. ~6 min, at
#       most 580 s (the timeouts).
# Needs the nvidia-cutlass wheel in .whl/ (or CUTLASS_DIR).
set -uo pipefail
OUT=${OUT:-$PWD/persist_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ -z "${CUTLASS_DIR:-}" ]; then
  rm -rf /tmp/cutlass_wheel && mkdir -p /tmp/cutlass_wheel
  python3 -c "import zipfile,glob,sys; zipfile.ZipFile(glob.glob('.whl/nvidia_cutlass-*.whl')[0]).extractall(sys.argv[1])" /tmp/cutlass_wheel
  export CUTLASS_DIR=/tmp/cutlass_wheel/cutlass_library/source
fi
case "${1:-}" in
  harness)
    SM90_PARTS="0 1 2 6 7 8 13 14 15 16" SM90_RUN_TIMEOUT=${SM90_RUN_TIMEOUT:-200} \
      timeout -k 10 540 bash scripts/sm90_check.sh /tmp/sm90_persist > "$OUT/harness.log" 2>&1
    echo "harness rc=$?" | tee -a "$OUT/harness.log"
    grep -E "build:|HGMMA|spill|C75|check:|persistent == tile|xcheck|FAIL|watchdog|seqlen|FA2 grid|compute-sanitizer|rc=|error" \
      "$OUT/harness.log" | tail -120
    ;;
  package)
    export FLASH_ATTN_CUDA_ARCHS="90;90a" FLASH_ATTN_CUDA_HDIMS=64,128 FLASH_ATTN_CUDA_DTYPES=bf16 \
      FLASH_ATTN_CUDA_BACKWARD=0 FLASH_ATTN_CUDA_FEATURES=0 FLASH_ATTN_CUDA_KVCACHE=0 \
      FLASH_ATTN_CUDA_SM90_PERSISTENT=1 FLASH_ATTN_CUDA_PTXAS_VERBOSE=1 MAX_JOBS=$(nproc)
    t0=$(date +%s)
    timeout -k 10 240 python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1
    brc=$?
    echo "build rc=$brc in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/build.log"
    [ $brc -eq 0 ] || { tail -30 "$OUT/build.log"; exit $brc; }
    grep -A3 "fwd_kernel_persistent" "$OUT/build.log" | grep -E "registers|spill" | sort | uniq -c
    grep -E "C75[0-9][0-9]" "$OUT/build.log" | head -5
    timeout -k 5 60 python3 scripts/sm90_persistent_smoke.py > "$OUT/smoke.log" 2>&1
    src=$?
    echo "smoke rc=$src" | tee -a "$OUT/smoke.log"
    cat "$OUT/smoke.log" | tail -40
    [ $src -eq 0 ] || exit $src
    timeout -k 10 110 python3 -m pytest tests/test_sm90_persistent_gpu.py -q -p no:cacheprovider > "$OUT/tests.log" 2>&1
    echo "tests rc=$?" | tee -a "$OUT/tests.log"
    tail -15 "$OUT/tests.log"
    timeout -k 10 170 python3 -m flash_attn_cuda.bench --directions fwd --hdims 64,128 \
      --seqlens 1024,4096,16384 --causal both --impls flash_attn_cuda_sm90,flash_attn_cuda_sm90_persistent,sdpa_cudnn \
      --out "$OUT" > "$OUT/bench.log" 2>&1
    echo "bench rc=$?" | tee -a "$OUT/bench.log"
    grep -E "^(\||#)" "$OUT/bench.log" | head -60
    ;;
  *) echo "usage: $0 harness|package" >&2; exit 2 ;;
esac
