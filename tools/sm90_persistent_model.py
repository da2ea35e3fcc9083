"""Executable model of the persistent sm90 forward's synchronisation (csrc/sm90/fwd_persistent.h +
fwd_mainloop.h run_blocks, kOverlap), warp by warp, run under random interleavings: the producer
thread, 2 consumer warpgroups x 4 warps, the K/V PipelineTmaAsync stages (full: 1 arrival + TMA
bytes; empty: 256 thread arrivals), q_full/q_empty per warpgroup, the two GEMM-turn named barriers
(256 threads) and the per-warpgroup epilogue barrier (128), TMA loads landing after arbitrary delays.
It checks that every schedule finishes (no deadlock), that no barrier is over-arrived, and that every
consumer read sees the data of its own tile and block (Q rows, K/V stage) and that a warpgroup's Q
rows are not overwritten before its O store has read them. benchmarks/NOTES.md (issue 11, v4) has the
argument in words; tests/test_sm90_persistent_model_cpu.py runs this, and mutations it must catch.
A model of the code, not the code: keep it in step with fwd_persistent.h."""
from __future__ import annotations

import random

STAGES = 2


class Violation(Exception):
    pass


class MBar:
    """mbarrier: a phase completes when its arrivals and transaction bytes are all in."""
    def __init__(self, count):
        self.count, self.pending, self.completed, self.tx = count, count, 0, 0

    def arrive(self, n=1):
        self.pending -= n
        if self.pending < 0:
            raise Violation("mbarrier over-arrival")
        self._check()

    def land(self):
        self.tx -= 1
        self._check()

    def _check(self):
        if self.pending == 0 and self.tx == 0:
            self.completed += 1
            self.pending = self.count

    def ready(self, parity):  # try_wait.parity: the phase of this parity has completed
        return (self.completed & 1) != parity


class NamedBarrier:
    """bar.sync / bar.arrive with a thread count; a warp counts 32."""
    def __init__(self, count):
        self.count, self.arrived, self.gen = count, 0, 0

    def arrive(self):
        self.arrived += 32
        if self.arrived > self.count:
            raise Violation("named barrier over-arrival")
        if self.arrived == self.count:
            self.arrived, self.gen = 0, self.gen + 1
        return self.gen if self.arrived == 0 else self.gen + 1  # generation that releases this arrival


def run(tiles, seed, first_turn="wg1", consumer_counts_empty=False, producer_skips_q_empty=False,
        last_v_advance=True):
    """One random schedule of a CTA running `tiles` (number of key blocks per tile; 0 = no key).
    first_turn: "wg1" (fwd_persistent.h: warpgroup 1 arrives on warpgroup 0's turn once), "wg0"
    (v3's form), "none" or "both" (mutations). Returns True when every role finished, False on a
    deadlock; raises Violation on an ordering error. last_v_advance=False: the consumer releases a
    tile's last V stage without advancing its V state (the hang of 2026-12-02, fwd_mainloop.h
    run_blocks before the fix: harmless with one tile per CTA, a stale V stage from the second)."""
    rnd = random.Random(seed)
    full_k, full_v = [MBar(1) for _ in range(STAGES)], [MBar(1) for _ in range(STAGES)]
    empty_k, empty_v = [MBar(256) for _ in range(STAGES)], [MBar(256) for _ in range(STAGES)]
    q_full, q_empty = [MBar(1), MBar(1)], [MBar(1), MBar(1)]
    turn, epi = [NamedBarrier(256), NamedBarrier(256)], [NamedBarrier(128), NamedBarrier(128)]
    smem_k, smem_v, smem_q = [None] * STAGES, [None] * STAGES, [None, None]
    stored = [0, 0]  # per warpgroup: O stores whose reads finished (epilogues done)
    in_flight = []  # TMA loads: (barrier, smem list, index, content)

    def wait(bar, parity):
        while not bar.ready(parity):
            yield

    def sync(nbar):
        gen = nbar.arrive()
        while nbar.gen < gen:
            yield

    def advance(state):
        state[0] = (state[0] + 1) % STAGES
        state[1] ^= int(state[0] == 0)

    def producer():
        st_k, st_v, loaded = [0, 1], [0, 1], 0

        def load(full, empty, smem, st, content):
            yield from wait(empty[st[0]], st[1])
            full[st[0]].tx += 1
            full[st[0]].arrive()
            in_flight.append((full[st[0]], smem, st[0], content))
            advance(st)

        for t, nb in enumerate(tiles):
            if nb == 0:
                continue
            yield from load(full_k, empty_k, smem_k, st_k, ("k", t, nb - 1))
            for c in range(2):
                if loaded > 0 and not producer_skips_q_empty:
                    yield from wait(q_empty[c], (loaded - 1) & 1)
                q_full[c].tx += 1
                q_full[c].arrive()
                in_flight.append((q_full[c], smem_q, c, ("q", t, loaded)))
            loaded += 1
            yield from load(full_v, empty_v, smem_v, st_v, ("v", t, nb - 1))
            for n in range(nb - 2, -1, -1):
                yield from load(full_k, empty_k, smem_k, st_k, ("k", t, n))
                yield from load(full_v, empty_v, smem_v, st_v, ("v", t, n))

    def consumer(c, w):
        st_k, st_v, loaded = [0, 0], [0, 0], 0
        if (first_turn in ("wg1", "both") and c == 1) or (first_turn in ("wg0", "both") and c == 0):
            turn[0].arrive()

        def expect(smem, idx, content):
            if smem[idx] != content:
                raise Violation(f"warpgroup {c} warp {w} read {smem[idx]} expecting {content}")

        for t, nb in enumerate(tiles):
            if nb == 0:
                loaded += int(consumer_counts_empty)
                continue
            yield from wait(q_full[c], loaded & 1)
            expect(smem_q, c, ("q", t, loaded))
            yield from wait(full_k[st_k[0]], st_k[1])
            yield from sync(turn[c])
            expect(smem_k, st_k[0], ("k", t, nb - 1))
            turn[1 - c].arrive()
            empty_k[st_k[0]].arrive(32)
            advance(st_k)
            for n in range(nb - 2, -1, -1):
                yield from wait(full_k[st_k[0]], st_k[1])
                yield from sync(turn[c])
                expect(smem_k, st_k[0], ("k", t, n))
                yield from wait(full_v[st_v[0]], st_v[1])
                expect(smem_v, st_v[0], ("v", t, n + 1))
                turn[1 - c].arrive()
                empty_k[st_k[0]].arrive(32)
                advance(st_k)
                empty_v[st_v[0]].arrive(32)
                advance(st_v)
            yield from wait(full_v[st_v[0]], st_v[1])
            expect(smem_v, st_v[0], ("v", t, 0))
            empty_v[st_v[0]].arrive(32)
            if last_v_advance:
                advance(st_v)
            expect(smem_q, c, ("q", t, loaded))  # the O rows are still this tile's until the store
            yield from sync(epi[c])
            if w == 0:  # thread 0: TMA store, tma_store_wait, then q_empty
                stored[c] += 1
                q_empty[c].arrive()
            loaded += 1

    roles = [producer()] + [consumer(c, w) for c in range(2) for w in range(4)]
    alive, idle = list(range(len(roles))), 0
    while alive or in_flight:
        options = alive + (["tma"] if in_flight else [])
        pick = rnd.choice(options)
        if pick == "tma":
            bar, smem, idx, content = in_flight.pop(rnd.randrange(len(in_flight)))
            if content[0] == "q" and stored[idx] < content[2]:
                raise Violation(f"Q of load {content[2]} landed in warpgroup {idx}'s rows before its O store")
            smem[idx] = content
            bar.land()
            idle = 0
            continue
        try:
            next(roles[pick])
        except StopIteration:
            alive.remove(pick)
            idle = 0
        idle += 1
        if idle > 5000:
            return False
    return True


def random_tiles(rnd):
    return [rnd.choice([0, 1, 1, 2, 3, 5]) for _ in range(rnd.randint(1, 7))]


if __name__ == "__main__":
    import sys
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    for form in ("wg1", "wg0"):
        bad = sum(not run(random_tiles(random.Random(i)), i, form) for i in range(n))
        print(f"first turn by {form}: {n} schedules, {bad} deadlocks")
