"""Recurrence math: daily wall-clock times across DST changes, every-N arithmetic, missed runs."""

from __future__ import annotations

import time
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import T0
from wakeful.core.errors import InvalidInput
from wakeful.core.rules.schedule import missed, next_daily, next_every, zone

HOUR = 3600
DAY = 86_400


def utc(*args: int) -> int:
    return int(datetime(*args, tzinfo=UTC).timestamp())  # type: ignore[misc]


def local(ts: int, tz: str) -> datetime:
    return datetime.fromtimestamp(ts, ZoneInfo(tz))


def sequence(start_after: int, hhmm: str, tz: str, n: int) -> list[int]:
    out, after = [], start_after
    for _ in range(n):
        after = next_daily(after, hhmm, tz)
        out.append(after)
    return out


# -- next_daily across DST ---------------------------------------------------------------------

# (zone, local day before the change, day of the change, UTC hour of 09:00 before, after)
SPRING = [
    ("Europe/Berlin", date(2024, 3, 30), date(2024, 3, 31), 8, 7),
    ("America/New_York", date(2024, 3, 9), date(2024, 3, 10), 14, 13),
]
AUTUMN = [
    ("Europe/Berlin", date(2024, 10, 26), date(2024, 10, 27), 7, 8),
    ("America/New_York", date(2024, 11, 2), date(2024, 11, 3), 13, 14),
]


@pytest.mark.parametrize(("tz", "before", "change", "utc_before", "utc_after"), SPRING + AUTUMN)
def test_nine_local_stays_nine_local_across_a_dst_change(
    tz: str, before: date, change: date, utc_before: int, utc_after: int
) -> None:
    first = next_daily(utc(before.year, before.month, before.day) - 1, "09:00", tz)
    second = next_daily(first, "09:00", tz)
    third = next_daily(second, "09:00", tz)
    assert first == utc(before.year, before.month, before.day, utc_before)
    assert second == utc(change.year, change.month, change.day, utc_after)
    for ts, day in ((first, before), (second, change), (third, change + timedelta(days=1))):
        wall = local(ts, tz)
        assert (wall.date(), wall.hour, wall.minute) == (day, 9, 0)
    # the UTC instant moves by an hour: a 23 h day in spring, a 25 h day in autumn
    assert second - first == DAY + (utc_after - utc_before) * HOUR
    assert abs(second - first - DAY) == HOUR


# (zone, day of the spring change, UTC instant of the change)
GAPS = [
    ("Europe/Berlin", date(2024, 3, 31), utc(2024, 3, 31, 1)),
    ("America/New_York", date(2024, 3, 10), utc(2024, 3, 10, 7)),
]


@pytest.mark.parametrize(("tz", "day", "change_at"), GAPS)
def test_a_skipped_wall_time_fires_once_that_day_just_after_the_gap(
    tz: str, day: date, change_at: int
) -> None:
    runs = sequence(change_at - 3 * DAY, "02:30", tz, 6)
    on_day = [ts for ts in runs if local(ts, tz).date() == day]
    assert len(on_day) == 1, [local(ts, tz).isoformat() for ts in runs]
    fired = on_day[0]
    assert change_at <= fired < change_at + HOUR  # after the gap, within the hour after it
    # every other day keeps 02:30, one occurrence per local day, strictly increasing
    others = [local(ts, tz) for ts in runs if ts != fired]
    assert all((w.hour, w.minute) == (2, 30) for w in others)
    days = [local(ts, tz).date() for ts in runs]
    assert days == [days[0] + timedelta(days=i) for i in range(len(runs))]
    assert runs == sorted(set(runs))


# (zone, day of the autumn change, hh:mm that repeats, UTC instant of its first instance)
FOLDS = [
    ("Europe/Berlin", date(2024, 10, 27), "02:30", utc(2024, 10, 27, 0, 30)),
    ("America/New_York", date(2024, 11, 3), "01:30", utc(2024, 11, 3, 5, 30)),
]


@pytest.mark.parametrize(("tz", "day", "hhmm", "first_instance"), FOLDS)
def test_a_repeated_wall_time_fires_once_at_its_first_instance(
    tz: str, day: date, hhmm: str, first_instance: int
) -> None:
    runs = sequence(first_instance - 3 * DAY, hhmm, tz, 6)
    on_day = [ts for ts in runs if local(ts, tz).date() == day]
    assert on_day == [first_instance]
    assert local(first_instance, tz).fold == 0
    second_instance = first_instance + HOUR
    assert local(second_instance, tz).strftime("%H:%M") == hhmm  # it really repeats
    nxt = next_daily(first_instance, hhmm, tz)
    assert local(nxt, tz).date() == day + timedelta(days=1)
    assert local(nxt, tz).strftime("%H:%M") == hhmm
    # asking from between the two instances does not fire the second one either
    assert next_daily(first_instance + 1, hhmm, tz) == nxt
    assert next_daily(second_instance - 1, hhmm, tz) == nxt


@given(
    after=st.integers(min_value=utc(2000, 1, 1), max_value=utc(2037, 12, 31)),
    hh=st.integers(0, 23),
    mm=st.integers(0, 59),
    tz=st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata"]),
)
@settings(max_examples=50, deadline=None)
def test_next_daily_is_the_first_matching_wall_time_strictly_after(
    after: int, hh: int, mm: int, tz: str
) -> None:
    hhmm = f"{hh:02d}:{mm:02d}"
    nxt = next_daily(after, hhmm, tz)
    assert after < nxt <= after + DAY + HOUR
    wall = local(nxt, tz)
    if wall.strftime("%H:%M") != hhmm:  # only a time skipped by a spring change may move
        assert wall.utcoffset() != local(nxt - 2 * HOUR, tz).utcoffset()
    # no instant of the same wall time lies between after and nxt (first instances only)
    for probe in range(after + 60 - after % 60, nxt, 60):
        w = local(probe, tz)
        assert not (w.strftime("%H:%M") == hhmm and w.second == 0 and w.fold == 0)


# -- next_every --------------------------------------------------------------------------------


def test_next_every_before_at_and_after_the_anchor() -> None:
    assert next_every(T0 - 500, T0, 60) == T0
    assert next_every(T0 - 1, T0, 60) == T0
    assert next_every(T0, T0, 60) == T0 + 60
    assert next_every(T0 + 59, T0, 60) == T0 + 60
    assert next_every(T0 + 60, T0, 60) == T0 + 120
    assert next_every(T0 + 61, T0, 60) == T0 + 120


@given(
    after=st.integers(T0 - 10**6, T0 + 10**9),
    anchor=st.integers(T0 - 10**6, T0 + 10**6),
    seconds=st.integers(1, 10**6),
)
@settings(max_examples=50, deadline=None)
def test_next_every_is_the_first_grid_point_strictly_after(
    after: int, anchor: int, seconds: int
) -> None:
    nxt = next_every(after, anchor, seconds)
    assert nxt > after
    assert nxt >= anchor
    assert (nxt - anchor) % seconds == 0
    assert nxt == anchor or nxt - seconds <= after


# -- missed ------------------------------------------------------------------------------------


def test_missed_nothing_due_yet() -> None:
    assert missed("every", T0 + 10, T0, T0 + 10, 60, None, "UTC", 5) == ([], 0, T0 + 10)
    assert missed("once", T0 + 10, T0, T0 + 10, None, None, "UTC", 5) == ([], 0, T0 + 10)


def test_missed_once_is_due_once_and_has_no_next() -> None:
    assert missed("once", T0, T0 + DAY, T0, None, None, "UTC", 5) == ([T0], 1, None)


@pytest.mark.parametrize("limit", [1, 3, 11, 50])
def test_missed_every_counts_and_keeps_the_last_n(limit: int) -> None:
    now = T0 + 600 + 30
    expected_all = list(range(T0, now + 1, 60))  # T0, T0+60, ..., T0+600: 11 occurrences
    shown, count, nxt = missed("every", T0, now, T0, 60, None, "UTC", limit)
    assert count == len(expected_all) == 11
    assert shown == expected_all[-limit:]
    assert nxt == T0 + 660


def test_missed_every_exactly_at_an_occurrence_includes_it() -> None:
    shown, count, nxt = missed("every", T0, T0 + 120, T0, 60, None, "UTC", 10)
    assert (shown, count, nxt) == ([T0, T0 + 60, T0 + 120], 3, T0 + 180)


def test_missed_every_after_a_ten_year_outage_is_instant() -> None:
    outage = 10 * 365 * DAY
    started = time.perf_counter()
    shown, count, nxt = missed("every", T0, T0 + outage, T0, 1, None, "UTC", 1)
    elapsed = time.perf_counter() - started
    assert count == outage + 1
    assert shown == [T0 + outage]
    assert nxt == T0 + outage + 1
    assert elapsed < 0.5  # stepping one occurrence at a time would take minutes


def test_missed_every_after_a_ten_year_outage_catch_up_limit() -> None:
    outage = 10 * 365 * DAY + 17
    shown, count, nxt = missed("every", T0, T0 + outage, T0, 60, None, "UTC", 1000)
    last = T0 + (outage // 60) * 60
    assert count == outage // 60 + 1
    assert len(shown) == 1000
    assert shown == [last - 60 * i for i in range(999, -1, -1)]
    assert nxt == last + 60
    assert nxt > T0 + outage


def test_missed_daily_counts_across_a_dst_change() -> None:
    tz = "Europe/Berlin"
    first = next_daily(utc(2024, 3, 28), "09:00", tz)
    now = utc(2024, 4, 2, 12)  # 28, 29, 30, 31 March, 1, 2 April at 09:00 have all passed
    shown, count, nxt = missed("daily", first, now, None, None, "09:00", tz, 3)
    assert count == 6
    assert [local(ts, tz).date() for ts in shown] == [
        date(2024, 3, 31),
        date(2024, 4, 1),
        date(2024, 4, 2),
    ]
    assert all(local(ts, tz).strftime("%H:%M") == "09:00" for ts in shown)
    assert nxt is not None and nxt > now
    assert local(nxt, tz).date() == date(2024, 4, 3)
    assert local(nxt, tz).strftime("%H:%M") == "09:00"


def test_missed_daily_limit_larger_than_count() -> None:
    first = next_daily(T0, "12:00", "UTC")
    shown, count, nxt = missed("daily", first, first + DAY, None, None, "12:00", "UTC", 10)
    assert (shown, count, nxt) == ([first, first + DAY], 2, first + 2 * DAY)


# -- zones -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["Mars/Olympus_Mons", "", "../../etc/passwd", "Europe/"])
def test_an_unknown_zone_is_invalid_input(name: str) -> None:
    with pytest.raises(InvalidInput):
        zone(name)
    with pytest.raises(InvalidInput):
        next_daily(T0, "09:00", name)
    with pytest.raises(ValueError):  # InvalidInput is a ValueError for plain callers
        next_daily(T0, "09:00", name)


def test_a_known_zone_is_the_zoneinfo() -> None:
    assert zone("Europe/Berlin") == ZoneInfo("Europe/Berlin")
