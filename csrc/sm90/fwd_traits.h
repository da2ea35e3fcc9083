// Compile-time description of one sm90 forward tile: shared-memory layouts, the two warpgroup
// MMAs, the K/V pipelines and the shared-storage struct. No code runs here.
//
// Block of 128 (kNConsumerWG + 1) threads: warpgroup 0 is the producer (one thread issues every
// TMA load), warpgroups 1 .. kNConsumerWG are consumers; consumer c owns query rows [64 c, 64 c + 64)
// of the kBlockM = 64 kNConsumerWG tile (2 consumers: 128 rows, 384 threads; 3: 192 rows, 512).
//   S = Q K^T : wgmma 64 x kBlockN x 16, A (Q) and B (K) from shared memory (SS)
//   O += P V  : wgmma 64 x kHeadDim x 16, A (P) from registers, B (V) from shared memory read
//               "MN-major" (V's rows are keys, its contiguous dim is the head dim) (RS)
#pragma once

#include <cute/tensor.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cutlass/pipeline/sm90_pipeline.hpp>

namespace flash::sm90 {

using namespace cute;

template <int kHeadDim_, int kBlockN_, int kStages_, typename Element_, bool kOverlap_ = true, int kNConsumerWG_ = 2>
struct FwdTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kNConsumerWG = kNConsumerWG_;
  static constexpr int kWGRows = 64;
  static constexpr int kBlockM = kWGRows * kNConsumerWG;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;       // K and V pipelines each
  static constexpr bool kOverlap = kOverlap_;    // softmax of block j under the GEMMs of block j+1
  static constexpr int kNThreads = 128 * (kNConsumerWG + 1);
  static constexpr int kNConsumerThreads = 128 * kNConsumerWG;
  // setmaxnreg (multiples of 8; the SM's 65,536 registers are shared by the warpgroups):
  //   2 consumers: (24 + 2 x 240) x 128 = 64,512;  3 consumers: (24 + 3 x 160) x 128 = 64,512.
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = kNConsumerWG == 2 ? 240 : 160;
  static_assert(kNConsumerWG == 2 || kNConsumerWG == 3, "2 or 3 consumer warpgroups (named barriers: fwd_mainloop.h)");
  static_assert((kProducerRegs + kNConsumerWG * kConsumerRegs) * 128 <= 65536, "setmaxnreg budget exceeds the register file");
  // The persistent kernels that draw their tiles (fwd_persistent.h kDrawsTiles: causal, d = 64): the
  // producer thread gets the tile index from an atomic, so the tile's coordinates live in per-thread
  // registers instead of uniform ones; on 24 it spilled 176 B (d = 128) / 108 B (d = 64), nvcc 13.0.
  // The setmaxnreg pool is what the launch allocated (__launch_bounds__(kNThreads, 1): 168 x 384 =
  // 504 x 128 registers at d = 128, 128 x 512 = 512 x 128 at d = 64): d = 128 moves 8 consumer
  // registers to the producer.
  static constexpr int kProducerRegsDynamic = kNConsumerWG == 2 ? 40 : 32;
  static constexpr int kConsumerRegsDynamic = kNConsumerWG == 2 ? 232 : 160;
  static constexpr int kLaunchRegs = 65536 / kNThreads / 8 * 8;
  static_assert((kProducerRegs + kNConsumerWG * kConsumerRegs) <= kLaunchRegs * kNThreads / 128,
                "setmaxnreg asks more than the launch allocates");
  static_assert((kProducerRegsDynamic + kNConsumerWG * kConsumerRegsDynamic) <= kLaunchRegs * kNThreads / 128,
                "setmaxnreg asks more than the launch allocates");

  static_assert(kHeadDim % 64 == 0, "head dim must be a multiple of the 64-element SW128 atom");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "wgmma N and the PV K dimension need multiples of 16");
  static_assert(sizeof(Element) == 2, "16-bit inputs only");

  using TileQK = Shape<Int<kWGRows>, Int<kBlockN>, Int<kHeadDim>>;   // per consumer warpgroup
  using TilePV = Shape<Int<kWGRows>, Int<kHeadDim>, Int<kBlockN>>;
  using MmaQK = decltype(make_tiled_mma(GMMA::ss_op_selector<Element, Element, float, TileQK>()));
  using MmaPV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, TilePV, GMMA::Major::K, GMMA::Major::MN>()));

  // 128-byte swizzle, head dim contiguous (K-major for S = QK^T).
  using SmemAtom = GMMA::Layout_K_SW128_Atom<Element>;
  using SmemLayoutQ = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  using SmemLayoutO = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kWGRows>, Int<kHeadDim>>{}));  // one WG's rows
  using SmemLayoutQWG = SmemLayoutO;
  using SmemLayoutK = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockN>, Int<kHeadDim>, Int<kStages>>{}));
  using SmemLayoutV = SmemLayoutK;
  // V^T (head dim, keys, stage): the same bytes as V, viewed with the key index second.
  using SmemLayoutVt = decltype(composition(
      SmemLayoutV{}, make_ordered_layout(Shape<Int<kHeadDim>, Int<kBlockN>, Int<kStages>>{}, Step<_2, _1, _3>{})));

  using Pipeline = cutlass::PipelineTmaAsync<kStages>;
  using PipelineState = typename cutlass::PipelineState<kStages>;

  static constexpr uint32_t kTmaBytesQ = kBlockM * kHeadDim * sizeof(Element);
  static constexpr uint32_t kTmaBytesQWG = kWGRows * kHeadDim * sizeof(Element);  // one warpgroup's Q rows
  static constexpr uint32_t kTmaBytesKV = kBlockN * kHeadDim * sizeof(Element);
  static constexpr int kKVRowBytes = 2 * kHeadDim * int(sizeof(Element));  // one key's K + V (L2 sections)

  struct SharedStorage {
    // Q tile; after a consumer warpgroup's last S = QK^T its 64 rows hold that warpgroup's O
    // for the TMA store.
    cute::array_aligned<Element, cosize_v<SmemLayoutQ>, 1024> q;
    cute::array_aligned<Element, cosize_v<SmemLayoutK>, 1024> k;
    cute::array_aligned<Element, cosize_v<SmemLayoutV>, 1024> v;
    typename Pipeline::SharedStorage pipe_k;
    typename Pipeline::SharedStorage pipe_v;
    alignas(8) uint64_t barrier_q;
    // Persistent kernel only (fwd_persistent.h), per consumer warpgroup: its Q rows of the tile
    // landed (TMA transaction barrier) / it no longer reads them, so the next tile's Q may come
    // (PersistentSmem::kQEmptyArrivals: all its threads after the last S GEMM with an O buffer of
    // its own, else its thread 0 after the O store read the rows). After barrier_q: the one-tile
    // kernel's shared-memory offsets are unchanged.
    alignas(8) uint64_t q_full[kNConsumerWG];
    alignas(8) uint64_t q_empty[kNConsumerWG];
    // Persistent kernels that draw their tiles only (fwd_persistent.h kDrawsTiles: causal, d = 64; the
    // dynamic tile order of fwd_scheduler.h): a ring of two tile indices the producer thread publishes
    // for the consumers; tile_full[s]: slot s written (1 arrival, the producer's), tile_empty[s]: every
    // consumer thread has read it; tile_count: indices the producer has published (kept here, not in
    // its 32-40 registers).
    alignas(8) uint64_t tile_full[2];
    alignas(8) uint64_t tile_empty[2];
    int tile_slot[2];
    int tile_count;
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static_assert(kSmemBytes <= 232448, "exceeds the 227 KB per-block shared memory of sm90");
};

}  // namespace flash::sm90
