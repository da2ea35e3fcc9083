// Compile-time description of the sm90 backward's role-split tile (head dim 256): shared-memory
// layouts, the GEMMs of each consumer warpgroup and the shared-storage struct. No code runs here.
//
// At d = 256 a consumer warpgroup cannot own 64 keys of both dK and dV (BwdTraits): 2 x 64 x 256 fp32
// is 256 registers per thread. Here the CTA has 64 keys, and the two consumer warpgroups split the
// work by gradient instead (bwd_mainloop_split.h has the steps). Per query block of kBlockM rows:
//   consumer 0 ("P, dV"):  S^T  = K Q^T    wgmma 64 x kBlockM x d, SS
//                          P^T = exp2(S^T * scale_log2 - LSE_log2) (registers; fp32 copy to sP)
//                          dV  += P^T dO   wgmma 64 x d x kBlockM, RS (P^T from registers), B MN-major
//                          dQ[:, 0:d/2]    = dS K[:, 0:d/2]    wgmma kBlockM x d/2 x 64, SS
//   consumer 1 ("dS, dK"): dP^T = V dO^T   wgmma 64 x kBlockM x d, SS
//                          dS^T = P^T (dP^T - D) (P^T read from sP), to sdS (stmatrix.trans)
//                          dK  += dS^T Q   wgmma 64 x d x kBlockM, RS, B MN-major
//                          dQ[:, d/2:d]    = dS K[:, d/2:d]    SS
// Each warpgroup does 2.5 of the block's 5 GEMM units (1M MACs each at kBlockM = 64), so neither waits
// for the tensor cores of the other except at the P and dS hand-overs. dQ goes to dq_accum by fp32
// vector reductions from the consumers (red.global.add.v4.f32 in whole 128-byte lines after two
// lane shuffles, bwd_mainloop_split.h red_dq): a (kBlockM x d) fp32 sdQ stage for a TMA reduce is
// 64 KB, which does not fit beside the operands (below).
//
// Registers per consumer thread (setmaxnreg 240): dV or dK 64 x 256 fp32 = 128, S^T or dP^T
// 64 x kBlockM = 32, P^T / dS^T as bf16 16, dQ half kBlockM x 128 = 64 (live with dV/dK and the bf16
// operand, not with the fp32 S^T / dP^T): peak 128 + 64 + 16 = 208 + addresses.
// Shared memory (kBlockM = 64, 2 stages): Q, dO 2 x 2 x 32 KB, K, V 2 x 32 KB, dS 8 KB (one stage),
// sP fp32 16 KB, LSE / delta rows 1 KB: 217 KB of 227.
#pragma once

#include <cute/tensor.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cutlass/pipeline/sm90_pipeline.hpp>

#include "bwd_traits.h"

namespace flash::sm90 {

using namespace cute;

template <int kHeadDim_, int kBlockM_, int kStages_, typename Element_>
struct BwdTraitsSplit : BwdOperandSmem<kHeadDim_, kBlockM_, 64, kStages_, Element_, false> {
  using Base = BwdOperandSmem<kHeadDim_, kBlockM_, 64, kStages_, Element_, false>;
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = 64;         // keys per CTA: the M of every key-row wgmma
  static constexpr int kStages = kStages_;
  static constexpr bool kRoleSplit = true;   // consumer 0: S^T, P^T, dV; consumer 1: dP^T, dS^T, dK
  static constexpr bool kDQByTma = false;    // dQ by atomics from the consumers (no sdQ, no writer)
  static constexpr int kNConsumerWG = 2;
  static constexpr int kWGKeys = 64;         // both consumers see all keys of the CTA
  static constexpr int kNThreads = 128 * (kNConsumerWG + 1);
  static constexpr int kNConsumerThreads = 128 * kNConsumerWG;
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;
  static constexpr int kDQRows = kBlockM;
  static constexpr int kDQCols = kHeadDim / 2;  // consumer c: dQ columns [c kDQCols, (c + 1) kDQCols)

  static_assert(kBlockM == 64, "S^T, dP^T are 64 x kBlockM per thread-group: 32 registers at 64");
  static_assert(kDQCols % 64 == 0, "dQ column halves at whole SW128 atoms of K");

  using TileSdP = Shape<Int<kBlockN>, Int<kBlockM>, Int<kHeadDim>>;  // S^T (consumer 0), dP^T (consumer 1)
  using TileKV = Shape<Int<kBlockN>, Int<kHeadDim>, Int<kBlockM>>;   // dV (consumer 0), dK (consumer 1)
  using TileDQ = Shape<Int<kDQRows>, Int<kDQCols>, Int<kBlockN>>;    // dQ half per consumer
  using MmaSdP = decltype(make_tiled_mma(GMMA::ss_op_selector<Element, Element, float, TileSdP>()));
  using MmaKV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, TileKV, GMMA::Major::K, GMMA::Major::MN>()));
  using MmaDQ = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, TileDQ, GMMA::Major::K, GMMA::Major::MN>()));

  using SmemAtom = typename Base::SmemAtom;
  using SmemLayoutQ = typename Base::SmemLayoutQ;
  using SmemLayoutDO = typename Base::SmemLayoutDO;
  using SmemLayoutQt = typename Base::SmemLayoutQt;
  using SmemLayoutK = typename Base::SmemLayoutK;
  using SmemLayoutV = typename Base::SmemLayoutV;
  using SmemLayoutKt = typename Base::SmemLayoutKt;
  // dS (q, keys), keys contiguous: A of dQ = dS K; written through its transpose (keys, q). One
  // stage: consumer 1 rewrites it only after both dQ GEMMs of the previous block completed
  // (bwd_mainloop_split.h).
  using SmemLayoutDS = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockM>, Int<kBlockN>>{}));
  using SmemLayoutDSt = decltype(composition(
      SmemLayoutDS{}, make_ordered_layout(Shape<Int<kBlockN>, Int<kBlockM>>{}, Step<_2, _1>{})));
  // P^T fp32 from consumer 0 to consumer 1 in accumulator order: float4 j of thread t at [j][t]
  // (consecutive threads, consecutive 16 bytes: no bank conflicts on either side).
  static constexpr int kPValues = kBlockN * kBlockM / 128;  // fp32 per thread
  static_assert(kPValues % 4 == 0);
  // P^T through sP (consumer 0 stores, consumer 1 loads; both hold it in the S^T accumulator layout):
  // thread tid's values 4j..4j+3 as float4 j at sp[j * 128 + tid], conflict-free 16-byte accesses.
  template <class Frag>
  CUTE_HOST_DEVICE static void store_p(float4* sp, Frag const& f, int tid) {
    CUTE_UNROLL
    for (int j = 0; j < kPValues / 4; ++j) { sp[j * 128 + tid] = make_float4(f(4 * j), f(4 * j + 1), f(4 * j + 2), f(4 * j + 3)); }
  }
  template <class Frag>
  CUTE_HOST_DEVICE static void load_p(const float4* sp, Frag& f, int tid) {
    CUTE_UNROLL
    for (int j = 0; j < kPValues / 4; ++j) {
      const float4 v = sp[j * 128 + tid];
      f(4 * j) = v.x;
      f(4 * j + 1) = v.y;
      f(4 * j + 2) = v.z;
      f(4 * j + 3) = v.w;
    }
  }

  using Pipeline = typename Base::Pipeline;
  using PipelineState = typename Base::PipelineState;
  static constexpr uint32_t kTmaBytesQ = Base::kTmaBytesQ;
  static constexpr uint32_t kTmaBytesKV = Base::kTmaBytesKV;

  struct SharedStorage {
    cute::array_aligned<Element, cosize_v<SmemLayoutQ>, 1024> q;
    cute::array_aligned<Element, cosize_v<SmemLayoutDO>, 1024> dout;
    cute::array_aligned<Element, cosize_v<SmemLayoutK>, 1024> k;
    cute::array_aligned<Element, cosize_v<SmemLayoutV>, 1024> v;
    cute::array_aligned<Element, cosize_v<SmemLayoutDS>, 1024> ds;
    cute::array_aligned<float, kPValues * 128, 16> p;
    cute::array_aligned<float, kBlockM * kStages, 16> lse_log2;
    cute::array_aligned<float, kBlockM * kStages, 16> delta;
    typename Pipeline::SharedStorage pipe_q;
    typename Pipeline::SharedStorage pipe_do;
    alignas(8) uint64_t barrier_kv;
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static_assert(kSmemBytes <= 232448, "exceeds the 227 KB per-block shared memory of sm90");
};

}  // namespace flash::sm90
