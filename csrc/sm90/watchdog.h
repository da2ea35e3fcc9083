// Waits of the persistent sm90 forward, with an optional watchdog (debug builds only): with
// FLASH_ATTN_SM90_WATCHDOG defined every mbarrier wait (Q full/empty, K/V full/empty) spins on
// try_wait against a clock64 budget; past it, lane 0 of the waiting warp prints the site, the
// phase it waits for, the barrier word and its progress (tile, block), and the kernel traps: a
// protocol deadlock becomes a launch error that says where, instead of a hang (the C++ harness
// builds its part 16 so, scripts/sm90_check.sh). Without the macro these are the plain waits, the
// same instructions as before. Named-barrier waits (bar.sync) cannot be bounded; a warpgroup stuck
// there shows up as the other roles' reports and its own absence.
#pragma once

#include <cstdio>

#include <cute/config.hpp>
#include <cutlass/arch/barrier.h>

namespace flash::sm90 {

enum class WaitSite : int { kQFull = 0, kQEmpty = 1, kKFull = 2, kVFull = 3, kKEmpty = 4, kVEmpty = 5,
                            kTileFull = 6, kTileEmpty = 7 };

#ifdef FLASH_ATTN_SM90_WATCHDOG
constexpr long long kWatchdogCycles = 1ll << 32;  // ~2.2 s at 1.98 GHz: far beyond any legitimate wait

CUTE_DEVICE void watchdog_fire(WaitSite site, uint32_t phase, const uint64_t* bar, int tile, int block) {
  if (threadIdx.x % 32 == 0) {
    const unsigned long long word = bar ? *reinterpret_cast<const volatile unsigned long long*>(bar) : 0ull;
    printf("sm90 watchdog: CTA %d thread %d site %d (0 q_full 1 q_empty 2 k_full 3 v_full 4 k_empty 5 v_empty "
           "6 tile_full 7 tile_empty) phase %u barrier word 0x%016llx tile %d block %d\n",
           int(blockIdx.x), int(threadIdx.x), int(site), phase, word, tile, block);
  }
  __trap();
}
#endif

// Wait until the phase of parity `phase` of mbarrier `bar` has completed.
CUTE_DEVICE void mbar_wait(uint64_t* bar, uint32_t phase, WaitSite site, int tile, int block) {
#ifdef FLASH_ATTN_SM90_WATCHDOG
  const long long start = clock64();
  while (!cutlass::arch::ClusterBarrier::try_wait(bar, phase)) {
    if (clock64() - start > kWatchdogCycles) { watchdog_fire(site, phase, bar, tile, block); }
  }
#else
  (void)site, (void)tile, (void)block;
  cutlass::arch::ClusterBarrier::wait(bar, phase);
#endif
}

// PipelineTmaAsync consumer_wait / producer_acquire through the watchdog. pipe_consumer_wait_token: the wait
// after an early consumer_try_wait, `token` (cutlass::ConsumerToken) from a try-wait issued some work before,
// so that a stage already full costs no poll here (FA3's consumer_try_wait).
template <class Pipeline, class State, class Token>
CUTE_DEVICE void pipe_consumer_wait_token(Pipeline& pipe, State const& st, Token token, WaitSite site, int tile,
                                          int block) {
#ifdef FLASH_ATTN_SM90_WATCHDOG
  const long long start = clock64();
  while (!(token == cutlass::BarrierStatus::WaitDone)) {
    if (clock64() - start > kWatchdogCycles) { watchdog_fire(site, st.phase(), nullptr, tile, block); }
    token = pipe.consumer_try_wait(st);
  }
  pipe.consumer_wait(st, token);
#else
  (void)site, (void)tile, (void)block;
  pipe.consumer_wait(st, token);
#endif
}

template <class Pipeline, class State>
CUTE_DEVICE void pipe_consumer_wait(Pipeline& pipe, State const& st, WaitSite site, int tile, int block) {
#ifdef FLASH_ATTN_SM90_WATCHDOG
  pipe_consumer_wait_token(pipe, st, pipe.consumer_try_wait(st), site, tile, block);
#else
  (void)site, (void)tile, (void)block;
  pipe.consumer_wait(st);
#endif
}

template <class Pipeline, class State>
CUTE_DEVICE void pipe_producer_acquire(Pipeline& pipe, State const& st, WaitSite site, int tile, int block) {
#ifdef FLASH_ATTN_SM90_WATCHDOG
  const long long start = clock64();
  auto token = pipe.producer_try_acquire(st);
  while (!(token == cutlass::BarrierStatus::WaitDone)) {
    if (clock64() - start > kWatchdogCycles) { watchdog_fire(site, st.phase(), nullptr, tile, block); }
    token = pipe.producer_try_acquire(st);
  }
  pipe.producer_acquire(st, token);
#else
  (void)site, (void)tile, (void)block;
  pipe.producer_acquire(st);
#endif
}

}  // namespace flash::sm90
