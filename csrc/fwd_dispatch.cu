// Dispatch from runtime (family, dtype, head dim) to the instantiations this build compiled. The
// set is fixed at build time: tools/gen_instantiations.py writes instantiations/build_config.h
// (FLASH_FOR_EACH_HDIM, FLASH_FOR_EACH_DTYPE, FLASH_SM90_FOR_EACH_HDIM, FLASH_SM90_DROPOUT_FOR_EACH_HDIM)
// from FLASH_ATTN_CUDA_HDIMS /
// _DTYPES / _ARCHS. Declarations only: the kernels are compiled once, in instantiations/*.cu.
#include <cutlass/numeric_types.h>

#include <algorithm>
#include <cmath>

#include "device_attribute.h"
#include "flash_api.h"
#include "fwd_tile_config.h"
#include "instantiations/build_config.h"
#include "sm90_units.h"
#include "kernel_traits.h"
#include "sm90/fwd_api.h"
#include "sm90/fwd_supports.h"  // host-only: defines sm90::fwd_supports (this is its one translation unit)

namespace flash {

// ---- shared-memory budget (smem_budget.h)

int smem_budget_bytes(const FwdParams& params) {
  const int optin = current_device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>();
  return params.smem_budget_kb > 0 ? std::min(optin, params.smem_budget_kb * 1024) : optin;
}

// ---- the sm80 family

// The head dim's row for the budget: the default tile, or the 163 / 99 KB one where it differs
// (each its own instantiation). No row fits: cudaErrorInvalidConfiguration, nothing launched (the
// binding refuses first, naming the GPU and its limit).
template <typename Element, int kHeadDim>
static cudaError_t run_fwd_hdim(const FwdParams& params, cudaStream_t stream) {
  return launch_budget_row<fwd_tile_is_own<kHeadDim, 163>(), fwd_tile_is_own<kHeadDim, 99>()>(
      fwd_tile_under<kHeadDim>(smem_budget_bytes(params)).budget_kb,
      [&](auto kb) { return run_fwd_<Element, kHeadDim, decltype(kb)::value>(params, stream); });
}

template <typename Element>
static cudaError_t run_fwd_dtype(const FwdParams& params, cudaStream_t stream) {
  switch (params.headdim_rounded) {
#define FLASH_CASE(D) \
  case D:             \
    return run_fwd_hdim<Element, D>(params, stream);
    FLASH_FOR_EACH_HDIM(FLASH_CASE)
#undef FLASH_CASE
    default:
      return cudaErrorInvalidValue;
  }
}

KernelTile fwd_tile(const FwdParams& params) {
  const int budget = smem_budget_bytes(params);
  switch (params.headdim_rounded) {
#define FLASH_CASE(D) \
  case D:             \
    return fwd_tile_under<D>(budget);
    FLASH_FOR_EACH_HDIM(FLASH_CASE)
#undef FLASH_CASE
    default: {
      KernelTile none;
      none.budget_bytes = budget;
      return none;
    }
  }
}

bool params_supported(const FwdParams& params) {
  return params.headdim > 0 && params.headdim <= params.headdim_rounded && params.headdim % 8 == 0 &&
         params.nheads_k > 0 && params.nheads % params.nheads_k == 0 && params.seqlen_q > 0 &&
         params.seqlen_k > 0 && params.seqlen_q <= kMaxSeqlen && params.seqlen_k <= kMaxSeqlen && params.batch > 0 &&
         // the online softmax takes the row max of raw scores: only right for a positive scale
         params.softmax_scale > 0.f && std::isnormal(params.scale_log2) &&
         params.softcap >= 0.f && params.softcap <= 3.0e38f &&
         // dropout: p in [0, 1), the 8-bit keep threshold t in [1, 256] and scale 256 / t the binding
         // derived from it (t = 0 would read as 256, keep all: philox.h, dropout.h dropout_bytes)
         params.dropout_p >= 0.f && params.dropout_p < 1.f && params.dropout_threshold >= 1u &&
         params.dropout_threshold <= 256u &&
         (params.dropout_p == 0.f || (params.rp_dropout >= 1.f && std::isfinite(params.rp_dropout))) &&
         // varlen: both prefix sums or neither, packed tensors (no batch strides)
         (params.cu_seqlens_q == nullptr) == (params.cu_seqlens_k == nullptr) &&
         (params.cu_seqlens_q == nullptr ||
          (params.q_batch_stride == 0 && params.k_batch_stride == 0 && params.v_batch_stride == 0 &&
           params.o_batch_stride == 0 && params.total_q >= 0 && params.total_k >= 0));
}

// ---- the sm90 family (sm_90a code: compute capability 9.0 only)

template <typename Element>
static cudaError_t run_sm90_dtype(const FwdParams& params, cudaStream_t stream) {
  if (needs_dropout(params)) {  // the dropout variant, its own units
    switch (params.headdim_rounded) {
#define FLASH_CASE(D) \
  case D:             \
    return sm90::run_fwd_<Element, D, true>(params, stream);
      FLASH_SM90_DROPOUT_FOR_EACH_HDIM(FLASH_CASE)
#undef FLASH_CASE
      default:
        return cudaErrorInvalidValue;
    }
  }
  if (sm90::fwd_short_causal(params.headdim_rounded, is_causal(params), false, params.seqlen_q)) {
    switch (params.headdim_rounded) {  // the short causal kernel where built (its own units), else below
#define FLASH_CASE(D) \
  case D:             \
    return sm90::run_fwd_<Element, D, false, true>(params, stream);
      FLASH_SM90_SHORT_CAUSAL_FOR_EACH_HDIM(FLASH_CASE)
#undef FLASH_CASE
      default:
        break;
    }
  }
  switch (params.headdim_rounded) {
#define FLASH_CASE(D) \
  case D:             \
    return sm90::run_fwd_<Element, D>(params, stream);
    FLASH_SM90_FOR_EACH_HDIM(FLASH_CASE)
#undef FLASH_CASE
    default:
      return cudaErrorInvalidValue;
  }
}

// Whether the build compiled the sm90 kernel this call needs: (dtype, head dim), and with dropout
// the dropout variant (built with the feature kernels).
static bool sm90_compiled(const FwdParams& params) {
  return sm90_unit_compiled(params, {FLASH_SM90_FOR_EACH_HDIM(FLASH_LIST_ITEM)},
                            {FLASH_SM90_DROPOUT_FOR_EACH_HDIM(FLASH_LIST_ITEM)});
}

// Whether the current device has compute capability 9.0, the one sm_90a code runs on. Cached per
// device (a device's capability never changes; 0 = not asked yet, 1 = no, 2 = yes): the attribute
// query is a driver call on every forward otherwise. Any CUDA error reads as "no" (sm80 runs and
// reports it).
bool current_device_is_sm90() {
  return current_device_attribute<cudaDevAttrComputeCapabilityMajor>() == 9 &&
         current_device_attribute<cudaDevAttrComputeCapabilityMinor>() == 0;
}

FwdFamily fwd_family(const FwdParams& params) {
  const bool wanted = params.family == FwdFamily::kSm90 || (kSm90ByDefault && params.family == FwdFamily::kAuto);
  const bool sm90 = wanted && sm90_compiled(params) &&
                    current_device_is_sm90() && smem_budget_bytes(params) >= kSm90SmemBudgetBytes &&
                    sm90::fwd_supports(params);
  return sm90 ? FwdFamily::kSm90 : FwdFamily::kSm80;
}

std::vector<int> sm90_head_dims() {
  std::vector<int> dims;
#define FLASH_PUSH(D) dims.push_back(D);
  FLASH_SM90_FOR_EACH_HDIM(FLASH_PUSH)
#undef FLASH_PUSH
  return dims;
}

// The persistent kernel runs when the one-tile kernel is left out (the default build) or when
// sm90_persistent_ctas asks for it; it draws its tiles for causal calls and at d = 64
// (sm90::fwd_draws_tiles).
bool sm90_fwd_needs_tile_counter(const FwdParams& p) {
#ifdef FLASH_ATTN_CUDA_SM90_NO_ONE_TILE
  const bool persistent = true;
#else
  const bool persistent = p.sm90_persistent_ctas != 0;
#endif
  return persistent && sm90::fwd_draws_tiles(p.headdim, is_causal(p), needs_dropout(p));
}

// The binding passes a counter where one is needed; a C++ caller that leaves it null gets the sm80
// kernels for those calls instead of an error.
static bool sm90_tile_counter_ready(const FwdParams& p) {
  return !sm90_fwd_needs_tile_counter(p) || p.sm90_tiles.counter != nullptr;
}

cudaError_t run_fwd(const FwdParams& params, cudaStream_t stream, FwdFamily* ran) {
  if (!params_supported(params)) { return cudaErrorInvalidValue; }
  FwdFamily family = fwd_family(params);
  if (family == FwdFamily::kSm90 && !sm90_tile_counter_ready(params)) { family = FwdFamily::kSm80; }
  if (ran != nullptr) { *ran = family; }
  switch (params.dtype) {
#define FLASH_CASE(ENUM, TYPE) \
  case DType::ENUM:            \
    return family == FwdFamily::kSm90 ? run_sm90_dtype<TYPE>(params, stream) : run_fwd_dtype<TYPE>(params, stream);
    FLASH_FOR_EACH_DTYPE(FLASH_CASE)
#undef FLASH_CASE
    default:
      return cudaErrorInvalidValue;
  }
}

std::vector<int> compiled_head_dims() {
  std::vector<int> dims;
#define FLASH_PUSH(D) dims.push_back(D);
  FLASH_FOR_EACH_HDIM(FLASH_PUSH)
#undef FLASH_PUSH
  return dims;
}

std::vector<DType> compiled_dtypes() {
  std::vector<DType> dtypes;
#define FLASH_PUSH(ENUM, TYPE) dtypes.push_back(DType::ENUM);
  FLASH_FOR_EACH_DTYPE(FLASH_PUSH)
#undef FLASH_PUSH
  return dtypes;
}

int fwd_shared_memory_bytes(int headdim_rounded) {
  switch (headdim_rounded) {
#define FLASH_CASE(D)                                                                           \
  case D:                                                                                       \
    return FwdTraitsFor<D, kDefaultBudgetKB>::kSmemBytes;
    FLASH_FOR_EACH_HDIM(FLASH_CASE)
#undef FLASH_CASE
    default:
      return -1;
  }
}

int fwd_smallest_shared_memory_bytes(int headdim_rounded) {
  switch (headdim_rounded) {
#define FLASH_CASE(D) \
  case D:             \
    return FwdTraitsFor<D, 99>::kSmemBytes;
    FLASH_FOR_EACH_HDIM(FLASH_CASE)
#undef FLASH_CASE
    default:
      return -1;
  }
}

int round_head_dim(int headdim) {
  for (int d : compiled_head_dims()) {
    if (d >= headdim) { return d; }
  }
  return -1;
}

}  // namespace flash
