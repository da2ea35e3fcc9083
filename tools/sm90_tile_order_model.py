"""Cost model of the sm90 forward's tile order with causal masks (issue 11; csrc/sm90/fwd_scheduler.h):
per-SM load of the one-tile kernel (fwd_kernel.h, the hardware's block scheduler), the persistent
kernel's static round-robin in index order (before), and its dynamic longest-first order in L2
sections (after), at the FA2 benchmark grid (16k tokens, hidden 2048, bf16).

A tile's time: o + b * key_blocks + mask * masked_blocks (microseconds): o the per-tile overhead
(launch, prologue, Q load, epilogue: less in the persistent kernel, which overlaps the next tile's
loads with the epilogue), b one 128-key block's two GEMMs + softmax, mask the extra of a block the
causal mask touches. o and b are fitted per (head dim, kernel) to the measured non-causal TFLOP/s
(every tile costs the same there, so the makespan is rounds * tile), mask to the one-tile kernel's
causal TFLOP/s (H200, benchmarks/NOTES.md "Outcomes of the merged branches", MEASURED below). The
persistent kernel's measured causal numbers in index order are not fitted: they are the check.
Schedulers:
  one-tile   the hardware hands block (m, head, batch), m fastest and longest first (fwd_kernel.h),
             to the first SM that is free: greedy list scheduling in grid order;
  index      CTA b runs tiles b, b + 132, ... in index order (each head's tiles longest first);
  dynamic    fwd_scheduler.h's causal order (sections of (batch, head) pairs whose K/V fit in 32 MB,
             inside a section every pair's last query block first), each CTA drawing the next index
             when its producer has issued the current tile's last load (kStages = 2 blocks before
             its consumers finish it): greedy LPT;
  static     the same order handed out round-robin (CTA b: b, b + 132, ...; the alternative without
             a counter): each section's rounds leave the low CTAs the longer tiles.
Usage: python3 tools/sm90_tile_order_model.py (prints the fit and the predicted TFLOP/s per shape).
A model of SM time only: L2 / HBM traffic enters only through the sections (kept from FA3) and the
fitted constants."""
from __future__ import annotations

import heapq
import math

SMS = 132  # H200
TOKENS, HIDDEN = 16384, 2048
SEQLENS = (1024, 4096, 16384)
BLOCK_N = 128
STAGES = 2
L2_KV_BYTES = 32 << 20  # fwd_scheduler.h kL2KVBytes
ELEMENT_BYTES = 2
BLOCK_M = {64: 192, 128: 128}  # fwd_tile_table.h: d = 64 three consumer warpgroups, d = 128 two

# H200, bf16, TFLOP/s at seqlen 1k / 4k / 16k (benchmarks/NOTES.md, "Outcomes of the merged branches").
MEASURED = {
    (64, "one-tile", False): (386, 483, 516), (64, "one-tile", True): (250, 405, 490),
    (64, "persistent", False): (407, 489, 509), (64, "index", True): (205, 267, 465),
    (128, "one-tile", False): (504, 592, 608), (128, "one-tile", True): (368, 519, 598),
    (128, "persistent", False): (510, 590, 619), (128, "index", True): (336, 522, 436),
}


def grid_shape(d, seqlen):
    """(batch, nheads) of the FA2 grid."""
    return TOKENS // seqlen, HIDDEN // d


def flops(d, seqlen, causal):
    batch, nheads = grid_shape(d, seqlen)
    f = 4.0 * batch * seqlen * seqlen * nheads * d
    return f / 2 if causal else f


def tile_blocks(block_m, m, seqlen_q, seqlen_k, causal):
    """(key blocks, masked key blocks) of query block m (fwd_kernel.h kv_block_range, bottom-right)."""
    n_max = -(-seqlen_k // BLOCK_N)
    if not causal:
        return n_max, 0
    end = m * block_m + block_m + seqlen_k - seqlen_q
    n_max = 0 if end <= 0 else min(n_max, -(-end // BLOCK_N))
    first_row_last_key = m * block_m + seqlen_k - seqlen_q
    return n_max, sum(1 for n in range(n_max) if n * BLOCK_N + BLOCK_N - 1 > first_row_last_key)


def section_pairs(seqlen_k, d, nheads, nheads_k, batch):
    """fwd_scheduler.h: (batch, head) pairs per L2 section."""
    head_bytes = seqlen_k * 2 * d * ELEMENT_BYTES
    fit = L2_KV_BYTES // head_bytes if head_bytes > 0 else L2_KV_BYTES
    pow2 = 1
    while 2 * pow2 <= fit:
        pow2 *= 2
    want = pow2 * (nheads // nheads_k if nheads_k > 0 else 1)
    pairs = nheads * batch
    return want if want < pairs else max(pairs, 1)


def decode_causal(t, num_m, nheads, num_pairs, section):
    """fwd_scheduler.h FwdScheduler::decode, causal: tile index -> (m_block, head, batch)."""
    per_section = section * num_m
    sec, r = divmod(t, per_section)
    first = sec * section
    pairs = min(section, num_pairs - first)
    m_rank, pair = divmod(r, pairs)
    batch, head = divmod(first + pair, nheads)
    return num_m - 1 - m_rank, head, batch


def tile_time(blocks, c):
    o, b, mask = c
    return o + b * blocks[0] + mask * blocks[1]


def one_tile_times(d, seqlen, c):
    """The one-tile kernel's grid order: (m longest first, head, batch), m fastest."""
    batch, nheads = grid_shape(d, seqlen)
    num_m = -(-seqlen // BLOCK_M[d])
    per_head = [tile_time(tile_blocks(BLOCK_M[d], m, seqlen, seqlen, True), c) for m in range(num_m - 1, -1, -1)]
    return per_head * (batch * nheads)


def dynamic_times(d, seqlen, c):
    batch, nheads = grid_shape(d, seqlen)
    num_m = -(-seqlen // BLOCK_M[d])
    section = section_pairs(seqlen, d, nheads, nheads, batch)
    pairs = batch * nheads
    return [tile_time(tile_blocks(BLOCK_M[d], decode_causal(t, num_m, nheads, pairs, section)[0], seqlen, seqlen,
                                  True), c) for t in range(num_m * pairs)]


def greedy(times, sms=SMS):
    """Makespan when the next tile goes to the first free SM (in list order)."""
    free = [0.0] * min(sms, len(times))
    heapq.heapify(free)
    for x in times:
        heapq.heappush(free, heapq.heappop(free) + x)
    return max(free)


def round_robin(times, ctas=SMS):
    """Makespan when CTA b runs tiles b, b + ctas, ..."""
    load = [0.0] * min(ctas, len(times))
    for i, x in enumerate(times):
        load[i % len(load)] += x
    return max(load)


def dynamic(times, c, ctas=SMS):
    """Makespan of fwd_persistent.h's causal loop: each CTA draws its first index at the start (in CTA
    order here), the next one when its producer has issued the last load, ~min(STAGES, blocks)
    blocks before the tile ends."""
    _, b, _ = c
    ctas = min(ctas, len(times))
    finish = list(times[:ctas])
    draws = [(finish[i] - min(STAGES * b, times[i]), i) for i in range(ctas)]
    heapq.heapify(draws)
    for x in times[ctas:]:
        _, i = heapq.heappop(draws)
        finish[i] += x
        heapq.heappush(draws, (finish[i] - min(STAGES * b, x), i))
    return max(finish)


def tflops(d, seqlen, causal, us):
    return flops(d, seqlen, causal) / us / 1e6


def fit_noncausal(d, kernel):
    """(o, b) minimising the squared log error over the three seqlens; equal tiles: the makespan is
    ceil(tiles / 132) * (o + b * blocks) for either scheduler."""
    best = None
    for o10 in range(0, 80):
        for b100 in range(120, 240):
            o, b = o10 / 10, b100 / 100
            err = 0.0
            for s, tf in zip(SEQLENS, MEASURED[(d, kernel, False)]):
                batch, nheads = grid_shape(d, s)
                num_m = -(-s // BLOCK_M[d])
                us = -(-num_m * batch * nheads // SMS) * (o + b * -(-s // BLOCK_N))
                err += math.log(tflops(d, s, False, us) / tf) ** 2
            if best is None or err < best[0]:
                best = (err, o, b)
    return best[1], best[2], math.sqrt(best[0] / 3)


def fit_mask(d, one_tile_ob):
    """mask (us per masked block) fitted to the one-tile kernel's causal TFLOP/s."""
    best = None
    for mask100 in range(0, 101, 5):
        c = (*one_tile_ob, mask100 / 100)
        err = sum(math.log(tflops(d, s, True, greedy(one_tile_times(d, s, c))) / tf) ** 2
                  for s, tf in zip(SEQLENS, MEASURED[(d, "one-tile", True)]))
        if best is None or err < best[0]:
            best = (err, mask100 / 100)
    return best[1]


def predict(d):
    """{scheduler: (TFLOP/s at 1k, 4k, 16k)} for causal d, and the fitted constants."""
    o1, b1, _ = fit_noncausal(d, "one-tile")
    op, bp, _ = fit_noncausal(d, "persistent")
    mask = fit_mask(d, (o1, b1))
    one, pers = (o1, b1, mask), (op, bp, mask)
    out = {"one-tile": [], "index": [], "static": [], "dynamic": [], "bound": []}
    for s in SEQLENS:
        batch, nheads = grid_shape(d, s)
        num_m = -(-s // BLOCK_M[d])
        index = [tile_time(tile_blocks(BLOCK_M[d], num_m - 1 - m, s, s, True), pers)
                 for _ in range(batch * nheads) for m in range(num_m)]
        dyn = dynamic_times(d, s, pers)
        out["one-tile"].append(tflops(d, s, True, greedy(one_tile_times(d, s, one))))
        out["index"].append(tflops(d, s, True, round_robin(index)))
        out["static"].append(tflops(d, s, True, round_robin(dyn)))
        out["dynamic"].append(tflops(d, s, True, dynamic(dyn, pers)))
        out["bound"].append(tflops(d, s, True, max(sum(dyn) / SMS, max(dyn))))
    return out, {"one-tile": one, "persistent": pers}


def main():
    for d in (64, 128):
        out, consts = predict(d)
        for k, (o, b, mask) in consts.items():
            print(f"d = {d} {k}: o = {o:.1f} us/tile, b = {b:.2f} us/block, mask = {mask:.2f} us/masked block")
        print(f"d = {d} causal TFLOP/s at 1k / 4k / 16k (model; measured where there is a run):")
        for k, v in out.items():
            meas = MEASURED.get((d, k, True))
            extra = f"   measured {' / '.join(map(str, meas))}" if meas else ""
            print(f"  {k:9s} {' / '.join(f'{x:.0f}' for x in v)}{extra}")


if __name__ == "__main__":
    main()
