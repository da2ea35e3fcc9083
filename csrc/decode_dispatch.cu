// Dispatch of the KV-cache path (compiled with FLASH_ATTN_CUDA_KVCACHE=1): append/rotary, the
// decode kernel for (dtype, head dim), split-KV combine, in stream order. Declarations only
// (decode_traits.h): every kernel is compiled once, in instantiations/.
#include <cstdlib>
#include <cstring>

#include <cutlass/numeric_types.h>

#include "decode_traits.h"
#include "device_attribute.h"
#include "flash_api.h"
#include "heuristics.h"
#include "instantiations/build_config.h"

namespace flash {

bool kvcache_params_supported(const KvCacheParams& p) {
  const bool paged = p.block_table != nullptr;
  return params_supported(p) && p.seqlen_new >= 0 &&
         (p.cache_seqlens != nullptr || (p.seqlen_new == 0 && p.rotary_dim == 0)) &&
         p.num_splits >= 1 && p.num_splits <= kMaxSplits &&
         (p.num_splits == 1 || (p.oaccum_ptr != nullptr && p.lse_accum_ptr != nullptr)) &&
         p.num_pages > 0 &&
         (!paged || (p.page_size > 0 && p.max_pages > 0 && int64_t(p.max_pages) * p.page_size == p.seqlen_k &&
                     (p.page_shift < 0 || (p.page_shift < 31 && (1 << p.page_shift) == p.page_size)))) &&
         (p.seqlen_new == 0 || (p.knew_ptr != nullptr && p.vnew_ptr != nullptr)) &&
         (p.rotary_dim == 0 || (p.rotary_dim % 16 == 0 && p.rotary_dim <= p.headdim && p.seqlen_ro > 0 &&
                                p.rotary_cos_ptr != nullptr && p.rotary_sin_ptr != nullptr && p.q_in_ptr != nullptr)) &&
         int64_t(p.batch) * p.nheads_k <= 65535 && p.headdim <= kCombineMaxHeadDim && int64_t(p.seqlen_q) * (p.nheads / p.nheads_k) <= kMaxSeqlen;
}

static DecodeTileInfo decode_tile(int headdim_rounded) {
  switch (headdim_rounded) {
#define FLASH_CASE(D) \
  case D:             \
    return decode_tile_info<D>();
    FLASH_FOR_EACH_HDIM(FLASH_CASE)
#undef FLASH_CASE
    default:
      return {};
  }
}

int kvcache_shared_memory_bytes(int headdim_rounded) { return decode_tile(headdim_rounded).smem_bytes; }

// Decode thread blocks resident per SM (threads and shared memory; 1 KB of it reserved per block).
static int decode_blocks_per_sm(const DecodeTileInfo& tile, int smem_per_sm) {
  return std::max(1, std::min(2048 / tile.threads, smem_per_sm / (tile.smem_bytes + 1024)));
}

int kvcache_num_splits(const KvCacheParams& p, int num_sms, int smem_per_sm) {
  const DecodeTileInfo tile = decode_tile(p.headdim_rounded);
  if (tile.block_m < 0) { return 1; }
  const int64_t rows = int64_t(p.seqlen_q) * (p.nheads / p.nheads_k);
  const int64_t work = int64_t(p.batch) * p.nheads_k * ((rows + tile.block_m - 1) / tile.block_m);
  const int n_blocks = (p.seqlen_k + tile.block_n - 1) / tile.block_n;
  return decode_num_splits(int(std::min<int64_t>(work, 1 << 30)), num_sms,
                           num_sms * decode_blocks_per_sm(tile, smem_per_sm), n_blocks);
}

template <typename Element>
static cudaError_t run_kvcache_dtype(const KvCacheParams& p, cudaStream_t stream) {
  cudaError_t err = run_kvcache_append_<Element>(p, stream);
  if (err != cudaSuccess) { return err; }
  switch (p.headdim_rounded) {
#define FLASH_CASE(D)                            \
  case D:                                        \
    err = run_decode_<Element, D>(p, stream);    \
    break;
    FLASH_FOR_EACH_HDIM(FLASH_CASE)
#undef FLASH_CASE
    default:
      return cudaErrorInvalidValue;
  }
  if (err != cudaSuccess || p.num_splits == 1) { return err; }
  return run_splitkv_combine_<Element>(p, stream);
}

// FLASH_ATTN_CUDA_DECODE_PDL=0 launches the decode kernel without programmatic dependent launch
// (same-run comparisons, benchmarks/NOTES.md); unset or anything else: with it where the device has it.
static bool decode_pdl_enabled() {
  const char* v = std::getenv("FLASH_ATTN_CUDA_DECODE_PDL");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

cudaError_t run_kvcache(const KvCacheParams& caller_params, cudaStream_t stream) {
  if (!kvcache_params_supported(caller_params)) { return cudaErrorInvalidValue; }
  KvCacheParams params = caller_params;
  params.overlap_combine = current_device_attribute<cudaDevAttrComputeCapabilityMajor>() >= 9;
  params.overlap_decode = params.overlap_combine && decode_pdl_enabled();
  params.prefetch_blocks = 0;
  if (params.overlap_decode) {
    const DecodeTileInfo tile = decode_tile(params.headdim_rounded);
    params.prefetch_blocks =
        current_device_attribute<cudaDevAttrMultiProcessorCount>() *
        decode_blocks_per_sm(tile, current_device_attribute<cudaDevAttrMaxSharedMemoryPerMultiprocessor>());
  }
  switch (params.dtype) {
#define FLASH_CASE(ENUM, TYPE) \
  case DType::ENUM:            \
    return run_kvcache_dtype<TYPE>(params, stream);
    FLASH_FOR_EACH_DTYPE(FLASH_CASE)
#undef FLASH_CASE
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace flash
