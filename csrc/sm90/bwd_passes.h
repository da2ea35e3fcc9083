// The sm90 backward's memory-bound passes around its main kernel (plain CUDA, no wgmma): the
// pre-pass (delta, lse_log2, dq_accum zeroed unless the kernel stores first, bwd_api.h) and the dQ conversion,
// on the scratch layout of params.h with dq_accum's rows row-major (the main kernel's TMA reduce-add
// writes whole rows).
// Not varlen, one dq_accum slice, 16-byte aligned O / dO / dQ rows: what sm90::bwd_supports accepts.
//
// Each thread owns 8 consecutive columns of a row (one 16-byte load of O and of dO, two float4 of
// dq_accum), kHeadDim / 8 threads per row, 256 threads per block. The sm80 family's passes give a
// row one warp with 8 lanes per 16 bytes (d = 128: half the lanes idle) and convert with scalar
// loads in its MMA layout; measured on the H200 (scripts/profile_bwd.py, d = 128, 16k tokens x 16
// heads): pre-pass 67.7 us + dq_accum fill 30.4 us + conversion 116 us, where cuDNN's two passes
// take 69.8 + 57.4 us.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "../params.h"
#include "dq_adders.h"

namespace flash::sm90 {

template <int kHeadDim>
struct BwdPassRows {
  static constexpr int kThreads = 256;
  static constexpr int kLanesPerRow = kHeadDim / 8;          // 16 bytes of bf16 / fp16 each
  static constexpr int kRows = kThreads / kLanesPerRow;      // rows per block
  static_assert(kHeadDim % 8 == 0 && 32 % kLanesPerRow == 0, "a row's lanes sit in one warp");
};

// Scratch row 0 of (batch, head): dq_accum, delta, lse_log2 rows (batch, nheads, seqlen_q_rounded).
__device__ __forceinline__ int64_t bwd_pass_row0(const BwdParams& p, int batch, int head) {
  return (int64_t(batch) * p.nheads + head) * p.seqlen_q_rounded;
}

// For every row < seqlen_q_rounded of (batch = blockIdx.z, head = blockIdx.y):
//   dq_accum[row, :] = 0;  delta[row] = sum_c dO[row, c] * O[row, c];  lse_log2[row] = LSE * log2(e)
//   and, where given (deterministic, or store-first), the dQ semaphore of every kBwdSemaphoreRows rows = 0
// Padding rows and rows that saw no key (LSE = -inf) get delta 0 and lse_log2 +inf (P = 0 there).
// kZeroAccum = false (store-first, bwd_api.h): dq_accum is left as it is (the main kernel's first
// block per tile stores into it).
template <typename Element, int kHeadDim, bool kZeroAccum = true>
__global__ void __launch_bounds__(BwdPassRows<kHeadDim>::kThreads) bwd_prepass_rows_kernel(const BwdParams p) {
  using R = BwdPassRows<kHeadDim>;
  const int lane = threadIdx.x % R::kLanesPerRow, col = lane * 8;
  const int row = blockIdx.x * R::kRows + threadIdx.x / R::kLanesPerRow, head = blockIdx.y, batch = blockIdx.z;
  const int64_t scratch_row = bwd_pass_row0(p, batch, head) + row;
  if constexpr (kZeroAccum) {
    float4* acc = reinterpret_cast<float4*>(p.dq_accum_ptr + scratch_row * kHeadDim + col);  // (8,) fp32
    acc[0] = make_float4(0.f, 0.f, 0.f, 0.f);
    acc[1] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  const bool real = row < p.seqlen_q;
  float sum = 0.f;
  if (real && col < p.headdim) {
    const Element* o = static_cast<const Element*>(p.o_ptr) + batch * p.o_batch_stride + row * p.o_row_stride +
                       head * p.o_head_stride + col;  // (8,)
    const Element* dout = static_cast<const Element*>(p.do_ptr) + batch * p.do_batch_stride +
                          row * p.do_row_stride + head * p.do_head_stride + col;  // (8,)
    const uint4 a = *reinterpret_cast<const uint4*>(o);
    const uint4 b = *reinterpret_cast<const uint4*>(dout);
    const Element* ea = reinterpret_cast<const Element*>(&a);
    const Element* eb = reinterpret_cast<const Element*>(&b);
#pragma unroll
    for (int j = 0; j < 8; ++j) { sum += float(ea[j]) * float(eb[j]); }
  }
  // Every lane of the warp takes part (rows past seqlen_q sum zeros); offsets stay inside a row's lanes.
#pragma unroll
  for (int offset = R::kLanesPerRow / 2; offset > 0; offset /= 2) { sum += __shfl_xor_sync(0xffffffffu, sum, offset); }
  if (lane == 0) {
    if (p.dq_semaphore_ptr != nullptr && row % kBwdSemaphoreRows == 0) {  // deterministic: dq_turns.h
      p.dq_semaphore_ptr[(int64_t(batch) * p.nheads + head) * (p.seqlen_q_rounded / kBwdSemaphoreRows) +
                         row / kBwdSemaphoreRows] = 0;
    }
    const float lse = real ? p.lse_ptr[(int64_t(batch) * p.nheads + head) * p.seqlen_q + row] : -INFINITY;
    p.delta_ptr[scratch_row] = real ? sum : 0.f;
    p.lse_log2_ptr[scratch_row] = lse == -INFINITY ? INFINITY : lse * float(M_LOG2E);
  }
}

// dq[batch, row, head, :] = softmax_scale * dq_accum[row, :] in Element, rows < seqlen_q.
// kTileM > 0 (store-first): dq_accum was not zeroed, so rows of a (kTileM-row) tile no K/V block
// (kTileN keys each) added into (dq_tile_adders: causal rows that see no key) get dQ = 0 unread.
template <typename Element, int kHeadDim, int kTileM = 0, int kTileN = 0>
__global__ void __launch_bounds__(BwdPassRows<kHeadDim>::kThreads) bwd_convert_dq_rows_kernel(const BwdParams p) {
  using R = BwdPassRows<kHeadDim>;
  const int col = threadIdx.x % R::kLanesPerRow * 8;
  const int row = blockIdx.x * R::kRows + threadIdx.x / R::kLanesPerRow, head = blockIdx.y, batch = blockIdx.z;
  if (row >= p.seqlen_q || col >= p.headdim) { return; }
  float4 lo = make_float4(0.f, 0.f, 0.f, 0.f), hi = lo;
  bool written = true;
  if constexpr (kTileM > 0) {
    written = dq_tile_adders<kTileM, kTileN>(row / kTileM, p.seqlen_q, p.seqlen_k, is_causal(p)) > 0;
  }
  if (written) {
    const float4* acc = reinterpret_cast<const float4*>(p.dq_accum_ptr + (bwd_pass_row0(p, batch, head) + row) * kHeadDim + col);
    lo = acc[0], hi = acc[1];
  }
  const float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  uint4 packed;
  Element* out = reinterpret_cast<Element*>(&packed);
#pragma unroll
  for (int j = 0; j < 8; ++j) { out[j] = Element(v[j] * p.softmax_scale); }
  Element* dq = static_cast<Element*>(p.dq_ptr) + batch * p.dq_batch_stride + row * p.dq_row_stride +
                head * p.dq_head_stride + col;  // (8,)
  *reinterpret_cast<uint4*>(dq) = packed;
}

template <typename Element, int kHeadDim, bool kZeroAccum = true>
cudaError_t launch_bwd_prepass(const BwdParams& p, cudaStream_t stream) {
  using R = BwdPassRows<kHeadDim>;
  static_assert(kBwdRowAlign % R::kRows == 0, "seqlen_q_rounded is a whole number of blocks");
  const dim3 grid(p.seqlen_q_rounded / R::kRows, p.nheads, p.batch);
  bwd_prepass_rows_kernel<Element, kHeadDim, kZeroAccum><<<grid, R::kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

template <typename Element, int kHeadDim, int kTileM = 0, int kTileN = 0>
cudaError_t launch_bwd_convert_dq(const BwdParams& p, cudaStream_t stream) {
  using R = BwdPassRows<kHeadDim>;
  const dim3 grid((p.seqlen_q + R::kRows - 1) / R::kRows, p.nheads, p.batch);
  bwd_convert_dq_rows_kernel<Element, kHeadDim, kTileM, kTileN><<<grid, R::kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace flash::sm90
