"""When a timer's occurrences fall. Pure functions of integer seconds, so DST rules are testable.

Daily times are wall-clock times in an IANA zone. A time skipped by a spring-forward change
fires at the same offset after the change (02:30 becomes 03:30); a time repeated by a fall-back
change fires once, at its first instance.
"""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from wakeful.core.errors import InvalidInput


@lru_cache(maxsize=256)
def zone(name: str) -> ZoneInfo:
    """The ZoneInfo for `name`, or InvalidInput naming the bad zone."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError) as exc:
        raise InvalidInput(f"unknown time zone {name!r}") from exc


def _daily_instant(day: date, hh: int, mm: int, tz: ZoneInfo) -> int:
    # fold=0: a repeated wall time is its first instance; a skipped one is read with the
    # offset before the change, which lands just after the gap.
    return int(datetime.combine(day, time(hh, mm), tzinfo=tz).timestamp())


def next_daily(after: int, hhmm: str, tz_name: str) -> int:
    """The first instant strictly after `after` whose wall time in `tz_name` is `hhmm`."""
    hh, mm = (int(p) for p in hhmm.split(":"))
    tz = zone(tz_name)
    day = datetime.fromtimestamp(after, tz).date() - timedelta(days=1)
    for _ in range(4):
        candidate = _daily_instant(day, hh, mm, tz)
        if candidate > after:
            return candidate
        day += timedelta(days=1)
    raise AssertionError("unreachable: a daily time recurs within three days")


def next_every(after: int, anchor: int, seconds: int) -> int:
    """The first `anchor + k*seconds` strictly after `after` (k may be 0)."""
    if after < anchor:
        return anchor
    return anchor + ((after - anchor) // seconds + 1) * seconds


def first_occurrence(
    kind: str, now: int, first_at: int | None, daily_at: str | None, tz: str
) -> int:
    """When a newly registered timer is first due."""
    if kind in ("once", "every"):
        assert first_at is not None
        return first_at
    assert daily_at is not None
    return next_daily(now - 1, daily_at, tz)


def following(
    kind: str, after: int, anchor: int | None, every: int | None, daily_at: str | None, tz: str
) -> int | None:
    """The occurrence after the one scheduled at `after`; None for a one-off timer."""
    if kind == "once":
        return None
    if kind == "every":
        assert anchor is not None and every is not None
        return next_every(after, anchor, every)
    assert daily_at is not None
    return next_daily(after, daily_at, tz)


def missed(
    kind: str,
    next_at: int,
    now: int,
    anchor: int | None,
    every: int | None,
    daily_at: str | None,
    tz: str,
    limit: int,
) -> tuple[list[int], int, int | None]:
    """Occurrences due by `now`, starting at `next_at`.

    Returns (the last `limit` due occurrences in order, how many were due in all, the next
    occurrence after them). `every` timers are counted arithmetically so a long outage costs
    nothing; daily ones step a day at a time.
    """
    if next_at > now:
        return [], 0, next_at
    if kind == "once":
        return [next_at], 1, None
    if kind == "every":
        assert anchor is not None and every is not None
        count = (now - next_at) // every + 1
        last = next_at + (count - 1) * every
        shown = [last - i * every for i in range(min(count, limit))][::-1]
        return shown, count, last + every
    assert daily_at is not None
    due: list[int] = []
    count = 0
    at: int | None = next_at
    while at is not None and at <= now:
        count += 1
        due.append(at)
        if len(due) > limit:
            due.pop(0)
        at = next_daily(at, daily_at, tz)
    return due, count, at
