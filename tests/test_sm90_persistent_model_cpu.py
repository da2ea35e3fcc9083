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
