# flash_attn_cuda developer entry points. Build flags come from the environment
# (FLASH_ATTN_CUDA_ARCHS, FLASH_ATTN_CUDA_HDIMS, FLASH_ATTN_CUDA_DTYPES, FLASH_ATTN_CUDA_BACKWARD,
# FLASH_ATTN_CUDA_FEATURES, MAX_JOBS, CUTLASS_DIR).
PYTHON ?= python3
export CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(CUDA_HOME)/bin/nvcc
BUILD ?= build/cpp

.PHONY: install test bench bench-features bench-decode bench-cpp clean FORCE

install:            ## build the extension in place and install the package (editable)
	$(PYTHON) -m pip install --no-build-isolation --no-deps -e . -v

test:               ## CPU tests always; GPU tests when a GPU is present (skipped otherwise)
	$(PYTHON) -m pytest tests -q

# Result files are named after the GPU that ran them (flash_attn_cuda.bench.gpu_slug: NVIDIA H200 -> h200,
# NVIDIA A100-SXM4-80GB -> a100_sxm4_80gb), so only an H200 writes benchmarks/results/h200_*.
bench:              ## fwd, bwd, fwd+bwd vs SDPA backends on the FA2-paper grid (needs a GPU) -> benchmarks/results/<gpu>*
	$(PYTHON) -m flash_attn_cuda.bench --out benchmarks/results

bench-features:     ## GQA (32 q / 8 K/V heads) and varlen vs SDPA (needs a GPU) -> benchmarks/results/<gpu>_{gqa,varlen}.csv, <gpu>_features.md
	$(PYTHON) -m flash_attn_cuda.bench_features --out benchmarks/results

bench-decode:       ## KV-cache decode (GQA 32/8, MHA 32/32; contiguous and paged) vs SDPA (needs a GPU) -> benchmarks/results/<gpu>_decode.{csv,md,png}
	$(PYTHON) -m flash_attn_cuda.bench_decode --out benchmarks/results

# ---- C++ benchmark binaries: kernel core + CUDA runtime, no torch, no Python at run time.
CUTLASS_INC := $(shell $(PYTHON) third_party/find_cutlass.py 2>/dev/null)
ifeq ($(CUTLASS_INC),)
  ifneq ($(filter bench-cpp $(BUILD)/%,$(MAKECMDGOALS)),)
    $(error CUTLASS headers not found: pip install --no-deps nvidia-cutlass==4.2.0.0 or set CUTLASS_DIR)
  endif
endif
GENCODE = $(shell $(PYTHON) -c "import sys, os; sys.path.insert(0, 'tools'); import build_config as b; \
  print(' '.join(b.nvcc_gencode_flags(b.parse_archs(os.environ.get('FLASH_ATTN_CUDA_ARCHS')))))")
# The -D flags setup.py passes to every source (FLASH_ATTN_CUDA_BACKWARD, FLASH_ATTN_CUDA_FEATURES).
BUILD_DEFINES = $(shell $(PYTHON) -c "import sys, os; sys.path.insert(0, 'tools'); import build_config as b; \
  print(' '.join(b.compile_defines(b.from_env(os.environ))))")
NVCC_FLAGS = -O3 -std=c++20 -DNDEBUG --use_fast_math --expt-relaxed-constexpr -lineinfo $(GENCODE) \
  $(BUILD_DEFINES) -Icsrc -I$(CUTLASS_INC)

# bench_bwd needs the backward instantiations, which tools/gen_instantiations.py does not write with
# FLASH_ATTN_CUDA_BACKWARD=0; then it is skipped (and a stale one from another build removed).
bench-cpp:          ## build/cpp/bench_fwd, and bench_bwd unless FLASH_ATTN_CUDA_BACKWARD=0 (run on the GPU host)
	$(PYTHON) tools/gen_instantiations.py > /dev/null
	$(MAKE) $(BUILD)/bench_fwd
	@if ls csrc/instantiations/bwd_*.cu > /dev/null 2>&1; then $(MAKE) $(BUILD)/bench_bwd; \
	else rm -f $(BUILD)/bench_bwd; \
	  echo "bench-cpp: bench_bwd skipped: this build has no backward (FLASH_ATTN_CUDA_BACKWARD=0)"; fi

FWD_SRCS = csrc/fwd_dispatch.cu $(wildcard csrc/instantiations/fwd_*.cu)
BWD_SRCS = csrc/bwd_dispatch.cu $(wildcard csrc/instantiations/bwd_*.cu)
FWD_OBJS = $(patsubst csrc/%.cu,$(BUILD)/%.o,$(FWD_SRCS))
BWD_OBJS = $(patsubst csrc/%.cu,$(BUILD)/%.o,$(BWD_SRCS))
BENCH_DEPS = benchmarks/cpp/bench_common.h csrc/flash_api.h csrc/params.h

# make compares file times only, so a change of build flags (FLASH_ATTN_CUDA_*, CUTLASS_DIR, NVCC)
# would leave the objects "up to date". FLAGS_STAMP holds the nvcc line and the sources; its recipe
# runs every time (FORCE) but rewrites the file only when that text changed, and every object and
# binary depends on it. '+' runs it under make -n too, so a dry run shows whether flags changed
# (and, with other flags, leaves the stamp newer than the objects: at worst one rebuild too many).
FLAGS_STAMP = $(BUILD)/flags.stamp
STAMP_TEXT = '$(NVCC) $(NVCC_FLAGS)' '$(FWD_SRCS) $(BWD_SRCS)'

$(FLAGS_STAMP): FORCE
	+@mkdir -p $(dir $@); printf '%s\n' $(STAMP_TEXT) | cmp -s - $@ || printf '%s\n' $(STAMP_TEXT) > $@

FORCE:

$(BUILD)/%.o: csrc/%.cu $(wildcard csrc/*.h) csrc/instantiations/build_config.h $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@

$(BUILD)/bench_fwd: benchmarks/cpp/bench_fwd.cu $(BENCH_DEPS) $(FWD_OBJS) $(FLAGS_STAMP)
	$(NVCC) $(NVCC_FLAGS) $(filter %.cu %.o,$^) -o $@

$(BUILD)/bench_bwd: benchmarks/cpp/bench_bwd.cu $(BENCH_DEPS) $(FWD_OBJS) $(BWD_OBJS) $(FLAGS_STAMP)
	$(NVCC) $(NVCC_FLAGS) $(filter %.cu %.o,$^) -o $@

clean:
	rm -rf build flash_attn_cuda/*.so csrc/instantiations
