// Dispatch of the backward: compiled only with FLASH_ATTN_CUDA_BACKWARD=1. It declares the
// instantiations (bwd_tile_config.h) and never includes a kernel body: each backward kernel is
// compiled once, in its instantiations/bwd_*.cu (tests/test_build_objects_cpu.py checks).
#include <algorithm>

#include <cutlass/numeric_types.h>

#include "bwd_tile_config.h"
#include "flash_api.h"
#include "instantiations/build_config.h"
#include "sm90_units.h"
#include "sm90/bwd_api.h"
#include "sm90/bwd_supports.h"  // host-only: defines sm90::bwd_supports (this is its one translation unit)

namespace flash {

// ---- the sm90 family's backward (sm_90a code: pre-pass, main kernel, dQ conversion of its own)

// The backward for this call: with dropout the dropout variant (its own units).
template <typename Element>
static auto sm90_bwd_for(const BwdParams& params) -> cudaError_t (*)(const BwdParams&, cudaStream_t) {
  if (needs_dropout(params)) {
    switch (params.headdim_rounded) {
#define FLASH_CASE(D) \
  case D:             \
    return &sm90::run_bwd_<Element, D, true>;
      FLASH_SM90_BWD_DROPOUT_FOR_EACH_HDIM(FLASH_CASE)
#undef FLASH_CASE
      default:
        return nullptr;
    }
  }
  switch (params.headdim_rounded) {
#define FLASH_CASE(D) \
  case D:             \
    return &sm90::run_bwd_<Element, D, false>;
    FLASH_SM90_BWD_FOR_EACH_HDIM(FLASH_CASE)
#undef FLASH_CASE
    default:
      return nullptr;
  }
}

template <typename Element>
static cudaError_t run_sm90_bwd(const BwdParams& params, cudaStream_t stream) {
  const auto run = sm90_bwd_for<Element>(params);  // non-null when bwd_family saw it compiled
  return run != nullptr ? run(params, stream) : cudaErrorInvalidValue;
}

// Whether the build compiled the sm90 backward this call needs: (dtype, head dim), and with dropout
// the dropout variant (built with the feature kernels).
static bool sm90_bwd_compiled(const BwdParams& params) {
  return sm90_unit_compiled(params, {FLASH_SM90_BWD_FOR_EACH_HDIM(FLASH_LIST_ITEM)},
                            {FLASH_SM90_BWD_DROPOUT_FOR_EACH_HDIM(FLASH_LIST_ITEM)});
}

FwdFamily bwd_family(const BwdParams& params) {
  const bool d256 = params.headdim_rounded == 256;
  const bool by_default = kSm90BwdByDefault &&
                          (!d256 || kSm90BwdHdim256ByDefault) &&
                          (!d256 || !needs_dropout(params) || kSm90BwdHdim256DropoutByDefault);
  const bool wanted = params.family == FwdFamily::kSm90 || (by_default && params.family == FwdFamily::kAuto);
  const bool sm90 = wanted && sm90_bwd_compiled(params) && current_device_is_sm90() &&
                    smem_budget_bytes(params) >= kSm90SmemBudgetBytes && sm90::bwd_supports(params);
  return sm90 ? FwdFamily::kSm90 : FwdFamily::kSm80;
}

// The head dim's row for the budget (smem_budget.h): the default tile, or the 163 / 99 KB one where
// it differs (each its own instantiation). No row fits: cudaErrorInvalidConfiguration, nothing
// launched (the binding refuses first, naming the GPU and its limit).
template <typename Element, int kHeadDim>
static cudaError_t run_bwd_hdim(const BwdParams& params, cudaStream_t stream) {
  return launch_budget_row<bwd_tile_is_own<kHeadDim, 163>(), bwd_tile_is_own<kHeadDim, 99>()>(
      bwd_tile_under<kHeadDim>(smem_budget_bytes(params)).budget_kb,
      [&](auto kb) { return run_bwd_<Element, kHeadDim, decltype(kb)::value>(params, stream); });
}

template <typename Element>
static cudaError_t run_bwd_dtype(const BwdParams& params, cudaStream_t stream) {
  switch (params.headdim_rounded) {
#define FLASH_CASE(D) \
  case D:             \
    return run_bwd_hdim<Element, D>(params, stream);
    FLASH_FOR_EACH_HDIM(FLASH_CASE)
#undef FLASH_CASE
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t run_bwd(const BwdParams& params, cudaStream_t stream, FwdFamily* ran) {
  const bool varlen = params.cu_seqlens_q != nullptr;
  if (!params_supported(params) || params.num_dq_splits < 1 || (!params.deterministic && params.num_dq_splits != 1) ||
      params.seqlen_q_rounded != bwd_rows_rounded(params.seqlen_q) ||
      (varlen && (params.varlen_scratch_rows < bwd_varlen_scratch_rows(params.total_q, params.batch) ||
                  params.do_batch_stride != 0 || params.dq_batch_stride != 0 || params.dk_batch_stride != 0 ||
                  params.dv_batch_stride != 0))) {
    return cudaErrorInvalidValue;
  }
  const bool sm90 = bwd_family(params) == FwdFamily::kSm90;
  if (ran != nullptr) { *ran = sm90 ? FwdFamily::kSm90 : FwdFamily::kSm80; }
  switch (params.dtype) {
#define FLASH_CASE(ENUM, TYPE)                                                                   \
  case DType::ENUM:                                                                              \
    return sm90 ? run_sm90_bwd<TYPE>(params, stream) : run_bwd_dtype<TYPE>(params, stream);
    FLASH_FOR_EACH_DTYPE(FLASH_CASE)
#undef FLASH_CASE
    default:
      return cudaErrorInvalidValue;
  }
}

KernelTile bwd_tile(const BwdParams& params) {
  const int budget = smem_budget_bytes(params);
  switch (params.headdim_rounded) {
#define FLASH_CASE(D) \
  case D:             \
    return bwd_tile_under<D>(budget);
    FLASH_FOR_EACH_HDIM(FLASH_CASE)
#undef FLASH_CASE
    default: {
      KernelTile none;
      none.budget_bytes = budget;
      return none;
    }
  }
}

int bwd_shared_memory_bytes(int headdim_rounded) {
  switch (headdim_rounded) {
#define FLASH_CASE(D) \
  case D:             \
    return BwdTraitsFor<D, cutlass::half_t>::kSmemBytes;
    FLASH_FOR_EACH_HDIM(FLASH_CASE)
#undef FLASH_CASE
    default:
      return -1;
  }
}

int bwd_smallest_shared_memory_bytes(int headdim_rounded) {
  switch (headdim_rounded) {
#define FLASH_CASE(D) \
  case D:             \
    return BwdTraitsFor<D, cutlass::half_t, 99>::kSmemBytes;
    FLASH_FOR_EACH_HDIM(FLASH_CASE)
#undef FLASH_CASE
    default:
      return -1;
  }
}

int64_t bwd_dq_semaphores(const BwdParams& params) {
  // Deterministic, or a call of an sm90 kernel that stores each dQ tile's first part (bwd_api.h).
  const bool wanted = params.deterministic || sm90::bwd_store_first(params.headdim_rounded, is_causal(params), needs_dropout(params));
  if (!wanted || params.seqlen_q_rounded % kBwdSemaphoreRows != 0) { return 0; }
  BwdParams probe = params;  // as run_bwd will see it: one slice, a semaphore array
  probe.num_dq_splits = 1;
  static int stand_in = 0;
  probe.dq_semaphore_ptr = &stand_in;
  if (bwd_family(probe) != FwdFamily::kSm90) { return 0; }
  return int64_t(params.batch) * params.nheads * (params.seqlen_q_rounded / kBwdSemaphoreRows);
}

int bwd_dq_accum_splits(const BwdParams& params, int num_sms) {
  // block_n of the tile run_bwd launches for these params (its budget row): the slices are
  // assigned per K/V block of that tile.
  const int block_n = bwd_tile(params).block_n;
  if (!params.deterministic || block_n < 0 || bwd_dq_semaphores(params) > 0) { return 1; }
  // One wave of thread blocks (one per SM at these tile sizes), but never more slices than
  // K/V blocks: each extra slice costs batch * nheads * seqlen_q_rounded * headdim_rounded floats
  // (varlen: nheads * varlen_scratch_rows * headdim_rounded).
  const int n_blocks = (params.seqlen_k + block_n - 1) / block_n;
  const long long heads = static_cast<long long>(params.batch) * params.nheads;
  const int per_head = static_cast<int>((num_sms + heads - 1) / heads);
  return std::max(1, std::min(n_blocks, per_head));
}

}  // namespace flash
