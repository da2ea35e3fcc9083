#!/usr/bin/env bash
# One device call: compile-time variants side by side. Builds the extension once (default: d = 128 bf16,
# forward + KV cache, archs 90;90a; override with the FLASH_ATTN_CUDA_* variables), then per variant
# recompiles only UNITS (object names of the build) from the build log's own nvcc lines plus the
# variant's -D flags, relinks into a copy of the package under /tmp/v_<name>/, and runs BENCH (a
# module and its arguments; --prefix <gpu>_<tag> --out are appended, <gpu> bench.gpu_slug's name of the GPU) from that copy. ORDER lists
# tag:variant[:ENV=VAL,...] runs (default: base, each variant, base again; base = the build itself; the
# settings are exported for that run only, e.g. base1w:base:FLASH_ATTN_CUDA_DECODE_WIDE=1). Benchmarks
# check every impl against the float32 reference before timing it.
#   OUT=$OUT UNITS="decode_hdim128_bf16.o decode_dispatch.o" VARIANTS="R:-DX=1 B:-DY=2,-DZ=3" \
#     BENCH="flash_attn_cuda.bench_decode --heads 32:8 ..." scripts/variants_gpu.sh   (cutlass wheel in .whl/)
#   TEST_VARIANT=name TESTS="tests/x.py": that variant's copy runs pytest on TESTS after the benches, then AFTER
#   (a command, e.g. AFTER="bash scripts/sanitize.sh scripts/sanitize_sm90_bwd.py 128") in the time left.
#   SMOKE="python3 scripts/x.py": a first check of each variant (60 s); a failed one is left out.
#   A variant token NVCC=PATH compiles that variant's units with another nvcc (scripts/ptxas_shadow.sh: the
#   same nvcc with another release's ptxas), e.g. VARIANTS="p128:NVCC=/tmp/cuda_p128/bin/nvcc".
set -uo pipefail
. "$(dirname "$0")/gpu_stage_lib.sh"
gpu_setup variants
export FLASH_ATTN_CUDA_ARCHS=${FLASH_ATTN_CUDA_ARCHS:-"90;90a"} FLASH_ATTN_CUDA_HDIMS=${FLASH_ATTN_CUDA_HDIMS:-128} \
  FLASH_ATTN_CUDA_DTYPES=${FLASH_ATTN_CUDA_DTYPES:-bf16} FLASH_ATTN_CUDA_BACKWARD=${FLASH_ATTN_CUDA_BACKWARD:-0} \
  FLASH_ATTN_CUDA_FEATURES=${FLASH_ATTN_CUDA_FEATURES:-0} FLASH_ATTN_CUDA_SMEM_TILES=0 MAX_JOBS=${MAX_JOBS:-12}
DEADLINE=${DEADLINE:-570}
gpu_build 240
variant() {  # variant NAME DEFINES...: /tmp/v_NAME/flash_attn_cuda with UNITS rebuilt
  local name=$1 dir=/tmp/v_$1; shift
  rm -rf "$dir" && mkdir -p "$dir" && cp -r flash_attn_cuda tests scripts pyproject.toml "$dir/"
  rm -f "$dir"/flash_attn_cuda/_C*.so   # a variant that fails to link must not load the base build
  python3 - "$OUT/build.log" "$dir" "$UNITS" "$@" <<'PY'
import re, shlex, subprocess, sys
log, d, units, defs = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4:]
nvcc = next((x.split("=", 1)[1] for x in defs if x.startswith("NVCC=")), None)  # another compiler
defs = [x for x in defs if not x.startswith("NVCC=")]
lines = open(log).read().splitlines()
objs, procs = {}, []
for unit in units:  # side by side: variants x units nvcc at once (not MAX_JOBS; a few GB each)
    cc = next(l for l in lines if "nvcc" in l and "/" + unit + " " in l)
    args = shlex.split(re.sub(r"^\[\d+/\d+\] ", "", cc))
    if "-MD" in args:
        i = args.index("-MD"); del args[i:i + 3]           # no depfile into the base build dir
    args[args.index("-o") + 1] = f"{d}/{unit}"
    if nvcc:
        assert args[0].endswith("nvcc"), args[0]
        args[0] = nvcc
    procs.append(subprocess.Popen(args + defs))
    objs[unit] = f"{d}/{unit}"
if any([proc.wait() != 0 for proc in procs]):  # every unit waited for
    sys.exit("variant: a unit failed to compile")
ld = next(l for l in lines if l.startswith("/opt/gcc/bin/g++") and "-shared" in l)
args = shlex.split(ld)
args = [next((o for u, o in objs.items() if a.endswith("/" + u)), a) for a in args]
so = args[args.index("-o") + 1]
args[args.index("-o") + 1] = f"{d}/flash_attn_cuda/" + so.split("/")[-1]
subprocess.run(args, check=True)
print("variant", d, "ok")
PY
  [ $? -eq 0 ] || return 1
  ( cd "$dir" && PYTHONPATH=$PWD python3 -c "import flash_attn_cuda._C as c; print('loads', c.__file__)" )
}
for v in $VARIANTS; do
  n=${v%%:*}
  ( variant "$n" $(echo "${v#*:}" | tr ',' ' ') > "$OUT/variant_$n.log" 2>&1; echo "variant $n rc=$?"; tail -1 "$OUT/variant_$n.log"
    grep -A2 "Function properties" "$OUT/variant_$n.log" | grep -E "spill" | sort | uniq -c | head -3 ) &
done
wait
# SMOKE="python3 scripts/x.py": each variant first runs it (60 s); one that fails or hangs loses its build,
# so its benches and tests are skipped instead of hanging until their timeouts.
if [ -n "${SMOKE:-}" ]; then
  for v in $VARIANTS; do
    n=${v%%:*}
    ls /tmp/v_$n/flash_attn_cuda/_C*.so > /dev/null 2>&1 || continue
    ( cd /tmp/v_$n && PYTHONPATH=$PWD timeout -k 5 60 $SMOKE > "$OUT/smoke_$n.log" 2>&1 ); rc=$?
    echo "smoke $n rc=$rc: $(tail -2 "$OUT/smoke_$n.log" | tr '\n' ' ' | cut -c1-300)"
    [ $rc -eq 0 ] || rm -f /tmp/v_$n/flash_attn_cuda/_C*.so
  done
fi
GPU_SLUG=$(gpu_result_prefix)  # the results' file prefix (gpu_stage_lib.sh)
run_bench() {  # run_bench TAG NAME [ENV=VAL,...] (base: the build itself; the settings hold for this run only)
  local dir=$PWD
  [ "$2" = base ] || dir=/tmp/v_$2
  ls "$dir"/flash_attn_cuda/_C*.so > /dev/null 2>&1 || { echo "== bench_$1 skipped: no build in $dir"; return 1; }
  [ -z "${3:-}" ] || echo "== bench_$1 with ${3//,/ }"
  ( cd "$dir" && for kv in $(echo "${3:-}" | tr ',' ' '); do export "$kv"; done
    PYTHONPATH=$PWD TAILN=0 stage bench_$1 ${BENCH_TIMEOUT:-90} python3 -m $BENCH --prefix ${GPU_SLUG}_$1 --out "$OUT/res" )
}
ORDER=${ORDER:-"base1:base $(for v in $VARIANTS; do echo -n "${v%%:*}:${v%%:*} "; done) base2:base"}
for o in $ORDER; do  # TAG:NAME or TAG:NAME:ENV=VAL[,ENV=VAL]
  IFS=: read -r tag name envs <<< "$o"; run_bench "$tag" "$name" "$envs"
done
for o in $ORDER; do
  t=${o%%:*}; echo "## $t"
  for f in "$OUT/res/${GPU_SLUG}_${t}.md" "$OUT/res/${GPU_SLUG}_${t}_"*.md; do [ -f "$f" ] || continue; grep -E "^\| [0-9]" "$f" | cut -c1-${SUMMARY_COLS:-400}; grep -il mismatch "$f"; done
done
if [ -n "${TEST_VARIANT:-}" ]; then
  ( cd /tmp/v_$TEST_VARIANT && PYTHONPATH=$PWD TAILN=4 stage tests_$TEST_VARIANT 150 python3 -m pytest -q -p no:cacheprovider -rfE ${TESTS:-tests/test_kvcache_gpu.py} )
  # AFTER: a command run in that variant's copy once its tests are done, e.g. the sanitizers on it.
  [ -z "${AFTER:-}" ] || ( cd /tmp/v_$TEST_VARIANT && PYTHONPATH=$PWD TAILN=6 stage after_$TEST_VARIANT ${AFTER_TIMEOUT:-150} bash -c "$AFTER" )
fi
gpu_finish
