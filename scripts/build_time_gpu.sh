#!/usr/bin/env bash
# One device call: the default build as a user gets it on the GPU host (`make install`, no
# FLASH_ATTN_CUDA_* / TORCH_CUDA_ARCH_LIST / MAX_JOBS set: the visible H200 -> archs "90;90a", every
# head dim, both dtypes, forward + backward + KV-cache + features + dropout, both families), timed,
# with ninja's finish time of each object (NINJA_STATUS; pip's editable build deletes its ninja log);
# then AFTER_BUILD (a command, e.g. a sanitizer run on a candidate's kernel) and `make test` on that build
# (TESTS: the pytest paths, default tests) until the call's deadline.
#   OUT=$OUT scripts/build_time_gpu.sh        (needs the nvidia-cutlass wheel in .whl/)
#   OUT=$OUT BUILD_EXTRA="FLASH_ATTN_CUDA_SM90_SHORT_CAUSAL=1" scripts/build_time_gpu.sh   (with a candidate)
#   AFTER_BUILD="bash scripts/sanitize.sh scripts/sanitize_sm90_fwd.py --hdims 64" TESTS="tests/test_attention_gpu.py"
# Results in $OUT/logs.tgz: build.log (ends with the `time` line), tests.log (pytest -v, per test).
set -uo pipefail
T0=$(date +%s)
OUT=${OUT:-$PWD/build_time_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/nvidia_cutlass-*.whl \
  > /dev/null 2>&1 && export PYTHONPATH=/tmp/site
unset MAX_JOBS TORCH_CUDA_ARCH_LIST $(env | grep -o "^FLASH_ATTN_CUDA_[A-Z_]*")
# BUILD_EXTRA="FLASH_ATTN_CUDA_X=1 ...": settings on top of the default (a candidate default's build time).
for kv in ${BUILD_EXTRA:-}; do export "$kv"; echo "build setting: $kv"; done
echo "cores $(nproc), memory $(free -g | awk '/Mem:/{print $2}') GiB, $(nvidia-smi --query-gpu=name --format=csv,noheader)"
TIMEFORMAT="build: %R s wall, %U s user + %S s sys"
export NINJA_STATUS="[%f/%t %es] "
{ time timeout -k 10 "${BUILD_TIMEOUT:-480}" make install > "$OUT/build.log" 2>&1; echo "make install rc=$?" >> "$OUT/build.log"; } 2>> "$OUT/build.log"
tail -2 "$OUT/build.log"
grep -m1 -E "archs|FLASH_ATTN_CUDA_ARCHS" "$OUT/build.log"
# The objects that finished last (ninja prints "[done/total elapsed] command" as each one finishes).
grep -oE "^\[[0-9]+/[0-9]+ [0-9.]+s\] .* -c [^ ]+\.(cu|cpp)" "$OUT/build.log" | sed -E 's/^(\[[^]]*\]).* -c ([^ ]+)$/\1 \2/' \
  | sed -E 's|[^ ]*/||2' | tail -8
seconds_left() { echo $(( ${DEADLINE:-575} - ($(date +%s) - T0) )); }
if [ -n "${AFTER_BUILD:-}" ]; then
  left=$(seconds_left)
  echo "after build: $AFTER_BUILD (${left} s left)"
  if [ "$left" -gt 30 ]; then timeout -k 5 "$left" bash -c "$AFTER_BUILD"; echo "after build rc=$?"; fi
fi
left=$(seconds_left)
if [ "$left" -gt 30 ]; then
  timeout -k 5 "$left" python3 -m pytest ${TESTS:-tests} -v -p no:cacheprovider -rfE > "$OUT/tests.log" 2>&1
  echo "make test rc=$? (${left} s allowed)"
  grep -cE " PASSED" "$OUT/tests.log" | sed 's/^/passed: /'; grep -cE " SKIPPED" "$OUT/tests.log" | sed 's/^/skipped: /'
  grep -E " (FAILED|ERROR)" "$OUT/tests.log" | head -20; tail -3 "$OUT/tests.log"
fi
tar -czf "$OUT/logs.tgz" -C "$OUT" build.log tests.log 2>/dev/null && rm -f "$OUT"/build.log "$OUT"/tests.log
echo "total $(( $(date +%s) - T0 )) s"
