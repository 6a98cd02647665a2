"""Which inboxes a worker runs next (core/rules/turns.py), on plain values, without a store."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wakeful.core.rules.turns import (
    Cut,
    Turn,
    arrival,
    arrivals,
    fast,
    followers_turn,
    groups,
    note_cut,
    settled,
    smoothed,
    window_end,
)

WINDOW = 5.0
inbox_ids = st.lists(st.sampled_from([f"T1:U{i}" for i in range(12)]), unique=True, max_size=12)
times = st.floats(0, 100, allow_nan=False)


# -- settled: which ready inboxes are claimed now -------------------------------------------------


@given(
    ready=inbox_ids,
    waits=st.lists(times, min_size=12, max_size=12),
    start=st.integers(0, 11),
    window=st.sampled_from([0.0, WINDOW]),
    limit=st.integers(1, 12),
)
@settings(max_examples=200, deadline=None)
def test_settled_inboxes_waited_their_window_and_none_that_did_is_left_out(
    ready: list[str], waits: list[float], start: int, window: float, limit: int
) -> None:
    t = 100.0
    since = {inbox: t - wait for inbox, wait in zip(ready, waits, strict=False)}
    start = start % len(ready) if ready else 0
    chosen = settled(ready, since, start, t, window, limit)
    assert len(chosen) == len(set(chosen)) <= limit
    assert all(t - since[i] >= window for i in chosen), "an inbox ran inside its batch window"
    due = [i for i in ready if t - since[i] >= window]
    if len(chosen) < limit:
        assert sorted(chosen) == sorted(due), "a due inbox was left out with room to spare"
    # list order (oldest work first), starting at `start`
    rotated = ready[start:] + ready[:start]
    positions = [rotated.index(i) for i in chosen]
    assert positions == sorted(positions)


def test_settled_starts_at_the_workers_place_in_the_list() -> None:
    since = {i: 0.0 for i in "abcd"}
    assert settled(list("abcd"), since, 2, 10.0, 0.0, 3) == ["c", "d", "a"]
    assert settled(list("abcd"), since, 0, 10.0, 0.0, 3) == ["a", "b", "c"]


def test_an_inbox_inside_its_window_waits_and_the_rest_go() -> None:
    since = {"a": 9.0, "b": 2.0}
    assert settled(["a", "b"], since, 0, 10.0, WINDOW, 5) == ["b"]
    assert settled(["a", "b"], since, 0, 14.0, WINDOW, 5) == ["a", "b"]


# -- arrivals and cut looks -----------------------------------------------------------------------


def test_an_inbox_seen_before_keeps_its_arrival() -> None:
    got = arrivals([("a", 7), ("b", 9)], {"a": 1.0}, 50.0, [])
    assert got == {"a": 1.0, "b": 50.0}


def test_an_inbox_a_cut_look_missed_arrived_at_that_looks_kick() -> None:
    cuts: list[Cut] = [(10, 3.0), (20, 8.0)]
    assert arrival(5, 50.0, cuts) == 3.0  # stored before the first cut look
    assert arrival(15, 50.0, cuts) == 8.0  # stored between the two
    assert arrival(25, 50.0, cuts) == 50.0  # stored after both: this look's kick
    assert arrival(5, 2.0, cuts) == 2.0  # never later than this look's own kick


def test_cut_looks_over_a_window_old_collapse_into_the_newest_of_them() -> None:
    cuts = note_cut([(10, 0.0), (20, 1.0)], 30, 9.0, 10.0, cut=True, window=WINDOW)
    assert cuts == [(20, 1.0), (30, 9.0)]
    assert arrival(15, 10.0, cuts) <= 10.0 - WINDOW  # stored before the second look: due


def test_a_look_that_listed_everything_forgets_the_cuts() -> None:
    assert note_cut([(10, 3.0)], 20, 8.0, 9.0, cut=False, window=WINDOW) == []
    assert note_cut([(10, 3.0)], 20, 8.0, 9.0, cut=True, window=WINDOW) == [(10, 3.0), (20, 8.0)]


looks = st.lists(  # (ids stored since the last look, seconds since it, whether it was cut)
    st.tuples(
        st.integers(0, 5), st.floats(0, 3, allow_nan=False), st.sampled_from([True] * 4 + [False])
    ),
    min_size=1,
    max_size=30,
)


@given(looks=looks, firsts=st.lists(st.integers(0, 60), max_size=20))
@settings(max_examples=300, deadline=None)
def test_collapsing_old_cuts_changes_no_inboxs_due_time_and_keeps_the_record_short(
    looks: list[tuple[int, float, bool]], firsts: list[int]
) -> None:
    """Every look the worker makes (ids and times only grow); the collapsed record dates each
    inbox as due exactly when the full record would."""
    kept: list[Cut] = []
    full: list[Cut] = []
    top, t = 0, 0.0
    for grew, step, cut in looks:
        top, t = top + grew, t + step
        arrived = t - step / 2
        kept = note_cut(kept, top, arrived, t, cut, WINDOW)
        full = [*full, (top, arrived)] if cut else []
        assert sum(1 for _, at in kept if at <= t - WINDOW) <= 1
    for first in firsts:
        due_kept = arrival(first, t, kept) <= t - WINDOW
        due_full = arrival(first, t, full) <= t - WINDOW
        assert due_kept == due_full


# -- followers: the next batches of busy inboxes ---------------------------------------------------


def test_no_followers_nothing_held() -> None:
    assert followers_turn(0, 3.0, 10.0, 11.0, WINDOW, 2.0, 0.02) == Turn(0, None)


def test_slow_runs_release_one_follower_and_fast_ones_all() -> None:
    assert followers_turn(4, None, 10.0, None, WINDOW, 2.0, 0.02) == Turn(1, None)
    assert followers_turn(4, None, 10.0, None, WINDOW, None, 0.02) == Turn(1, None)
    assert followers_turn(4, None, 10.0, None, WINDOW, 0.001, 0.02) == Turn(4, None)


def test_a_window_ending_before_the_next_run_holds_the_followers_back() -> None:
    assert followers_turn(2, None, 10.0, 11.0, WINDOW, 2.0, 0.02) == Turn(0, 10.0)
    assert followers_turn(2, 10.0, 12.0, 13.0, WINDOW, 2.0, 0.02) == Turn(0, 10.0)
    # a window ending after the next run would holds nothing
    assert followers_turn(2, None, 10.0, 13.0, WINDOW, 2.0, 0.02) == Turn(1, None)


@given(
    waiting=st.integers(1, 10),
    held_for=st.floats(0, 20, allow_nan=False),
    ends_in=st.floats(-5, 5, allow_nan=False),
    run_time=st.one_of(st.none(), st.floats(0, 5, allow_nan=False)),
)
def test_followers_are_never_held_back_longer_than_a_window(
    waiting: int, held_for: float, ends_in: float, run_time: float | None
) -> None:
    t = 100.0
    turn = followers_turn(waiting, t - held_for, t, t + ends_in, WINDOW, run_time, 0.02)
    if held_for >= WINDOW:
        assert turn.run >= 1 and turn.holding is None
    else:
        assert turn.run == 0 or turn.holding is None


# -- pace and grouping ----------------------------------------------------------------------------


def test_window_end_is_the_first_inbox_due() -> None:
    assert window_end({}, WINDOW) is None
    assert window_end({"a": 3.0}, 0.0) is None
    assert window_end({"a": 3.0, "b": 1.0}, WINDOW) == 6.0


def test_run_time_is_smoothed_and_unknown_is_slow() -> None:
    assert smoothed(None, 1.0) == 1.0
    assert smoothed(1.0, 2.0) == pytest.approx(1.2)
    assert not fast(None, 0.02)
    assert fast(0.01, 0.02) and not fast(0.02, 0.02)


@given(items=st.lists(st.integers(), max_size=40), size=st.integers(1, 17))
def test_groups_keep_order_and_size(items: list[int], size: int) -> None:
    parts = groups(items, size)
    assert [x for g in parts for x in g] == items
    assert all(0 < len(g) <= size for g in parts)
