#!/usr/bin/env bash
# One device call: the decode K/V cp.asyncs' L2 prefetch size (decode_kernel.h,
# FLASH_ATTN_CUDA_DECODE_L2_PREFETCH: 128 = the default, 256, 64), through scripts/variants_gpu.sh: builds
# d = 128 bf16 (sm_90, forward + KV cache) once, recompiles the decode unit per variant with the -D and
# relinks it into a copy of the package; bench_decode in the order 128, 256, 64, 128, 256, each with cuDNN
# in the same run (results h200_l2_<tag>_decode.*); the KV-cache GPU tests on the 256 variant.
#   OUT=$OUT scripts/decode_l2hint_gpu.sh        (needs the nvidia-cutlass wheel in .whl/)
set -uo pipefail
D=-DFLASH_ATTN_CUDA_DECODE_L2_PREFETCH
export FLASH_ATTN_CUDA_ARCHS=90 FLASH_ATTN_CUDA_FEATURES=1 MAX_JOBS=8 BENCH_TIMEOUT=50 \
  UNITS="decode_hdim128_bf16.o" VARIANTS="256:$D=256 64:$D=64" \
  ORDER="l2_128a:base l2_256a:256 l2_64a:64 l2_128b:base l2_256b:256" \
  BENCH="flash_attn_cuda.bench_decode --heads 32:8 --batches 1,8,32,64 --seqlens 4096,32768 --impls flash_attn_cuda,sdpa_cudnn --layouts contiguous,paged16 --max-kv-gb 8" \
  TEST_VARIANT=256 TESTS=tests/test_kvcache_gpu.py
exec "$(dirname "$0")/variants_gpu.sh"
