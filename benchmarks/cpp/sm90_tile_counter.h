// The persistent sm90 forward's tile counter (FwdParams::sm90_tiles.counter; causal, d = 64) for the C++
// benchmarks and the sm90 harness: one int of device memory for the process (they run one forward at a
// time on one stream; the launch zeroes it), nullptr if cudaMalloc failed (run_fwd then runs those
// calls on the sm80 kernels; the harness's direct launches report cudaErrorInvalidValue).
#pragma once

#include <cuda_runtime.h>

namespace bench {

inline int* sm90_tile_counter() {
  static int* counter = nullptr;
  if (counter == nullptr && cudaMalloc(&counter, sizeof(int)) != cudaSuccess) { counter = nullptr; }
  return counter;
}

}  // namespace bench
