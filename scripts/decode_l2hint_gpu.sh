#!/usr/bin/env bash
# One device call: the decode K/V cp.asyncs' L2 prefetch size (decode_kernel.h,
# FLASH_ATTN_CUDA_DECODE_L2_PREFETCH: 128 = the default, 256, 64). Builds d = 128 bf16 (sm_90, forward +
# KV cache) once, then recompiles only the decode unit per variant from the build log's own nvcc line
# (plus the -D) and relinks it into a copy of the package under /tmp/l2v<V>/; bench_decode in the order
# 128, 256, 64, 128, 256, each with cuDNN in the same run; the KV-cache GPU tests on the 256 variant.
#   OUT=$OUT scripts/decode_l2hint_gpu.sh        (needs the nvidia-cutlass wheel in .whl/)
set -uo pipefail
. "$(dirname "$0")/gpu_stage_lib.sh"
gpu_setup l2hint
export FLASH_ATTN_CUDA_ARCHS="90" FLASH_ATTN_CUDA_HDIMS=128 FLASH_ATTN_CUDA_DTYPES=bf16 \
  FLASH_ATTN_CUDA_BACKWARD=0 FLASH_ATTN_CUDA_SMEM_TILES=0 MAX_JOBS=8
DEADLINE=${DEADLINE:-570}
gpu_build 200
variant() {  # variant V: /tmp/l2v$V/flash_attn_cuda with the decode unit built with the -D
  local v=$1 dir=/tmp/l2v$1
  rm -rf "$dir" && mkdir -p "$dir" && cp -r flash_attn_cuda tests pyproject.toml "$dir/"
  python3 - "$OUT/build.log" "$v" "$dir" <<'PY'
import re, shlex, subprocess, sys
log, v, d = sys.argv[1], sys.argv[2], sys.argv[3]
lines = open(log).read().splitlines()
cc = next(l for l in lines if "nvcc" in l and "decode_hdim128_bf16.o" in l)
cc = re.sub(r"^\[\d+/\d+\] ", "", cc)
args = shlex.split(cc)
i = args.index("-MD"); del args[i:i + 3]                  # no depfile into the base build dir
args[args.index("-o") + 1] = f"{d}/decode.o"
args.append(f"-DFLASH_ATTN_CUDA_DECODE_L2_PREFETCH={v}")
subprocess.run(args, check=True)
ld = next(l for l in lines if l.startswith("/opt/gcc/bin/g++") and "-shared" in l)
args = shlex.split(ld)
args = [f"{d}/decode.o" if a.endswith("decode_hdim128_bf16.o") else a for a in args]
so = args[args.index("-o") + 1]
args[args.index("-o") + 1] = f"{d}/flash_attn_cuda/" + so.split("/")[-1]
subprocess.run(args, check=True)
print("variant", v, "ok")
PY
  ( cd "$dir" && PYTHONPATH=$PWD python3 -c "import flash_attn_cuda._C as c; print('loads', c.__file__)" )
}
( variant 256 > "$OUT/variant256.log" 2>&1; echo "variant 256 rc=$?"; tail -1 "$OUT/variant256.log" ) &
( variant 64 > "$OUT/variant64.log" 2>&1; echo "variant 64 rc=$?"; tail -1 "$OUT/variant64.log" ) &
wait
ARGS="--heads 32:8 --batches 1,8,32,64 --seqlens 4096,32768 --impls flash_attn_cuda,sdpa_cudnn --layouts contiguous,paged16 --max-kv-gb 8"
run_bench() {  # run_bench TAG V
  if [ "$2" = 128 ]; then
    TAILN=0 stage bench_$1 50 python3 -m flash_attn_cuda.bench_decode $ARGS --prefix h200_l2_$1 --out "$OUT/res"
  else
    ( cd /tmp/l2v$2 && PYTHONPATH=$PWD TAILN=0 stage bench_$1 50 python3 -m flash_attn_cuda.bench_decode $ARGS --prefix h200_l2_$1 --out "$OUT/res" )
  fi
}
run_bench 128a 128; run_bench 256a 256; run_bench 64a 64; run_bench 128b 128; run_bench 256b 256
for t in 128a 256a 64a 128b 256b; do echo "## $t"; grep -E "^\| [0-9]" "$OUT/res/h200_l2_${t}_decode.md" 2>/dev/null | awk -F'|' '{print $2,$3,"ours",$5,"pct",$7,"p16",$8,"cudnn",$11,"ratio",$14,$15}'; done
( cd /tmp/l2v256 && PYTHONPATH=$PWD TAILN=4 stage tests256 120 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_kvcache_gpu.py
 )
gpu_finish
