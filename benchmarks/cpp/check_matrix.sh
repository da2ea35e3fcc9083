#!/usr/bin/env bash
# Correctness matrix of the C++ benchmarks, on the GPU host after `make bench-cpp`:
# bench_fwd --check and bench_bwd --check for head dim 64/128/256 x fp16/bf16 x causal 0/1 at
# seqlen_q:seqlen_k 2048:2048 (whole tiles), 1000:1337 (ragged tiles) and 1337:1000 (causal rows
# that see no key), batch 2, heads 3; plus one bench_bwd --check --deterministic per head dim.
# One line per case, then "N passed, M failed, K skipped"; exits 1 if any case failed.
# Skipped: cases the build did not compile (the binaries exit 3: head dim / dtype not compiled,
# or too little shared memory on this GPU) and all bench_bwd cases when it was not built (a
# build with FLASH_ATTN_CUDA_BACKWARD=0). A head dim between compiled sizes runs the next
# compiled kernel up (e.g. 64 on a 128-only build), like the torch op.
#
#   benchmarks/cpp/check_matrix.sh [BUILD_DIR]                       (default build/cpp)
#   HDIMS="64 128" DTYPES=bf16 SEQLENS="1000:1337" benchmarks/cpp/check_matrix.sh
#   FAMILIES="sm80 sm90" benchmarks/cpp/check_matrix.sh   (bench_fwd once per kernel family: --family)
#   env: REPS (timed runs per case, default 3), CASE_TIMEOUT (seconds per case, default 300),
#        NVIDIA_SMI (the nvidia-smi asked whether a GPU is visible; tests point it at a stand-in)
# Without a visible GPU it prints one line and exits 2 before running any case.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/cpp}
hdims=${HDIMS:-64 128 256}
dtypes=${DTYPES:-fp16 bf16}
seqlens=${SEQLENS:-2048:2048 1000:1337 1337:1000}
common=(--batch 2 --heads 3 --reps "${REPS:-3}" --check)
passed=0 failed=0 skipped=0

[ -x "$build/bench_fwd" ] || { echo "check_matrix: $build/bench_fwd not found; run make bench-cpp first" >&2; exit 2; }

# Why no GPU is visible (nothing when one is): each case would otherwise fail on its own.
no_gpu_reason() {
  local smi=${NVIDIA_SMI:-nvidia-smi} list
  case ${CUDA_VISIBLE_DEVICES-all} in
    "" | -1*) echo "CUDA_VISIBLE_DEVICES='$CUDA_VISIBLE_DEVICES' hides every GPU"; return ;;
  esac
  command -v "$smi" > /dev/null || { echo "$smi not found"; return; }
  list=$("$smi" -L 2>&1) || { echo "$smi -L failed: $(printf '%s\n' "$list" | head -1)"; return; }
  printf '%s\n' "$list" | grep -q '^GPU [0-9]' || echo "$smi -L lists no GPU"
}
reason=$(no_gpu_reason)
[ -z "$reason" ] || { echo "check_matrix: no CUDA GPU visible ($reason); run it on the GPU host" >&2; exit 2; }

# run_case BINARY ARGS...: one line "<status> <binary> <args> | <its last output line>".
run_case() {
  local bin=$1 status out rc
  shift
  if [ ! -x "$build/$bin" ]; then
    skipped=$((skipped + 1))
    printf '%-4s %s %s | not built (this build has no backward)\n' skip "$bin" "$*"
    return
  fi
  out=$(timeout "${CASE_TIMEOUT:-300}" "$build/$bin" "${common[@]}" "$@" 2>&1)
  rc=$?
  case $rc in
    0) status=ok; passed=$((passed + 1)) ;;
    3) status=skip; skipped=$((skipped + 1)) ;;
    124) status=FAIL; failed=$((failed + 1)); out="$out
timed out after ${CASE_TIMEOUT:-300} s" ;;
    *) status=FAIL; failed=$((failed + 1)) ;;
  esac
  printf '%-4s %s %s | %s\n' "$status" "$bin" "$*" "$(printf '%s\n' "$out" | tail -1)"
  # the rest of a failure's output (header, error messages), indented, for the log
  if [ "$status" = FAIL ]; then printf '%s\n' "$out" | head -n -1 | sed 's/^/       /'; fi
}

for d in $hdims; do
  for t in $dtypes; do
    for causal in 0 1; do
      for s in $seqlens; do
        args=(--hdim "$d" --dtype "$t" --causal "$causal" --seqlen "${s%%:*}" --seqlen-k "${s##*:}")
        if [ -n "${FAMILIES:-}" ]; then
          for f in $FAMILIES; do run_case bench_fwd "${args[@]}" --family "$f"; done
        else
          run_case bench_fwd "${args[@]}"
        fi
        run_case bench_bwd "${args[@]}"
      done
    done
  done
  det_dtype=bf16
  case " $dtypes " in *" bf16 "*) ;; *) det_dtype=${dtypes%% *} ;; esac
  run_case bench_bwd --hdim "$d" --dtype "$det_dtype" --causal 1 --seqlen 1000 --seqlen-k 1337 --deterministic
done

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
