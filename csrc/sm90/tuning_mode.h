// A tuning option measured faster at one head dim only, as a three-way compile-time mode:
//   0 never, 1 every head dim, 2 (the usual default) the head dim where it measured faster.
// Users: fwd_mainloop.h fwd_schedule_block and fwd_exp_split, bwd_mainloop.h bwd_skip_masked_dropout, bwd_traits.h
// kDQRowPerm (all d = 128).
#pragma once

namespace flash::sm90 {

template <int kMode>
constexpr bool tuning_mode_on(int headdim, int measured_headdim) {
  static_assert(kMode >= 0 && kMode <= 2, "a tuning mode is 0 (never), 1 (every head dim) or 2 (the measured one)");
  return kMode == 1 || (kMode == 2 && headdim == measured_headdim);
}

}  // namespace flash::sm90
