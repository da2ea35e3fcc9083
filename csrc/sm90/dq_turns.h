// Deterministic dQ on the sm90 backward (BwdParams::deterministic): the thread blocks of one
// (batch, head) all add into the same dq_accum tiles, and float addition is not associative, so
// each query block's tile takes the K/V blocks' adds in K/V block order. One int32 per query block
// (params.h dq_semaphore_ptr, zeroed by the pre-pass) counts the adds done; K/V block n's dQ writer
// waits until it reads n, adds, waits for its add to complete, and bumps it to n + 1.
// Why n, n + 1, ... is the order of every tile: a K/V block adds into query blocks m_min(n) .. end
// (bwd_kernel.h q_block_range; m_min(n) is 0, or grows with n when causal), so the blocks adding into
// tile m are 0 .. N(m), each exactly once. No deadlock: block n waits only for n - 1, launched
// before it (blockIdx.x = n, the fastest grid axis) and itself waiting only for n - 2.
// The adds are TMA bulk reduce-adds (async proxy); the proxy fences order them with the semaphore's
// generic-proxy acquire / release.
#pragma once

#include <cute/config.hpp>

namespace flash::sm90 {

// The dQ writer before the reduce-add of its tile: spins until *turn == n (acquire).
CUTE_DEVICE void dq_turn_wait(const int* turn, int n) {
  int seen;
  do {
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(seen) : "l"(turn) : "memory");
  } while (seen != n);
  asm volatile("fence.proxy.async.global;" ::: "memory");  // the reduce-add reads what the acquire made visible
}

// After the reduce-add was issued and committed (tma_store_arrive): waits until it has written
// dq_accum (not only read shared memory), then passes the turn on (release).
CUTE_DEVICE void dq_turn_pass(int* turn) {
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  asm volatile("fence.proxy.async.global;" ::: "memory");
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(turn) : "memory");
}

}  // namespace flash::sm90
