// Host-side TMA rules shared by the sm90 families' supports checks (no CuTe): CuTe's own checks are
// asserts that vanish under NDEBUG, so calls that break them go to the sm80 kernels instead.
#pragma once

#include <cstdint>

namespace flash::sm90::detail {

inline bool tma_aligned(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }
// TMA: global strides (bytes) multiples of 16 -> element strides multiples of 8 (16-bit types);
// zero strides (broadcast views) go to the sm80 kernels.
inline bool tma_strides(int64_t row, int64_t head, int64_t batch) {
  return row > 0 && head > 0 && batch > 0 && row % 8 == 0 && head % 8 == 0 && batch % 8 == 0;
}

}  // namespace flash::sm90::detail
