"""Executable model of the persistent sm90 forward's synchronisation (csrc/sm90/fwd_persistent.h +
fwd_mainloop.h run_blocks, kOverlap), warp by warp, run under random interleavings: the producer
thread, 2 consumer warpgroups x 4 warps, the K/V PipelineTmaAsync stages (full: 1 arrival + TMA
bytes; empty: 256 thread arrivals), q_full/q_empty per warpgroup, the two GEMM-turn named barriers
(256 threads) and the per-warpgroup epilogue barrier (128), TMA loads landing after arbitrary delays.
It checks that every schedule finishes (no deadlock), that no barrier is over-arrived, and that every
consumer read sees the data of its own tile and block (Q rows, K/V stage) and that a warpgroup's Q
rows are not overwritten before its O store has read them. The dynamic tile order of the kernels that
draw their tiles (causal; d = 64 non-causal, whose three consumer warpgroups the model runs as two)
(run(dynamic=True)): several CTAs share the tile counter, each producer publishes its tiles through
the two-slot ring; every tile must run exactly once. benchmarks/NOTES.md (issue 11, v4) has the
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


class Counter:
    """The global tile counter (atomicAdd) of the drawing kernels, shared by the CTAs of one launch."""
    def __init__(self):
        self.value = 0

    def take(self):
        old, self.value = self.value, self.value + 1
        return old


def run(tiles, seed, first_turn="wg1", consumer_counts_empty=False, producer_skips_q_empty=False,
        last_v_advance=True, ctas=1, dynamic=False, producer_skips_tile_empty=False, no_sentinel=False):
    """One random schedule of `ctas` CTAs running `tiles` (number of key blocks per tile; 0 = no key).
    Static (dynamic=False, fwd_persistent.h's non-causal loop at d = 128 / 256): CTA b runs tiles b, b + ctas, ...
    Dynamic (the causal loop, and d = 64's): each CTA's producer takes its first index from a shared Counter, the
    next one after each tile's last load, and publishes every index (the final
    out-of-range one too) through a ring of two slots: tile_full (1 arrival) / tile_empty (256, one
    per consumer thread: here 32 per warp). Checks on top of the per-tile ones: a consumer reads the
    slot its producer published for its j-th tile, and every tile runs exactly once over all CTAs.
    first_turn: "wg1" (fwd_persistent.h: warpgroup 1 arrives on warpgroup 0's turn once), "wg0"
    (v3's form), "none" or "both" (mutations). Returns True when every role finished, False on a
    deadlock; raises Violation on an ordering error. last_v_advance=False: the consumer releases a
    tile's last V stage without advancing its V state (the hang of 2026-12-02, fwd_mainloop.h
    run_blocks before the fix: harmless with one tile per CTA, a stale V stage from the second).
    Mutations of the dynamic order: producer_skips_tile_empty (overwrites a slot not yet read),
    no_sentinel (the producer stops without publishing the out-of-range index)."""
    rnd = random.Random(seed)
    counter, runs = Counter(), [0] * len(tiles)
    ctas = max(1, min(ctas, len(tiles)))
    roles, in_flight = [], []  # TMA loads: (cta state, barrier, smem list, index, content)
    for b in range(ctas):
        roles += cta_roles(b, tiles, ctas, dynamic, counter, runs, in_flight, first_turn, consumer_counts_empty,
                           producer_skips_q_empty, last_v_advance, producer_skips_tile_empty, no_sentinel)
    alive, idle = list(range(len(roles))), 0
    while alive or in_flight:
        options = alive + (["tma"] if in_flight else [])
        pick = rnd.choice(options)
        if pick == "tma":
            stored, bar, smem, idx, content = in_flight.pop(rnd.randrange(len(in_flight)))
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
    if runs != [1] * len(tiles):
        raise Violation(f"tiles run {runs} times, expected once each")
    return True


def cta_roles(b, tiles, ctas, dynamic, counter, runs, in_flight, first_turn, consumer_counts_empty,
              producer_skips_q_empty, last_v_advance, producer_skips_tile_empty, no_sentinel):
    """The producer and 2 x 4 consumer warps of CTA b, as generators (one step per yield)."""
    full_k, full_v = [MBar(1) for _ in range(STAGES)], [MBar(1) for _ in range(STAGES)]
    empty_k, empty_v = [MBar(256) for _ in range(STAGES)], [MBar(256) for _ in range(STAGES)]
    q_full, q_empty = [MBar(1), MBar(1)], [MBar(1), MBar(1)]
    turn, epi = [NamedBarrier(256), NamedBarrier(256)], [NamedBarrier(128), NamedBarrier(128)]
    smem_k, smem_v, smem_q = [None] * STAGES, [None] * STAGES, [None, None]
    stored = [0, 0]  # per warpgroup: O stores whose reads finished (epilogues done)
    tile_full, tile_empty, slot = [MBar(1), MBar(1)], [MBar(256), MBar(256)], [None, None]
    published = []  # the producer's j-th published index, what every consumer's j-th read must see

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
            in_flight.append((stored, full[st[0]], smem, st[0], content))
            advance(st)

        def publish(j, t):  # fwd_persistent.h publish_tile
            if j >= 2 and not producer_skips_tile_empty:
                yield from wait(tile_empty[j & 1], ((j >> 1) - 1) & 1)
            slot[j & 1] = t
            published.append(t)
            tile_full[j & 1].arrive()

        for j, t in enumerate(tile_order()):
            if t is None:  # dynamic: the out-of-range index
                if not no_sentinel:
                    yield from publish(j, len(tiles))
                return
            if dynamic:
                yield from publish(j, t)
            nb = tiles[t]
            if nb == 0:
                continue
            yield from load(full_k, empty_k, smem_k, st_k, ("k", t, nb - 1))
            for c in range(2):
                if loaded > 0 and not producer_skips_q_empty:
                    yield from wait(q_empty[c], (loaded - 1) & 1)
                q_full[c].tx += 1
                q_full[c].arrive()
                in_flight.append((stored, q_full[c], smem_q, c, ("q", t, loaded)))
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

        for j in range(len(tiles) + 1):
            if dynamic:  # fwd_persistent.h receive_tile
                yield from wait(tile_full[j & 1], (j >> 1) & 1)
                t = slot[j & 1]
                if j >= len(published) or published[j] != t:
                    raise Violation(f"CTA {b} warpgroup {c} read tile {t} as its tile {j}; published: {published}")
                tile_empty[j & 1].arrive(32)
                if t >= len(tiles):
                    return
            else:
                t = b + j * ctas
                if t >= len(tiles):
                    return
            if c == 0 and w == 0:
                runs[t] += 1
            nb = tiles[t]
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

    def tile_order():  # the producer's tiles; dynamic: None after the last (its out-of-range index)
        if not dynamic:
            yield from range(b, len(tiles), ctas)
            return
        t = counter.take()  # fwd_persistent.h producer_first_tile
        while t < len(tiles):
            yield t
            t = counter.take()  # producer_next_tile: after the tile's last load
        yield None

    return [producer()] + [consumer(c, w) for c in range(2) for w in range(4)]


def random_tiles(rnd):
    return [rnd.choice([0, 1, 1, 2, 3, 5]) for _ in range(rnd.randint(1, 7))]


def random_launch(rnd):
    """Tiles of a launch (some with no key, as causal with seqlen_q > seqlen_k) and its CTA count."""
    tiles = [rnd.choice([0, 0, 1, 1, 2, 3, 5]) for _ in range(rnd.randint(1, 10))]
    return tiles, rnd.randint(1, 3)


if __name__ == "__main__":
    import sys
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    for form in ("wg1", "wg0"):
        bad = sum(not run(random_tiles(random.Random(i)), i, form) for i in range(n))
        print(f"first turn by {form}: {n} schedules, {bad} deadlocks")
    bad = 0
    for i in range(n):
        tiles, ctas = random_launch(random.Random(i))
        bad += not run(tiles, i, ctas=ctas, dynamic=True)
    print(f"dynamic tile order (1-3 CTAs, shared counter): {n} schedules, {bad} deadlocks")
