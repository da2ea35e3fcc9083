// Deterministic dQ on the sm90 backward (BwdParams::deterministic): the thread blocks of one
// (batch, head) all add into the same dq_accum tiles, and float addition is not associative, so
// each query block's tile takes the K/V blocks' adds in K/V block order. One int32 per query tile
// (params.h dq_semaphore_ptr: one per kBwdSemaphoreRows rows, a 128-row tile uses the first of its
// two; zeroed by the pre-pass) counts the adds done; K/V block n's dQ writer
// waits until it reads its turn, adds, waits for its add to complete, and bumps it.
// The turns (bwd_kernel.h dq_turn_number): a K/V block adds into query blocks m_min(n) .. end
// (q_block_range; m_min(n) is 0, or grows with n when causal), so the blocks adding into tile m are
// 0 .. N(m) - 1, each exactly once: in ascending order (turn n), or causal in descending order (turn
// N(m) - 1 - n, kDqTurnsCausalDescending). No deadlock: a block waits only for the one before it in its
// tile's order, launched before it (blockIdx.x = n; descending: blockIdx.x = n_blocks - 1 - n), which
// itself waits only for the one before that.
// The adds are TMA bulk reduce-adds (async proxy); the proxy fences order them with the semaphore's
// generic-proxy acquire / release.
#pragma once

#include <cute/config.hpp>

namespace flash::sm90 {

// Causal turn order (bwd_kernel.h dq_turn_number): descending, with the causal deterministic blocks
// launched last-first (FA3's order), or ascending as the non-causal tiles. H200, d = 128 causal backward
// at 1k / 4k / 16k: ascending 182 / 244 / 320 TFLOP/s (0.49-0.66x the default backward: the
// staircase), descending 277 / 415 / 482 (0.89-1.07x the default in the same run; d = 64 0.89-0.93x;
// results/h200_det_desc.md). Both bit-identical run to run, sanitizers clean.
constexpr bool kDqTurnsCausalDescending = true;

// The semaphore primitives the turns and the store-first tickets share.
// Spins until ready(*sem) (acquire), then the proxy fence: the TMA reduce-add that follows (async
// proxy) reads what the acquire made visible.
template <class Ready>
CUTE_DEVICE void dq_sem_wait(const int* sem, Ready ready) {
  int seen;
  do {
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(seen) : "l"(sem) : "memory");
  } while (!ready(seen));
  asm volatile("fence.proxy.async.global;" ::: "memory");
}

// After a TMA store or reduce-add into dq_accum was issued and committed (tma_store_arrive): waits
// until it has written dq_accum (not only read shared memory), then adds kAdd to *sem (release).
template <int kAdd>
CUTE_DEVICE void dq_sem_release_after_bulk(int* sem) {
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  asm volatile("fence.proxy.async.global;" ::: "memory");
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;" ::"l"(sem), "n"(kAdd) : "memory");
}

// The dQ writer before the reduce-add of its tile: spins until *turn == n.
CUTE_DEVICE void dq_turn_wait(const int* turn, int n) {
  dq_sem_wait(turn, [n](int seen) { return seen == n; });
}

// After its reduce-add: passes the turn on.
CUTE_DEVICE void dq_turn_pass(int* turn) { dq_sem_release_after_bulk<1>(turn); }

// Store-first kernels (bwd_api.h), not deterministic: the first K/V block to reach a tile stores its part,
// the others add. Who is first is decided by a ticket (an atomic add of 1 on the tile's semaphore, in
// the order the writers get there), not by block index, so a block only ever waits for one that is
// already running (no launch-order assumption, unlike the turns). The first one, once its store has
// completed, adds kDqStoredMark (> any number of tickets); the others wait to see it.
constexpr int kDqStoredMark = 1 << 24;

// Takes this block's ticket for the tile; true: it is the first.
CUTE_DEVICE bool dq_first_ticket(int* sem) {
  int ticket;
  asm volatile("atom.relaxed.gpu.global.add.s32 %0, [%1], 1;" : "=r"(ticket) : "l"(sem) : "memory");
  return ticket == 0;
}

// A later block, before its reduce-add: spins until the first one's store is visible.
CUTE_DEVICE void dq_first_wait(const int* sem) {
  dq_sem_wait(sem, [](int seen) { return seen >= kDqStoredMark; });
}

// The first block, after its store: marks the tile stored.
CUTE_DEVICE void dq_first_pass(int* sem) { dq_sem_release_after_bulk<kDqStoredMark>(sem); }

}  // namespace flash::sm90
