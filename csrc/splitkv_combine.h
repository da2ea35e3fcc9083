// Split-KV combine: out and lse from the float32 partials of decode_kernel (params.h,
// KvCacheParams). Per row: lse = log(sum_s exp(lse_s)), out = sum_s exp(lse_s - lse) * o_s.
// Splits that saw no key have lse_s = -inf and weigh nothing; a row no split saw gets 0 / -inf.
#pragma once

#include <cute/config.hpp>
#include <cutlass/array.h>

#include "params.h"

namespace flash {

// One warp per (batch, head, token) row; blockDim.x = 32 * kCombineWarps.
constexpr int kCombineWarps = 4;

template <typename Element>
__global__ void __launch_bounds__(32 * kCombineWarps) splitkv_combine_kernel(__grid_constant__ const KvCacheParams params) {
  const int lane = threadIdx.x % 32;
  const int64_t rows = int64_t(params.batch) * params.nheads * params.seqlen_q;
  const int64_t row = int64_t(blockIdx.x) * kCombineWarps + threadIdx.x / 32;  // (batch * nheads + head) * seqlen_q + token
  if (row >= rows) { return; }
  const float* lse_s = params.lse_accum_ptr + row;  // split s at lse_s[s * rows]

  float m = -INFINITY;
  for (int s = lane; s < params.num_splits; s += 32) { m = fmaxf(m, lse_s[s * rows]); }
  CUTE_UNROLL
  for (int d = 16; d > 0; d /= 2) { m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, d)); }
  float sum = 0.f;
  for (int s = lane; s < params.num_splits; s += 32) {
    const float l = lse_s[s * rows];
    sum += l == -INFINITY ? 0.f : expf(l - m);
  }
  CUTE_UNROLL
  for (int d = 16; d > 0; d /= 2) { sum += __shfl_xor_sync(0xffffffff, sum, d); }
  const float lse = (m == -INFINITY || sum == 0.f) ? -INFINITY : m + logf(sum);

  const int token = int(row % params.seqlen_q);
  const int head = int(row / params.seqlen_q % params.nheads);
  const int batch = int(row / params.seqlen_q / params.nheads);
  Element* out = static_cast<Element*>(params.o_ptr) + batch * params.o_batch_stride + token * params.o_row_stride +
                 head * params.o_head_stride;
  for (int c = lane * 8; c < params.headdim; c += 32 * 8) {
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int s = 0; s < params.num_splits; ++s) {
      const float l = lse_s[s * rows];
      if (l == -INFINITY) { continue; }
      const float w = expf(l - lse);
      const float4* o = reinterpret_cast<const float4*>(params.oaccum_ptr + (s * rows + row) * params.headdim_rounded + c);
      const float4 a = o[0], b = o[1];
      acc[0] += w * a.x; acc[1] += w * a.y; acc[2] += w * a.z; acc[3] += w * a.w;
      acc[4] += w * b.x; acc[5] += w * b.y; acc[6] += w * b.z; acc[7] += w * b.w;
    }
    cutlass::Array<Element, 8> packed;
    CUTE_UNROLL
    for (int j = 0; j < 8; ++j) { packed[j] = Element(acc[j]); }
    *reinterpret_cast<cutlass::Array<Element, 8>*>(out + c) = packed;
  }
  if (lane == 0) { params.lse_ptr[row] = lse; }
}

}  // namespace flash
