// A tuning option measured faster at some head dims only, as a three-way compile-time mode:
//   0 never, 1 every head dim, 2 (the usual default) the head dims where it measured faster.
// Users: fwd_mainloop.h fwd_schedule_block and fwd_exp_split, bwd_mainloop.h bwd_skip_masked_dropout (d = 128),
// bwd_traits.h kDQRowPerm (d = 128 and 64).
#pragma once

namespace flash::sm90 {

template <int kMode, typename... MeasuredHeadDims>
constexpr bool tuning_mode_on(int headdim, int measured_headdim, MeasuredHeadDims... more_measured) {
  static_assert(kMode >= 0 && kMode <= 2, "a tuning mode is 0 (never), 1 (every head dim) or 2 (the measured ones)");
  return kMode == 1 || (kMode == 2 && (headdim == measured_headdim || ((headdim == more_measured) || ...)));
}

}  // namespace flash::sm90
