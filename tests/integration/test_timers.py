"""Timers through the store: each occurrence fires once, under the key `<timer id>@<time>`."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.conftest import T0
from wakeful.core.effects import Effects, Timer
from wakeful.core.errors import InvalidInput
from wakeful.core.events import TimerTick
from wakeful.core.records import StoredEvent
from wakeful.core.rules.schedule import next_daily
from wakeful.core.runner import typed
from wakeful.core.store import Store
from wakeful.core.store.sqlite import _QUERIES, SQLiteConnector

HOUR = 3600
DAY = 86_400
INBOX = "T1:U1"

MakeStore = Callable[..., Store]


def timer_events(store: Store, inbox: str = INBOX) -> list[StoredEvent]:
    return [e for e in store.events(inbox) if e.source == "timer"]


def finish_with(store: Store, effects: Effects, now: int, inbox: str = INBOX) -> None:
    """Run one claim of `inbox` to completion with `effects` (what a worker does)."""
    store.ingest(inbox, "slack", f"kick-{now}-{len(store.events(inbox))}", {"text": "go"}, now)
    claim = store.acquire_and_claim(inbox, "W", now)
    assert claim is not None and claim.events
    assert store.finish(claim, effects, now, release=True)


# -- one-off, every, daily ---------------------------------------------------------------------


def test_one_off_fires_once_and_is_removed(store: Store) -> None:
    tid = store.add_timer(INBOX, Timer.once("ping", T0 + 60, payload={"n": 1}), T0)
    assert tid == f"{INBOX}/ping"
    early = store.fire_due_timers(T0 + 59)
    assert (early.due, early.fired) == (0, 0)
    assert timer_events(store) == []

    fired = store.fire_due_timers(T0 + 60)
    assert (fired.due, fired.fired) == (1, 1)
    (ev,) = timer_events(store)
    assert ev.source_id == f"{tid}@{T0 + 60}"
    assert ev.inbox == INBOX and ev.status == "pending"
    tick = typed(ev)
    assert isinstance(tick, TimerTick)
    assert (tick.name, tick.data, tick.scheduled_for) == ("ping", {"n": 1}, T0 + 60)
    assert store.timers(INBOX) == []

    later = store.fire_due_timers(T0 + 10 * DAY)
    assert (later.due, later.fired) == (0, 0)
    assert len(timer_events(store)) == 1


def test_every_n_fires_each_occurrence_once(store: Store) -> None:
    tid = store.add_timer(INBOX, Timer.every("tick", 300, first_at=T0 + 300), T0)
    for k in range(1, 5):
        at = T0 + 300 * k
        assert store.fire_due_timers(at - 1).fired == 0
        assert store.fire_due_timers(at).fired == 1
        assert store.fire_due_timers(at + 1).fired == 0
        assert store.timers(INBOX)[0].next_at == at + 300
    assert [e.source_id for e in timer_events(store)] == [
        f"{tid}@{T0 + 300 * k}" for k in range(1, 5)
    ]
    assert all(e.payload["late_by"] == 0 and e.payload["skipped"] == 0 for e in timer_events(store))


def test_daily_fires_at_the_local_wall_time(store: Store) -> None:
    tz = "Europe/Berlin"
    store.add_timer(INBOX, Timer.daily("digest", "09:00", tz=tz, payload={"kind": "digest"}), T0)
    (state,) = store.timers(INBOX)
    # T0 is 2023-11-14 23:13 in Berlin: the first 09:00 there is the next morning
    expected = int(datetime(2023, 11, 15, 9, 0, tzinfo=ZoneInfo(tz)).timestamp())
    assert state.next_at == expected
    assert state.kind == "daily" and state.payload == {"kind": "digest"}
    for day in range(3):
        at = expected + day * DAY  # no DST change in these days
        assert store.fire_due_timers(at - 1).fired == 0
        assert store.fire_due_timers(at).fired == 1
    times = [e.payload["scheduled_for"] for e in timer_events(store)]
    assert times == [expected + d * DAY for d in range(3)]
    assert all(datetime.fromtimestamp(t, ZoneInfo(tz)).hour == 9 for t in times)
    assert store.timers(INBOX)[0].next_at == expected + 3 * DAY


def test_daily_registered_at_exactly_its_time_is_due_now(store: Store) -> None:
    first = next_daily(T0, "12:00", "UTC")
    store.add_timer(INBOX, Timer.daily("noon", "12:00"), first)
    assert store.timers(INBOX)[0].next_at == first
    assert store.fire_due_timers(first).fired == 1


def test_daily_across_a_dst_change_keeps_the_wall_time(store: Store) -> None:
    tz = "America/New_York"
    start = int(datetime(2024, 3, 8, 15, tzinfo=UTC).timestamp())  # 10:00 EST
    store.add_timer(INBOX, Timer.daily("standup", "09:00", tz=tz), start)
    for _ in range(4):
        store.fire_due_timers(store.timers(INBOX)[0].next_at)
    fired = [e.payload["scheduled_for"] for e in timer_events(store)]
    walls = [datetime.fromtimestamp(t, ZoneInfo(tz)) for t in fired]
    assert [(w.day, w.hour, w.minute) for w in walls] == [(d, 9, 0) for d in (9, 10, 11, 12)]
    assert fired[1] - fired[0] == DAY - HOUR  # 2024-03-10 is a 23-hour day in New York


# -- missed occurrences ------------------------------------------------------------------------


def test_coalesce_after_an_outage_gives_one_event_with_its_lateness(store: Store) -> None:
    tid = store.add_timer(INBOX, Timer.every("hourly", HOUR, first_at=T0 + HOUR), T0)
    now = T0 + HOUR + 10 * HOUR + 1234  # down for ten hours and a bit
    result = store.fire_due_timers(now)
    assert (result.due, result.fired) == (1, 1)
    (ev,) = timer_events(store)
    occurrences = list(range(T0 + HOUR, now + 1, HOUR))
    assert len(occurrences) == 11
    last = occurrences[-1]
    assert ev.source_id == f"{tid}@{last}"
    assert ev.payload["scheduled_for"] == last
    assert ev.payload["late_by"] == now - last == 1234
    assert ev.payload["skipped"] == len(occurrences) - 1
    assert store.timers(INBOX)[0].next_at == last + HOUR
    assert store.fire_due_timers(now).fired == 0


def test_coalesce_daily_after_a_three_day_outage(store: Store) -> None:
    store.add_timer(INBOX, Timer.daily("digest", "09:00", tz="Europe/Berlin"), T0)
    first = store.timers(INBOX)[0].next_at
    now = first + 3 * DAY + 600
    assert store.fire_due_timers(now).fired == 1
    (ev,) = timer_events(store)
    assert ev.payload["scheduled_for"] == first + 3 * DAY
    assert ev.payload["late_by"] == 600
    assert ev.payload["skipped"] == 3
    assert store.timers(INBOX)[0].next_at == first + 4 * DAY


def test_catch_up_gives_one_event_per_missed_occurrence(store: Store) -> None:
    timer = Timer.every("poll", 600, first_at=T0 + 600, policy="catch_up", payload="p")
    tid = store.add_timer(INBOX, timer, T0)
    now = T0 + 600 * 7 + 5
    result = store.fire_due_timers(now)
    occurrences = [T0 + 600 * k for k in range(1, 8)]
    assert (result.due, result.fired) == (1, len(occurrences))
    events = timer_events(store)
    assert [e.source_id for e in events] == [f"{tid}@{at}" for at in occurrences]
    assert [e.payload["scheduled_for"] for e in events] == occurrences
    assert [e.payload["late_by"] for e in events] == [now - at for at in occurrences]
    assert all(e.payload["payload"] == "p" and e.payload["skipped"] == 0 for e in events)
    assert store.timers(INBOX)[0].next_at == occurrences[-1] + 600


def test_catch_up_replays_at_most_max_catch_up_newest_first_kept(make_store: MakeStore) -> None:
    store = make_store(max_catch_up=3)
    timer = Timer.every("poll", 60, first_at=T0 + 60, policy="catch_up")
    tid = store.add_timer(INBOX, timer, T0)
    now = T0 + 60 * 10
    assert store.fire_due_timers(now).fired == 3
    assert [e.source_id for e in timer_events(store)] == [
        f"{tid}@{T0 + 60 * k}" for k in (8, 9, 10)
    ]
    assert store.timers(INBOX)[0].next_at == T0 + 60 * 11


def test_a_ten_year_outage_of_an_every_second_timer_fires_one_event(store: Store) -> None:
    store.add_timer(INBOX, Timer.every("spin", 1, first_at=T0), T0)
    now = T0 + 10 * 365 * DAY
    assert store.fire_due_timers(now).fired == 1
    (ev,) = timer_events(store)
    assert ev.payload["skipped"] == now - T0
    assert store.timers(INBOX)[0].next_at == now + 1


@pytest.mark.parametrize("policy", ["coalesce", "catch_up"])
def test_a_second_pass_at_the_same_time_stores_nothing(store: Store, policy: Any) -> None:
    store.add_timer(INBOX, Timer.every("t", 60, first_at=T0, policy=policy), T0)
    store.add_timer(INBOX, Timer.once("o", T0 + 30), T0)
    store.add_timer(INBOX, Timer.daily("d", "00:00", policy=policy), T0)
    now = T0 + 2 * DAY
    first = store.fire_due_timers(now)
    assert first.fired > 0
    count = len(store.events(INBOX))
    again = store.fire_due_timers(now)
    assert (again.due, again.fired) == (0, 0)
    assert len(store.events(INBOX)) == count


@pytest.mark.parametrize(
    "make_timer",
    [
        lambda: Timer.once("o", T0 + 60),
        lambda: Timer.every("e", 60, first_at=T0 + 60),
        lambda: Timer.every("c", 60, first_at=T0 + 60, policy="catch_up"),
    ],
    ids=["once", "every", "catch_up"],
)
def test_re_registering_for_an_occurrence_already_fired_stays_one_event(
    store: Store, make_timer: Callable[[], Timer]
) -> None:
    store.add_timer(INBOX, make_timer(), T0)
    assert store.fire_due_timers(T0 + 60).fired == 1
    store.add_timer(INBOX, make_timer(), T0 + 60)  # a replayed run registers it again
    replay = store.fire_due_timers(T0 + 60)
    assert replay.due == 1
    assert replay.fired == 0
    assert len(timer_events(store)) == 1


def test_re_registering_a_daily_timer_after_it_fired_stays_one_event(store: Store) -> None:
    digest = Timer.daily("digest", "09:00", tz="Europe/Berlin")
    store.add_timer(INBOX, digest, T0)
    first = store.timers(INBOX)[0].next_at
    assert store.fire_due_timers(first).fired == 1
    store.add_timer(INBOX, digest, first)
    assert store.timers(INBOX)[0].next_at == first  # due again for the same occurrence
    replay = store.fire_due_timers(first)
    assert (replay.due, replay.fired) == (1, 0)
    assert len(timer_events(store)) == 1
    assert store.timers(INBOX)[0].next_at == next_daily(first, "09:00", "Europe/Berlin")


def test_timers_of_different_inboxes_with_the_same_name_are_separate(store: Store) -> None:
    store.add_timer("A", Timer.once("same", T0 + 1), T0)
    store.add_timer("B", Timer.once("same", T0 + 1), T0)
    assert store.fire_due_timers(T0 + 1).fired == 2
    assert len(timer_events(store, "A")) == 1 and len(timer_events(store, "B")) == 1
    assert store.event_by_key("timer", f"A/same@{T0 + 1}") is not None
    assert store.event_by_key("timer", f"B/same@{T0 + 1}") is not None


def test_next_timer_at_is_the_earliest(store: Store) -> None:
    assert store.next_timer_at() is None
    store.add_timer(INBOX, Timer.once("late", T0 + 500), T0)
    store.add_timer("other", Timer.once("early", T0 + 20), T0)
    assert store.next_timer_at() == T0 + 20


# -- cancelling, and timers added by a run -----------------------------------------------------


def test_timers_added_through_finish_effects(store: Store) -> None:
    effects = Effects(
        timers=[
            Timer.once("remind", T0 + 100, payload={"about": "refund"}),
            Timer.every("poll", 50, first_at=T0 + 50),
        ]
    )
    finish_with(store, effects, T0)
    assert sorted(t.id for t in store.timers(INBOX)) == [f"{INBOX}/poll", f"{INBOX}/remind"]
    assert store.fire_due_timers(T0 + 100).fired == 2  # remind, and poll coalesced
    events = timer_events(store)
    assert {e.source_id for e in events} == {
        f"{INBOX}/remind@{T0 + 100}",
        f"{INBOX}/poll@{T0 + 100}",
    }
    remind = next(e for e in events if e.payload["timer"] == "remind")
    assert remind.payload["payload"] == {"about": "refund"}


def test_cancel_through_finish_effects(store: Store) -> None:
    store.add_timer(INBOX, Timer.every("tick", 60, first_at=T0 + 60), T0)
    store.add_timer(INBOX, Timer.once("keep", T0 + 60), T0)
    store.add_timer("other-inbox", Timer.once("tick", T0 + 60), T0)  # same name, not ours
    finish_with(store, Effects(cancel_timers=["tick"]), T0 + 10)
    assert [t.id for t in store.timers(INBOX)] == [f"{INBOX}/keep"]
    assert [t.id for t in store.timers("other-inbox")] == ["other-inbox/tick"]
    store.fire_due_timers(T0 + DAY)
    assert [e.payload["timer"] for e in timer_events(store)] == ["keep"]


def test_a_fenced_finish_adds_no_timer(store: Store) -> None:
    store.ingest(INBOX, "slack", "m1", {"text": "hi"}, T0)
    claim = store.acquire_and_claim(INBOX, "A", T0)
    assert claim is not None
    ttl = store.settings.lease_ttl
    taken = store.acquire_and_claim(INBOX, "B", T0 + ttl + 1)  # A's lease lapsed
    assert taken is not None
    assert not store.finish(claim, Effects(timers=[Timer.once("x", T0 + 5)]), T0 + ttl + 2)
    assert store.timers(INBOX) == []


# -- the due scan uses the index ---------------------------------------------------------------


def test_due_scan_searches_the_timers_due_index(store: Store) -> None:
    for i in range(200):
        store.add_timer(f"I{i}", Timer.once("t", T0 + i * 60), T0)
    if isinstance(store.db, SQLiteConnector):
        conn = sqlite3.connect(store.db.path)
        conn.row_factory = sqlite3.Row
        plan = conn.execute(
            "EXPLAIN QUERY PLAN " + _QUERIES["due_timers"], {"now": T0, "limit": 500}
        ).fetchall()
        conn.close()
        details = [str(r["detail"]) for r in plan]
        assert any(d.startswith("SEARCH timers USING") and "timers_due" in d for d in details), (
            details
        )
        assert not any(d.startswith("SCAN timers") for d in details), details
        return
    # PostgreSQL picks a sequential scan for a table this small whatever the indexes; with
    # sequential scans priced out, the plan shows whether the due scan *can* use the index.
    import psycopg
    from psycopg.rows import dict_row

    from wakeful.core.store.postgres import _QUERIES as PG_QUERIES

    db = store.db
    search_path = f"-c search_path={db.schema}"  # type: ignore[attr-defined]
    with (
        psycopg.connect(db.dsn, options=search_path, row_factory=dict_row) as conn,  # type: ignore[attr-defined]
        conn.transaction(),
    ):
        conn.execute("SET LOCAL enable_seqscan = off")
        rows = conn.execute(
            "EXPLAIN " + PG_QUERIES["due_timers"], {"now": T0, "limit": 500}
        ).fetchall()
    plan = " ".join(str(next(iter(r.values()))) for r in rows)
    assert "timers_due" in plan, plan
    assert "Seq Scan on timers" not in plan, plan


# -- invalid timers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda: Timer.daily("d", "25:00"),
        lambda: Timer.daily("d", "9:00"),
        lambda: Timer.daily("d", "09:60"),
        lambda: Timer.daily("d", "0900"),
        lambda: Timer.daily("d", ""),
        lambda: Timer.daily("d", "09:00", tz="Mars/Olympus_Mons"),
        lambda: Timer.daily("d", "09:00", tz=""),
        lambda: Timer.once("", T0 + 5),
        lambda: Timer.once("a@b", T0 + 5),
        lambda: Timer.once("o", T0 + 5, payload={"when": datetime(2024, 1, 1)}),
        lambda: Timer.once("o", T0 + 5, payload=float("nan")),
        lambda: Timer.every("e", 0, first_at=T0),
        lambda: Timer.every("e", 60, first_at=None),  # type: ignore[arg-type]
        lambda: Timer.once("o", "soon"),  # type: ignore[arg-type]
        lambda: Timer.every("e", 60, first_at=T0, policy="sometimes"),  # type: ignore[arg-type]
    ],
    ids=[
        "hour-25",
        "single-digit-hour",
        "minute-60",
        "no-colon",
        "empty-time",
        "unknown-zone",
        "empty-zone",
        "empty-name",
        "at-in-name",
        "payload-datetime",
        "payload-nan",
        "zero-period",
        "every-without-start",
        "once-non-int",
        "bad-policy",
    ],
)
def test_invalid_timers_raise_invalid_input_and_store_nothing(
    store: Store, build: Callable[[], Timer]
) -> None:
    with pytest.raises(InvalidInput):
        store.add_timer(INBOX, build(), T0)
    with pytest.raises(ValueError):
        store.add_timer(INBOX, build(), T0)
    assert store.timers(INBOX) == []
    assert store.fire_due_timers(T0 + 10 * DAY).fired == 0
    assert timer_events(store) == []


def test_a_timer_for_an_empty_inbox_is_invalid(store: Store) -> None:
    with pytest.raises(InvalidInput):
        store.add_timer("", Timer.once("o", T0 + 1), T0)
    assert store.next_timer_at() is None
