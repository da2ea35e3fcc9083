// The dropout keep-mask of a forward call, element by element (the testing hook behind
// return_attn_probs: flash_attn_cuda/__init__.py). The attention kernels evaluate the same function
// (philox.h) a chunk at a time; tests check the two agree through the outputs.
#include <cuda_runtime.h>

#include "flash_api.h"
#include "philox.h"

namespace flash {

// mask[(b * nheads + h) * seqlen_q * seqlen_k + i * seqlen_k + j] = keep(b, h, i, j), one thread each.
__global__ void dropout_mask_kernel(const int64_t* __restrict__ rng_state, int nheads, int seqlen_q, int seqlen_k,
                                    uint32_t threshold, uint8_t* __restrict__ mask, int64_t total) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= total) { return; }
  const int col = int(idx % seqlen_k);
  const int row = int((idx / seqlen_k) % seqlen_q);
  const int64_t bh = idx / (int64_t(seqlen_k) * seqlen_q);  // batch * nheads + head
  const uint64_t seed = uint64_t(rng_state[0]);
  const DropoutRng rng{uint32_t(seed), uint32_t(seed >> 32), uint64_t(rng_state[1]) + uint64_t(bh), threshold};
  mask[idx] = dropout_keep(rng, row, col) ? 1 : 0;
}

cudaError_t run_dropout_mask(const int64_t* rng_state, int batch, int nheads, int seqlen_q, int seqlen_k,
                             uint32_t threshold, uint8_t* mask, cudaStream_t stream) {
  const int64_t total = int64_t(batch) * nheads * seqlen_q * seqlen_k;
  if (total == 0) { return cudaSuccess; }
  constexpr int kThreads = 256;
  const int64_t blocks = (total + kThreads - 1) / kThreads;
  if (blocks > int64_t(1) << 31) { return cudaErrorInvalidValue; }
  dropout_mask_kernel<<<unsigned(blocks), kThreads, 0, stream>>>(rng_state, nheads, seqlen_q, seqlen_k, threshold,
                                                                 mask, total);
  return cudaGetLastError();
}

}  // namespace flash
