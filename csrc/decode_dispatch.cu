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

static DecodeTileInfo decode_tile(int headdim_rounded, bool wide = false) {
  switch (headdim_rounded) {
#define FLASH_CASE(D) \
  case D:             \
    return wide ? decode_tile_info<D, decode_has_wide(D)>() : decode_tile_info<D>();
    FLASH_FOR_EACH_HDIM(FLASH_CASE)
#undef FLASH_CASE
    default:
      return {};
  }
}

// The base tile's: the binding checks that the device allows it (the wide tile is taken only where it fits).
int kvcache_shared_memory_bytes(int headdim_rounded) { return decode_tile(headdim_rounded).smem_bytes; }

// Decode thread blocks resident per SM (threads and shared memory; 1 KB of it reserved per block).
static int decode_blocks_per_sm(const DecodeTileInfo& tile, int smem_per_sm) {
  return std::max(1, std::min(2048 / tile.threads, smem_per_sm / (tile.smem_bytes + 1024)));
}

// FLASH_ATTN_CUDA_DECODE_WIDE: 0 never the wide tile, 1 always where it is built and fits (same-run
// comparisons, benchmarks/NOTES.md); unset or anything else: heuristics.h decode_pick_wide.
static int decode_wide_override() {
  const char* v = std::getenv("FLASH_ATTN_CUDA_DECODE_WIDE");
  if (v != nullptr && std::strcmp(v, "0") == 0) { return 0; }
  if (v != nullptr && std::strcmp(v, "1") == 0) { return 1; }
  return -1;
}

// Packed-row tiles x batch x K/V heads: the thread blocks of one split (the same for both tiles: 16 rows),
// clamped to an int for the heuristics.
static int decode_work_blocks(const KvCacheParams& p, const DecodeTileInfo& tile) {
  const int64_t rows = int64_t(p.seqlen_q) * (p.nheads / p.nheads_k);
  return int(std::min<int64_t>(int64_t(p.batch) * p.nheads_k * ((rows + tile.block_m - 1) / tile.block_m), 1 << 30));
}
// The tile's K/V blocks of the cache's capacity.
static int decode_kv_blocks(const KvCacheParams& p, const DecodeTileInfo& tile) {
  return (p.seqlen_k + tile.block_n - 1) / tile.block_n;
}

// The tile of a call, from static shapes and the device only (the split count and the launch agree).
static bool decode_use_wide(const KvCacheParams& p, int num_sms, int smem_per_sm) {
  // Every build with a decode_has_wide head dim compiles its wide unit (tools/gen_instantiations.py).
  if (!decode_has_wide(p.headdim_rounded)) { return false; }
  const DecodeTileInfo wide = decode_tile(p.headdim_rounded, true);
  if (wide.block_m < 0 || smem_per_sm < wide.smem_bytes + 1024) { return false; }
  const int force = decode_wide_override();
  if (force >= 0) { return force == 1; }
  return decode_pick_wide(decode_work_blocks(p, wide), num_sms, decode_kv_blocks(p, wide));
}

int kvcache_num_splits(const KvCacheParams& p, int num_sms, int smem_per_sm) {
  const DecodeTileInfo tile = decode_tile(p.headdim_rounded, decode_use_wide(p, num_sms, smem_per_sm));
  if (tile.block_m < 0) { return 1; }
  return decode_num_splits(decode_work_blocks(p, tile), num_sms, num_sms * decode_blocks_per_sm(tile, smem_per_sm),
                           decode_kv_blocks(p, tile));
}

template <typename Element>
static cudaError_t run_kvcache_dtype(const KvCacheParams& p, bool wide, cudaStream_t stream) {
  cudaError_t err = run_kvcache_append_<Element>(p, stream);
  if (err != cudaSuccess) { return err; }
  switch (p.headdim_rounded) {
#define FLASH_CASE(D)                                                                                       \
  case D:                                                                                                   \
    err = wide ? run_decode_<Element, D, decode_has_wide(D)>(p, stream) : run_decode_<Element, D>(p, stream); \
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
  const int num_sms = current_device_attribute<cudaDevAttrMultiProcessorCount>();
  const int smem_per_sm = current_device_attribute<cudaDevAttrMaxSharedMemoryPerMultiprocessor>();
  const bool wide = decode_use_wide(params, num_sms, smem_per_sm);  // as kvcache_num_splits picked it
  if (params.overlap_decode) {
    params.prefetch_blocks = num_sms * decode_blocks_per_sm(decode_tile(params.headdim_rounded, wide), smem_per_sm);
  }
  switch (params.dtype) {
#define FLASH_CASE(ENUM, TYPE) \
  case DType::ENUM:            \
    return run_kvcache_dtype<TYPE>(params, wide, stream);
    FLASH_FOR_EACH_DTYPE(FLASH_CASE)
#undef FLASH_CASE
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace flash
