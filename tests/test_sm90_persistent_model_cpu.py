"""The persistent sm90 forward's synchronisation protocol, as modelled in tools/sm90_persistent_model.py
(warp by warp, random interleavings, TMA landing late): every schedule of several tiles per CTA
(some with no key) finishes, every read sees its own tile's data, no Q load overwrites rows an O
store still reads; and the model catches the mutations that break it (so the check can fail)."""
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import sm90_persistent_model as model  # noqa: E402


@pytest.mark.parametrize("first_turn", ["wg1", "wg0"])  # fwd_persistent.h's form, and v3's
def test_protocol_finishes_with_the_right_data(first_turn):
    for i in range(150):
        tiles = model.random_tiles(random.Random(i))
        assert model.run(tiles, i, first_turn), f"deadlock: tiles {tiles}, schedule {i}"


def test_fixed_edge_cases():
    for tiles in ([0], [0, 0, 1], [1] * 6, [5, 0, 0, 5], [1, 0, 2, 0, 1]):
        for i in range(20):
            assert model.run(tiles, i), f"deadlock: tiles {tiles}, schedule {i}"


def test_no_first_turn_deadlocks():
    assert not any(model.run([2, 1], i, "none") for i in range(5))


def test_first_turn_given_twice_breaks_the_ping_pong():
    for i in range(5):
        try:
            finished = model.run([2, 3, 1], i, "both")
        except model.Violation:
            finished = False
        assert not finished


def test_counting_empty_tiles_on_one_side_reads_a_stale_q():
    with pytest.raises(model.Violation):
        for i in range(20):
            model.run([1, 0, 2, 1], i, consumer_counts_empty=True)


def test_q_load_without_q_empty_overwrites_rows_being_stored():
    with pytest.raises(model.Violation):
        for i in range(50):
            model.run([1, 1, 1, 1], i, producer_skips_q_empty=True)


def test_last_v_stage_not_stepped_past_hangs_the_fixture_call():
    """fwd_mainloop.h run_blocks before v5 released a tile's last V stage without ++st_v: the
    persistent kernel carried a state one stage behind into the next tile. The model must show the
    hang the H200 showed on the test fixture's call (one CTA, 4 tiles of 2 key blocks), finish with
    one tile (the one-tile kernel ran fine), and see tile 0's V read in tile 1 when 1 block/tile."""
    def outcome(tiles, i):
        try:
            return "done" if model.run(tiles, i, last_v_advance=False) else "deadlock"
        except model.Violation:
            return "violation"
    assert {outcome([2, 2, 2, 2], i) for i in range(10)} == {"deadlock"}
    assert all(model.run([2], i, last_v_advance=False) for i in range(5))
    with pytest.raises(model.Violation, match=r"read \('v', 0"):
        for i in range(20):
            model.run([1, 1], i, last_v_advance=False)


def test_every_consumer_release_steps_its_state():
    """The model advances a pipeline state at every release (what the persistent kernel needs, as the
    states cross tiles); check fwd_mainloop.h does: each `pipe_X.consumer_release(st_X);` is followed,
    before the next statement that uses the pipeline, by `++st_X;`. The gap the model missed in v4."""
    src = (Path(__file__).resolve().parent.parent / "csrc" / "sm90" / "fwd_mainloop.h").read_text()
    lines = [ln.strip() for ln in src.splitlines()]
    code = [ln for ln in lines if ln and not ln.startswith("//")]
    releases = 0
    for i, ln in enumerate(code):
        for x in ("k", "v"):
            if ln == f"pipe_{x}.consumer_release(st_{x});":
                releases += 1
                assert i + 1 < len(code) and code[i + 1] == f"++st_{x};", \
                    f"fwd_mainloop.h: `{ln}` not followed by `++st_{x};` (next: `{code[i + 1]}`)"
    # run_blocks and idle_blocks (the warpgroup with no live row), overlap and not: 6 each.
    assert releases == 12, f"expected 12 consumer releases in fwd_mainloop.h (K/V, overlap and not), found {releases}"


# ---- The dynamic tile order (causal; d = 64 non-causal too: fwd_persistent.h publish_tile / receive_tile).

def test_dynamic_order_finishes_and_runs_every_tile_once():
    """1-3 CTAs sharing the tile counter, random tile lists with empty tiles: every schedule
    finishes and run() checks each consumer read its producer's index and each tile ran once."""
    for i in range(200):
        tiles, ctas = model.random_launch(random.Random(i))
        assert model.run(tiles, i, ctas=ctas, dynamic=True), f"deadlock: tiles {tiles}, {ctas} CTAs, schedule {i}"


def test_dynamic_order_edge_cases():
    for tiles, ctas in (([0], 1), ([0, 0, 0, 0, 0], 2), ([3], 1), ([1] * 7, 3), ([5, 0, 0, 0, 0, 1], 1),
                        ([0, 0, 0, 0, 0, 0, 2], 2), ([2, 1], 2)):
        for i in range(20):
            assert model.run(tiles, i, ctas=ctas, dynamic=True), f"deadlock: tiles {tiles}, {ctas} CTAs, schedule {i}"


def test_static_order_on_several_ctas_runs_every_tile_once():
    for i in range(100):
        tiles, ctas = model.random_launch(random.Random(1000 + i))
        assert model.run(tiles, i, ctas=ctas), f"deadlock: tiles {tiles}, {ctas} CTAs, schedule {i}"


def _dynamic_outcomes(seeds, **mutation):
    out = set()
    for i in seeds:
        tiles, ctas = model.random_launch(random.Random(i))
        try:
            out.add("done" if model.run(tiles, i, ctas=ctas, dynamic=True, **mutation) else "deadlock")
        except model.Violation:
            out.add("violation")
    return out


def test_producer_not_waiting_for_the_slot_to_be_read_is_caught():
    """Without tile_empty the producer runs ahead over empty tiles and overwrites a slot (a wrong
    tile read, or tile_full's phases outrunning the consumers)."""
    assert _dynamic_outcomes(range(100), producer_skips_tile_empty=True) - {"done"}


def test_producer_stopping_without_the_out_of_range_index_hangs():
    assert _dynamic_outcomes(range(20), no_sentinel=True) == {"deadlock"}


def test_kernel_publishes_before_it_stops():
    """fwd_persistent.h's dynamic loops (causal, and d = 64 non-causal) as the model runs them: the
    producer's loop condition publishes the index before the range test (the consumers stop on the
    published out-of-range index), its increment draws the next index from the counter (after the
    tile's loads, also after an empty tile's `continue`); the consumers take their first and every
    next index from the ring."""
    src = (Path(__file__).resolve().parent.parent / "csrc" / "sm90" / "fwd_persistent.h").read_text()
    cond = src[src.index("CUTE_DEVICE bool producer_has_tile"):]
    assert cond.index("publish_tile(ss, t);") < cond.index("return t < num_tiles;")
    cond = src[src.index("CUTE_DEVICE int producer_first_tile"):]
    assert cond.index("return atomicAdd(p.sm90_tiles.counter, 1);") < cond.index("return int(blockIdx.x);")
    nxt = src[src.index("CUTE_DEVICE int producer_next_tile"):]
    assert nxt.index("return atomicAdd(p.sm90_tiles.counter, 1);") < nxt.index("return t + int(gridDim.x);")
    flat = " ".join(src.split())
    assert ("for (int t = producer_first_tile<kDynamic>(p); producer_has_tile<kDynamic>(ss, t, sched.tiles(p)); "
            "t = producer_next_tile<kDynamic>(p, t)) {") in flat
    assert ("for (int j = 0, t = consumer_tile<kDynamic>(ss, 0, blockIdx.x); t < sched.tiles(p); "
            "++j, t = consumer_tile<kDynamic>(ss, j, t + int(gridDim.x))) {") in flat
    # One constant for both roles: causal, and d = 64's tile (kDynamicNonCausal).
    assert "constexpr bool kDynamic = kDrawsTiles<Traits, kCausal>;" in flat
    assert "return receive_tile(ss, j);" in src
