// Split-KV combine: out and lse from the float32 partials of decode_kernel (params.h,
// KvCacheParams). Per row: lse = log(sum_s exp(lse_s)), out = sum_s exp(lse_s - lse) * o_s.
// Splits that saw no key have lse_s = -inf (and o_s = 0) and weigh nothing; a row no split saw
// gets 0 / -inf.
//
// Latency, not bandwidth, is its cost (batch 1: 32 rows x 33 splits x 512 B, all in L2), so one
// thread block per row reads every split's partial at once: thread s < num_splits its lse_s,
// warp w the partial O rows of splits w, w + 4, ... (a float4 of 4 columns per lane, 8 loads in
// flight). A warp per row walking the splits one by one (the first version) waited on two L2
// round trips per split.
//
// Launched with programmatic dependent launch where the device has it (sm90+): its thread blocks
// start while the decode grid drains and wait in griddep_wait() for the partials.
#pragma once

#include <cute/config.hpp>
#include <cutlass/array.h>

#include "grid_dependency.h"
#include "heuristics.h"
#include "params.h"

namespace flash {

constexpr int kCombineThreads = 128;
constexpr int kCombineWarps = kCombineThreads / 32;
constexpr int kCombineLoads = 8;  // partial-row loads in flight per thread (a warp's share of 32 splits)
static_assert(kMaxSplits <= kCombineThreads, "one split's lse per thread");

// x reduced over the thread block with op (every thread gets the result); scratch: kCombineWarps floats.
template <class Op>
CUTE_DEVICE float combine_block_reduce(float x, float* scratch, Op op) {
  CUTE_UNROLL
  for (int d = 16; d > 0; d /= 2) { x = op(x, __shfl_xor_sync(0xffffffff, x, d)); }
  if (threadIdx.x % 32 == 0) { scratch[threadIdx.x / 32] = x; }
  __syncthreads();
  x = scratch[0];
  CUTE_UNROLL
  for (int w = 1; w < kCombineWarps; ++w) { x = op(x, scratch[w]); }
  __syncthreads();  // scratch free for the next reduction
  return x;
}

// One thread block of kCombineThreads per (batch, head, token) row.
template <typename Element>
__global__ void __launch_bounds__(kCombineThreads) splitkv_combine_kernel(__grid_constant__ const KvCacheParams params) {
  __shared__ float scratch[kCombineWarps];
  __shared__ float weight[kMaxSplits];                                   // exp(lse_s - lse)
  __shared__ float4 partial[kCombineWarps][kCombineMaxHeadDim / 4];      // each warp's sum over its splits
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t rows = int64_t(params.batch) * params.nheads * params.seqlen_q;
  const int64_t row = blockIdx.x;  // (batch * nheads + head) * seqlen_q + token
  const int splits = params.num_splits;
  griddep_launch_dependents();  // the next call's decode grid may start; it waits for this one's end
  griddep_wait();  // the decode grid's partials are complete and visible

  const float l = tid < splits ? params.lse_accum_ptr[tid * rows + row] : -INFINITY;
  const float m = combine_block_reduce(l, scratch, [](float a, float b) { return fmaxf(a, b); });
  const float e = (l == -INFINITY) ? 0.f : expf(l - m);
  const float sum = combine_block_reduce(e, scratch, [](float a, float b) { return a + b; });
  const float lse = (m == -INFINITY || sum == 0.f) ? -INFINITY : m + logf(sum);
  if (tid < splits) { weight[tid] = (l == -INFINITY || lse == -INFINITY) ? 0.f : expf(l - lse); }
  __syncthreads();

  const int headdim = min(params.headdim, kCombineMaxHeadDim);
  const float* o_row = params.oaccum_ptr + row * params.headdim_rounded;  // split s at o_row + s * split_stride
  const int64_t split_stride = rows * params.headdim_rounded;
  for (int c = lane * 4; c < headdim; c += 32 * 4) {
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s0 = warp; s0 < splits; s0 += kCombineWarps * kCombineLoads) {
      // Unconditional loads (past the last split: the last split again, weight 0), all issued
      // before the first use: kCombineLoads in flight.
      float4 o[kCombineLoads];
      CUTE_UNROLL
      for (int u = 0; u < kCombineLoads; ++u) {
        const int s = min(s0 + u * kCombineWarps, splits - 1);
        o[u] = *reinterpret_cast<const float4*>(o_row + s * split_stride + c);
      }
      CUTE_UNROLL
      for (int u = 0; u < kCombineLoads; ++u) {
        const int s = s0 + u * kCombineWarps;
        const float w = s < splits ? weight[s] : 0.f;
        acc.x += w * o[u].x; acc.y += w * o[u].y; acc.z += w * o[u].z; acc.w += w * o[u].w;
      }
    }
    partial[warp][c / 4] = acc;
  }
  __syncthreads();

  const int token = int(row % params.seqlen_q);
  const int head = int(row / params.seqlen_q % params.nheads);
  const int batch = int(row / params.seqlen_q / params.nheads);
  Element* out = static_cast<Element*>(params.o_ptr) + batch * params.o_batch_stride + token * params.o_row_stride +
                 head * params.o_head_stride;
  for (int c = tid * 4; c < headdim; c += kCombineThreads * 4) {
    float v[4] = {0.f, 0.f, 0.f, 0.f};
    CUTE_UNROLL
    for (int w = 0; w < kCombineWarps; ++w) {
      const float4 p = partial[w][c / 4];
      v[0] += p.x; v[1] += p.y; v[2] += p.z; v[3] += p.w;
    }
    cutlass::Array<Element, 4> packed;
    CUTE_UNROLL
    for (int j = 0; j < 4; ++j) { packed[j] = Element(v[j]); }
    *reinterpret_cast<cutlass::Array<Element, 4>*>(out + c) = packed;
  }
  if (tid == 0) { params.lse_ptr[row] = lse; }
}

}  // namespace flash
