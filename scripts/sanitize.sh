#!/usr/bin/env bash
# compute-sanitizer memcheck, racecheck and synccheck on a small ragged workload (GPU host):
#   scripts/sanitize.sh [scripts/sanitize_kvcache.py | scripts/sanitize_small_tiles.py | scripts/sanitize_sm90_dropout.py] [script args]
#   e.g. scripts/sanitize.sh scripts/sanitize_sm90_bwd.py --dropout 0.2   (the sm90 backward's dropout variant)
# One line per tool with its verdict; exits 1 if any tool reports an error.
set -uo pipefail
script=${1:-scripts/sanitize_kvcache.py}
status=0
for tool in memcheck racecheck synccheck; do
  log=${OUT:-/tmp}/sanitize_${tool}.log
  PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool "$tool" --error-exitcode 9 \
    python3 "$script" "${@:2}" > "$log" 2>&1
  rc=$?
  echo "sanitize $tool: rc=$rc $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^sanitize_" "$log" | tr '\n' ' ')"
  [ $rc -eq 0 ] || status=1
done
exit $status
