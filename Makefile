# flash_attn_cuda developer entry points. Build flags come from the environment
# (FLASH_ATTN_CUDA_ARCHS, FLASH_ATTN_CUDA_HDIMS, FLASH_ATTN_CUDA_DTYPES, FLASH_ATTN_CUDA_BACKWARD,
# FLASH_ATTN_CUDA_FEATURES, MAX_JOBS, CUTLASS_DIR).
PYTHON ?= python3
export CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(CUDA_HOME)/bin/nvcc
BUILD ?= build/cpp

.PHONY: install test bench bench-features bench-decode bench-cpp check-sass sm90-check sm90-objects clean FORCE

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
  ifneq ($(filter bench-cpp check-sass sm90-objects $(BUILD)/%,$(MAKECMDGOALS)),)
    $(error CUTLASS headers not found: pip install --no-deps nvidia-cutlass==4.2.0.0 or set CUTLASS_DIR)
  endif
endif
# Flags tools/build_config.py derives from the environment (FLASH_ATTN_CUDA_*; archs unset: the visible
# GPUs, else 80;90;90a), each computed once, at first use: GENCODE for every source but the sm90
# family's, SM90_GENCODE (empty without 90a) for csrc/instantiations/sm90_*.cu, BUILD_DEFINES the -D
# flags setup.py passes to every source (FLASH_ATTN_CUDA_BACKWARD, FLASH_ATTN_CUDA_FEATURES).
GENCODE = $(eval GENCODE := $(shell $(PYTHON) tools/build_config.py gencode))$(GENCODE)
SM90_GENCODE = $(eval SM90_GENCODE := $(shell $(PYTHON) tools/build_config.py sm90-flags))$(SM90_GENCODE)
BUILD_DEFINES = $(eval BUILD_DEFINES := $(shell $(PYTHON) tools/build_config.py defines))$(BUILD_DEFINES)
NVCC_COMMON = -O3 -std=c++20 -DNDEBUG --use_fast_math --expt-relaxed-constexpr -lineinfo $(BUILD_DEFINES) \
  -Icsrc -I$(CUTLASS_INC)
NVCC_FLAGS = $(NVCC_COMMON) $(GENCODE)
# -Xptxas -v: the objects' logs (OBJ.log) carry every ptxas line for tools/check_sass.py.
NVCC_SM90_FLAGS = $(NVCC_COMMON) $(SM90_GENCODE) -Xptxas -v

# bench_bwd needs the backward instantiations, which tools/gen_instantiations.py does not write with
# FLASH_ATTN_CUDA_BACKWARD=0; then it is skipped (and a stale one from another build removed).
bench-cpp:          ## build/cpp/bench_fwd, and bench_bwd unless FLASH_ATTN_CUDA_BACKWARD=0 (run on the GPU host)
	$(PYTHON) tools/gen_instantiations.py > /dev/null
	$(MAKE) $(BUILD)/bench_fwd
	@if ls csrc/instantiations/bwd_*.cu > /dev/null 2>&1; then $(MAKE) $(BUILD)/bench_bwd; \
	else rm -f $(BUILD)/bench_bwd; \
	  echo "bench-cpp: bench_bwd skipped: this build has no backward (FLASH_ATTN_CUDA_BACKWARD=0)"; fi

# The sm90 family's units (written by the generator only with 90a): the forward's link into both
# benchmarks, the backward's (its main kernel, called by bwd_dispatch.cu) into bench_bwd.
SM90_FWD_SRCS = $(wildcard csrc/instantiations/sm90_fwd_*.cu)
SM90_BWD_SRCS = $(wildcard csrc/instantiations/sm90_bwd_*.cu)
SM90_SRCS = $(SM90_FWD_SRCS) $(SM90_BWD_SRCS)
FWD_SRCS = csrc/fwd_dispatch.cu $(wildcard csrc/instantiations/fwd_*.cu) $(SM90_FWD_SRCS)
BWD_SRCS = csrc/bwd_dispatch.cu $(wildcard csrc/instantiations/bwd_*.cu) $(SM90_BWD_SRCS)
SM90_OBJS = $(patsubst csrc/%.cu,$(BUILD)/%.o,$(SM90_SRCS))
FWD_OBJS = $(patsubst csrc/%.cu,$(BUILD)/%.o,$(FWD_SRCS))
BWD_OBJS = $(patsubst csrc/%.cu,$(BUILD)/%.o,$(BWD_SRCS))
BENCH_DEPS = benchmarks/cpp/bench_common.h benchmarks/cpp/sm90_tile_counter.h csrc/flash_api.h csrc/params.h
KERNEL_HEADERS = $(wildcard csrc/*.h csrc/sm90/*.h)

# make compares file times only, so a change of build flags (FLASH_ATTN_CUDA_*, CUTLASS_DIR, NVCC)
# would leave the objects "up to date". FLAGS_STAMP holds the nvcc line and the sources; its recipe
# runs every time (FORCE) but rewrites the file only when that text changed, and every object and
# binary depends on it. '+' runs it under make -n too, so a dry run shows whether flags changed
# (and, with other flags, leaves the stamp newer than the objects: at worst one rebuild too many).
FLAGS_STAMP = $(BUILD)/flags.stamp
STAMP_TEXT = '$(NVCC) $(NVCC_FLAGS)' 'sm90: $(NVCC_SM90_FLAGS)' '$(FWD_SRCS) $(BWD_SRCS)'

$(FLAGS_STAMP): FORCE
	+@mkdir -p $(dir $@); printf '%s\n' $(STAMP_TEXT) | cmp -s - $@ || printf '%s\n' $(STAMP_TEXT) > $@

FORCE:

$(BUILD)/%.o: csrc/%.cu $(KERNEL_HEADERS) csrc/instantiations/build_config.h $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@

# sm90 units: sm_90a alone (the more specific pattern wins); nvcc's output kept in OBJ.log (and shown).
$(BUILD)/instantiations/sm90_%.o: csrc/instantiations/sm90_%.cu $(KERNEL_HEADERS) csrc/instantiations/build_config.h \
    $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_SM90_FLAGS) -c $< -o $@ > $@.log 2>&1; rc=$$?; cat $@.log; exit $$rc

$(BUILD)/bench_fwd: benchmarks/cpp/bench_fwd.cu $(BENCH_DEPS) $(FWD_OBJS) $(FLAGS_STAMP)
	$(NVCC) $(NVCC_FLAGS) $(filter %.cu %.o,$^) -o $@

$(BUILD)/bench_bwd: benchmarks/cpp/bench_bwd.cu $(BENCH_DEPS) $(FWD_OBJS) $(BWD_OBJS) $(FLAGS_STAMP)
	$(NVCC) $(NVCC_FLAGS) $(filter %.cu %.o,$^) -o $@

# The build-time check of the sm90 family (tools/check_sass.py): its objects of this build's flags
# (FLASH_ATTN_CUDA_ARCHS with 90a, _HDIMS, _DTYPES) hold sm_90a HGMMA and no BPT.TRAP, and ptxas
# printed no wgmma serialisation warning (C7510-C7520) while compiling them.
check-sass:         ## compile the sm90 objects (build/cpp/instantiations/sm90_*.o) and check their SASS and ptxas logs
	$(PYTHON) tools/gen_instantiations.py > /dev/null
	@if [ -z "$(SM90_GENCODE)" ]; then echo "check-sass: this build has no sm90 family: add 90a to FLASH_ATTN_CUDA_ARCHS" >&2; exit 2; fi
	$(MAKE) sm90-check

# A sub-make, so the sm90 sources the generator just wrote are seen (make expands a recipe, and its
# wildcards, before running its first line).
sm90-check: sm90-objects
	$(PYTHON) tools/check_sass.py $(foreach o,$(SM90_OBJS),--log $(o).log) $(SM90_OBJS)

sm90-objects: $(SM90_OBJS)
	@[ -n "$(SM90_OBJS)" ] || { echo "check-sass: no sm90 unit for these head dims (64, 128, 256)" >&2; exit 2; }

clean:
	rm -rf build flash_attn_cuda/*.so csrc/instantiations
