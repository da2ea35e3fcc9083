// apply_dropout alone on one S tile of each real TiledMMA: a kernel that loads the fragment, applies
// dropout or not, scales and stores it. The SASS difference per element is the dropout's cost in
// isolation (benchmarks/NOTES.md "Dropout cost"). Not part of the build:
//   nvcc -O3 -std=c++20 --use_fast_math --expt-relaxed-constexpr -Icsrc -I$(python third_party/find_cutlass.py) \
//        -gencode=arch=compute_90,code=sm_90 -cubin -o build/dropout_cost.cubin tools/dropout_cost.cu
//   cuobjdump -sass build/dropout_cost.cubin   (compare each micro<..., true> with its micro<..., false>)
#include <cute/tensor.hpp>
#include "bwd_tile_config.h"
#include "fwd_tile_config.h"
#include "kernel_traits.h"
#include "bwd_kernel_traits.h"
#include "tensor_utils.h"
#include "dropout.h"
using namespace cute;
template <class TiledMma, int BM, int BN, int kWarpsN, bool kSign, bool kDrop>
__global__ void micro(float* out, flash::FwdParams p, int row0, int col0) {
  TiledMma mma;
  auto thr = mma.get_thread_slice(threadIdx.x);
  Tensor acc = partition_fragment_C(mma, Shape<Int<BM>, Int<BN>>{});
  for (int i = 0; i < size(acc); ++i) { acc(i) = out[threadIdx.x + i * blockDim.x]; }
  Tensor rc = make_tensor(acc.data(), flash::rowcol_view(acc.layout()));
  Tensor c = thr.partition_C(make_identity_tensor(Shape<Int<BM>, Int<BN>>{}));
  Tensor crc = make_tensor(c.data(), flash::rowcol_view(c.layout()));
  if constexpr (kDrop) { flash::apply_dropout<kWarpsN, kSign>(rc, crc, flash::dropout_rng(p, blockIdx.y, blockIdx.z), row0, col0); }
  for (int i = 0; i < size(acc); ++i) { out[threadIdx.x + i * blockDim.x] = acc(i) * p.rp_dropout; }
}
// BWD_TRAITS: the backward traits whose S/dP layout to measure (BwdTraitsFor: the feature kernels').
#ifndef BWD_TRAITS
#define BWD_TRAITS BwdDropoutTraitsFor
#endif
using Elt = cutlass::bfloat16_t;
#define FWD(D) \
  template __global__ void micro<FwdTraitsFor<D, 227, Elt>::TiledMma, FwdTileConfig<D>::kBlockM, FwdTileConfig<D>::kBlockN, 1, false, true>(float*, flash::FwdParams, int, int); \
  template __global__ void micro<FwdTraitsFor<D, 227, Elt>::TiledMma, FwdTileConfig<D>::kBlockM, FwdTileConfig<D>::kBlockN, 1, false, false>(float*, flash::FwdParams, int, int);
#define BWD(D) \
  template __global__ void micro<flash::BWD_TRAITS<D, Elt>::TiledMmaSdP, flash::BWD_TRAITS<D, Elt>::kBlockM, flash::BWD_TRAITS<D, Elt>::kBlockN, flash::BWD_TRAITS<D, Elt>::kWarpsNSdP, true, true>(float*, flash::FwdParams, int, int); \
  template __global__ void micro<flash::BWD_TRAITS<D, Elt>::TiledMmaSdP, flash::BWD_TRAITS<D, Elt>::kBlockM, flash::BWD_TRAITS<D, Elt>::kBlockN, flash::BWD_TRAITS<D, Elt>::kWarpsNSdP, true, false>(float*, flash::FwdParams, int, int);
using namespace flash;
FWD(64) FWD(256) BWD(64) BWD(128) BWD(256)
