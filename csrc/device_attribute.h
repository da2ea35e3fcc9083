// Host-only: attributes of the current CUDA device, cached (the dispatch asks on every call).
#pragma once

#include <cuda_runtime.h>

#include <atomic>

namespace flash {

// An attribute of the current device, cached per (attribute, device): a driver call on every call
// otherwise. 0 on a CUDA error (uncached, asked again next time).
template <cudaDeviceAttr kAttr>
inline int current_device_attribute() {
  constexpr int kCachedDevices = 64;
  static std::atomic<int> cache[kCachedDevices] = {};  // value + 1; 0 = not asked yet
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) { return 0; }
  const bool cached = device >= 0 && device < kCachedDevices;
  if (cached) {
    if (int known = cache[device].load(std::memory_order_relaxed)) { return known - 1; }
  }
  int value = 0;
  if (cudaDeviceGetAttribute(&value, kAttr, device) != cudaSuccess) { return 0; }
  if (cached) { cache[device].store(value + 1, std::memory_order_relaxed); }
  return value;
}

}  // namespace flash
