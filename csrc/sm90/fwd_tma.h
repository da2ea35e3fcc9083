// TMA descriptors of the sm90 forward and the kernel's parameter block. The descriptors are
// built on the host from FwdParams (q/o: (seqlen_q, d, nheads, batch), k/v: (seqlen_k, d,
// nheads_k, batch), element strides, head dim contiguous) and passed by value as a
// __grid_constant__ kernel argument. TMA zero-fills loads past seqlen and clips stores there.
#pragma once

#include <utility>

#include <cute/tensor.hpp>
#include <cute/atom/copy_traits_sm90_tma.hpp>

#include "../params.h"

namespace flash::sm90 {

using namespace cute;

// (seqlen, d, heads, batch) view of a q/k/v/o tensor; the strides are in elements.
template <typename Element, int kHeadDim, typename Ptr>
CUTE_HOST_DEVICE auto make_gmem_bshd(Ptr ptr, int seqlen, int heads, int batch, int64_t row_stride, int64_t head_stride,
                                     int64_t batch_stride) {
  return make_tensor(make_gmem_ptr(ptr), make_shape(seqlen, Int<kHeadDim>{}, heads, batch),
                     make_stride(row_stride, _1{}, head_stride, batch_stride));
}

// Q and O move in 64-row boxes, one per consumer warpgroup; K and V in kBlockN-row boxes.
template <class Traits>
auto make_tma_q(const FwdParams& p) {
  using Element = typename Traits::Element;
  auto g = make_gmem_bshd<Element, Traits::kHeadDim>(static_cast<const Element*>(p.q_ptr), p.seqlen_q, p.nheads,
                                                     p.batch, p.q_row_stride, p.q_head_stride, p.q_batch_stride);
  return make_tma_atom(SM90_TMA_LOAD{}, g, typename Traits::SmemLayoutQWG{},
                       Shape<Int<Traits::kWGRows>, Int<Traits::kHeadDim>>{});
}
// kClusterM > 1: each CTA of a cluster loads 1 / kClusterM of the block and multicasts it to all of them
// (fwd_persistent.h kClusterM).
template <class Traits, int kClusterM = 1>
auto make_tma_kv(const void* ptr, const FwdParams& p, int64_t row, int64_t head, int64_t batch) {
  using Element = typename Traits::Element;
  auto g = make_gmem_bshd<Element, Traits::kHeadDim>(static_cast<const Element*>(ptr), p.seqlen_k, p.nheads_k,
                                                     p.batch, row, head, batch);
  auto tile = Shape<Int<Traits::kBlockN>, Int<Traits::kHeadDim>>{};
  if constexpr (kClusterM > 1) {
    static_assert(Traits::kBlockN % (8 * kClusterM) == 0, "each CTA's share of a K / V block: whole 8-row swizzle atoms");
    return make_tma_atom(SM90_TMA_LOAD_MULTICAST{}, g, take<0, 2>(typename Traits::SmemLayoutK{}), tile, Int<kClusterM>{});
  } else {
    return make_tma_atom(SM90_TMA_LOAD{}, g, take<0, 2>(typename Traits::SmemLayoutK{}), tile);
  }
}
template <class Traits>
auto make_tma_o(const FwdParams& p) {
  using Element = typename Traits::Element;
  auto g = make_gmem_bshd<Element, Traits::kHeadDim>(static_cast<Element*>(p.o_ptr), p.seqlen_q, p.nheads, p.batch,
                                                     p.o_row_stride, p.o_head_stride, p.o_batch_stride);
  return make_tma_atom(SM90_TMA_STORE{}, g, typename Traits::SmemLayoutO{},
                       Shape<Int<Traits::kWGRows>, Int<Traits::kHeadDim>>{});
}

template <class Traits, int kClusterM = 1>
struct FwdTma {
  using AtomQ = decltype(make_tma_q<Traits>(std::declval<const FwdParams&>()));
  using AtomKV = decltype(make_tma_kv<Traits, kClusterM>(nullptr, std::declval<const FwdParams&>(), 0, 0, 0));
  using AtomO = decltype(make_tma_o<Traits>(std::declval<const FwdParams&>()));

  struct Params {
    AtomQ tma_q;
    AtomKV tma_k;
    AtomKV tma_v;
    AtomO tma_o;
    FwdParams p;
  };

  static Params make_params(const FwdParams& p) {
    return {make_tma_q<Traits>(p),
            make_tma_kv<Traits, kClusterM>(p.k_ptr, p, p.k_row_stride, p.k_head_stride, p.k_batch_stride),
            make_tma_kv<Traits, kClusterM>(p.v_ptr, p, p.v_row_stride, p.v_head_stride, p.v_batch_stride),
            make_tma_o<Traits>(p), p};
  }
};

// L2 policy of the persistent kernel's loads. FLASH_ATTN_CUDA_SM90_FWD_CACHE_HINTS=1: FA3's, K / V
// evict-last (every query tile of the head reads them again) and Q evict-first (read once); 0 (default):
// evict-normal for both, as before. Measured off: -0.2 .. -0.5 % at d = 128 non-causal 2k / 8k (H100 SXM,
// results/history/h100_fwdclu_hint_*).
#ifndef FLASH_ATTN_CUDA_SM90_FWD_CACHE_HINTS
#define FLASH_ATTN_CUDA_SM90_FWD_CACHE_HINTS 0
#endif
CUTE_HOST_DEVICE constexpr TMA::CacheHintSm90 hint_kv() {
  return FLASH_ATTN_CUDA_SM90_FWD_CACHE_HINTS ? TMA::CacheHintSm90::EVICT_LAST : TMA::CacheHintSm90::EVICT_NORMAL;
}
CUTE_HOST_DEVICE constexpr TMA::CacheHintSm90 hint_q() {
  return FLASH_ATTN_CUDA_SM90_FWD_CACHE_HINTS ? TMA::CacheHintSm90::EVICT_FIRST : TMA::CacheHintSm90::EVICT_NORMAL;
}

}  // namespace flash::sm90
