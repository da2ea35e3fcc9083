// TMA descriptors of the sm90 backward and the kernel's parameter block, built on the host from
// BwdParams: q/dout (seqlen_q, d, nheads, batch) in kBlockM-row boxes, k/v (seqlen_k, d, nheads_k,
// batch) in kBlockN-row boxes (TMA zero-fills rows past seqlen), and the float32 dq_accum
// (seqlen_q_rounded, d, nheads, batch) as the destination of a reduce-add per (kBlockM x d) tile.
#pragma once

#include <type_traits>
#include <utility>

#include <cute/tensor.hpp>
#include <cute/atom/copy_traits_sm90_tma.hpp>

#include "../params.h"
#include "bwd_api.h"  // bwd_store_first
#include "fwd_tma.h"  // make_gmem_bshd

namespace flash::sm90 {

using namespace cute;

template <class Traits>
auto make_tma_qdo(const void* ptr, const BwdParams& p, int64_t row, int64_t head, int64_t batch) {
  using Element = typename Traits::Element;
  auto g = make_gmem_bshd<Element, Traits::kHeadDim>(static_cast<const Element*>(ptr), p.seqlen_q, p.nheads, p.batch,
                                                     row, head, batch);
  return make_tma_atom(SM90_TMA_LOAD{}, g, take<0, 2>(typename Traits::SmemLayoutQ{}),
                       Shape<Int<Traits::kBlockM>, Int<Traits::kHeadDim>>{});
}
template <class Traits>
auto make_tma_kv_bwd(const void* ptr, const BwdParams& p, int64_t row, int64_t head, int64_t batch) {
  using Element = typename Traits::Element;
  auto g = make_gmem_bshd<Element, Traits::kHeadDim>(static_cast<const Element*>(ptr), p.seqlen_k, p.nheads_k,
                                                     p.batch, row, head, batch);
  return make_tma_atom(SM90_TMA_LOAD{}, g, typename Traits::SmemLayoutK{},
                       Shape<Int<Traits::kBlockN>, Int<Traits::kHeadDim>>{});
}
// dq_accum (batch, nheads, seqlen_q_rounded, headdim_rounded) float32, row-major (params.h); Op: the
// reduce-add, or the plain store of a store-first kernel's first block per tile (bwd_api.h) (same boxes, same partition).
template <class Traits, class Op = SM90_TMA_REDUCE_ADD>
auto make_tma_dq_accum(const BwdParams& p) {
  constexpr int kD = Traits::kHeadDim;
  const int64_t head_stride = int64_t(p.seqlen_q_rounded) * kD;
  auto g = make_tensor(make_gmem_ptr(p.dq_accum_ptr), make_shape(p.seqlen_q_rounded, Int<kD>{}, p.nheads, p.batch),
                       make_stride(int64_t(kD), _1{}, head_stride, head_stride * p.nheads));
  return make_tma_atom(Op{}, g, take<0, 2>(typename Traits::SmemLayoutDQ{}), Shape<Int<Traits::kBlockM>, Int<kD>>{});
}

// The dQ reduce-add descriptor where the tile has one (Traits::kDQByTma), else an empty stand-in
// (the role-split tile adds dQ with atomics).
struct NoTmaDQ {};
template <class Traits, bool = Traits::kDQByTma>
struct BwdTmaDQ {
  using Atom = decltype(make_tma_dq_accum<Traits>(std::declval<const BwdParams&>()));
  static Atom make(const BwdParams& p) { return make_tma_dq_accum<Traits>(p); }
  // The store-first kernels' store descriptor; otherwise an empty stand-in (the default kernels' parameters
  // keep their layout: it follows BwdTma::Params::p).
  template <bool kStoreFirst>
  using StoreAtom = std::conditional_t<kStoreFirst,
                                       decltype(make_tma_dq_accum<Traits, SM90_TMA_STORE>(std::declval<const BwdParams&>())),
                                       NoTmaDQ>;
  template <bool kStoreFirst>
  static StoreAtom<kStoreFirst> make_store(const BwdParams& p) {
    if constexpr (kStoreFirst) {
      return make_tma_dq_accum<Traits, SM90_TMA_STORE>(p);
    } else {
      return {};
    }
  }
};
template <class Traits>
struct BwdTmaDQ<Traits, false> {
  using Atom = NoTmaDQ;
  template <bool>
  using StoreAtom = NoTmaDQ;
  static Atom make(const BwdParams&) { return {}; }
  template <bool>
  static NoTmaDQ make_store(const BwdParams&) { return {}; }
};

// kStoreFirst (bwd_api.h bwd_store_first) is part of the type: the kernels that store each dQ tile's
// first part get the store descriptor, the others an empty stand-in; units compiled with different
// FLASH_ATTN_CUDA_SM90_BWD_STORE_FIRST never share a Params / make_params / kernel symbol of different
// layouts (a variant build that recompiles only some units links safely).
template <class Traits, bool kCausal, bool kDropout>
constexpr bool kStoreFirstOf = Traits::kDQByTma && bwd_store_first(Traits::kHeadDim, kCausal, kDropout);

template <class Traits, bool kStoreFirst>
struct BwdTma {
  using AtomQ = decltype(make_tma_qdo<Traits>(nullptr, std::declval<const BwdParams&>(), 0, 0, 0));
  using AtomKV = decltype(make_tma_kv_bwd<Traits>(nullptr, std::declval<const BwdParams&>(), 0, 0, 0));
  using AtomDQ = typename BwdTmaDQ<Traits>::Atom;
  using AtomDQStore = typename BwdTmaDQ<Traits>::template StoreAtom<kStoreFirst>;

  struct Params {
    AtomQ tma_q;
    AtomQ tma_do;
    AtomKV tma_k;
    AtomKV tma_v;
    AtomDQ tma_dq;
    BwdParams p;
    AtomDQStore tma_dq_store;  // kStoreFirst; empty otherwise
  };

  static Params make_params(const BwdParams& p) {
    return {make_tma_qdo<Traits>(p.q_ptr, p, p.q_row_stride, p.q_head_stride, p.q_batch_stride),
            make_tma_qdo<Traits>(p.do_ptr, p, p.do_row_stride, p.do_head_stride, p.do_batch_stride),
            make_tma_kv_bwd<Traits>(p.k_ptr, p, p.k_row_stride, p.k_head_stride, p.k_batch_stride),
            make_tma_kv_bwd<Traits>(p.v_ptr, p, p.v_row_stride, p.v_head_stride, p.v_batch_stride),
            BwdTmaDQ<Traits>::make(p),
            p,
            BwdTmaDQ<Traits>::template make_store<kStoreFirst>(p)};
  }
};

// The descriptors of bwd_kernel<Traits, kCausal, kDropout, ...>.
template <class Traits, bool kCausal, bool kDropout>
using BwdTmaFor = BwdTma<Traits, kStoreFirstOf<Traits, kCausal, kDropout>>;

// L2 policy of the backward's Q / dO loads. FLASH_ATTN_CUDA_SM90_BWD_CACHE_HINTS=1: FA3's, evict-last (every
// K / V block of the head reads them again); 0 (default): evict-normal, as before. Measured (twenty-fifth
// session, H100 SXM, d = 128 bf16, results/history/h100_bwdfa3opt.md, run bh): backward 471.6 / 540.8 / 373.7 /
// 487.7 TFLOP/s at 2k / 8k / causal 2k / causal 8k against the base's 470.5 / 541.3 / 376.4 / 490.7: no gain.
#ifndef FLASH_ATTN_CUDA_SM90_BWD_CACHE_HINTS
#define FLASH_ATTN_CUDA_SM90_BWD_CACHE_HINTS 0
#endif
CUTE_HOST_DEVICE constexpr TMA::CacheHintSm90 bwd_hint_qdo() {
  return FLASH_ATTN_CUDA_SM90_BWD_CACHE_HINTS ? TMA::CacheHintSm90::EVICT_LAST : TMA::CacheHintSm90::EVICT_NORMAL;
}

}  // namespace flash::sm90
