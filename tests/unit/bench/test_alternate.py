"""bench.alternate: the A/B runner's orders, its results per side and their medians."""

from __future__ import annotations

import math

import pytest

from bench.alternate import alternate, medians, turn, turns


@pytest.mark.parametrize(("order", "want"), [
    ("reverse", ["ABC", "CBA", "ABC", "CBA"]),
    ("rotate", ["ABC", "BCA", "CAB", "ABC"]),
    ("same", ["ABC", "ABC", "ABC", "ABC"]),
])
def test_each_order_over_repetitions(order, want):
    assert ["".join(turn("ABC", rep, order)) for rep in range(4)] == want


def test_two_sides_reversed_and_rotated_are_the_same():
    assert [turn("AB", r, "reverse") for r in range(4)] == [turn("AB", r, "rotate") for r in range(4)]


def test_no_sides_and_an_unknown_order():
    assert turn([], 3, "rotate") == [] and turn([], 1) == []
    with pytest.raises(ValueError, match="reverse, rotate or same"):
        turn("AB", 0, "shuffle")


def test_turns_count_the_repetitions_and_can_be_left_early():
    seen = []
    for rep, now in turns(["a", "b"], 5):
        if rep == 2:
            break
        seen.append((rep, now))
    assert seen == [(0, ["a", "b"]), (1, ["b", "a"])]


def test_alternate_runs_every_side_every_repetition_in_turn():
    calls = []

    def run_one(side, rep):
        calls.append((rep, side))
        return f"{side}{rep}"

    got = alternate(["before", "after"], 3, run_one)
    assert calls == [(0, "before"), (0, "after"), (1, "after"), (1, "before"), (2, "before"), (2, "after")]
    assert got == {"before": ["before0", "before1", "before2"], "after": ["after0", "after1", "after2"]}


def test_alternate_keeps_the_sides_order_in_its_answer():
    got = alternate(["b", "a", "c"], 2, lambda side, rep: rep, order="rotate")
    assert list(got) == ["b", "a", "c"] and all(v == [0, 1] for v in got.values())


def test_medians_leave_nan_out():
    m = medians({"a": [3.0, 1.0, 2.0], "b": [math.nan, 4.0], "c": [math.nan]})
    assert m["a"] == 2.0 and m["b"] == 4.0 and math.isnan(m["c"])
