"""Which inboxes a worker runs next. Pure: the worker reads the ready list and the time, and
these decide, on plain values, when each ready inbox counts as arrived, which have waited out
their batch window, and when the next batches of busy inboxes (followers) take their turn.

Times are seconds on the worker's monotonic timeline; inbox ids are strings; a `Cut` is a look
at the ready list that stopped at its limit: (the newest event id stored then, its kick)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")
Cut = tuple[int, float]


def arrivals(
    listed: Iterable[tuple[str, int]],
    since: Mapping[str, float],
    arrived: float,
    cuts: Sequence[Cut],
) -> dict[str, float]:
    """When each listed (inbox, oldest event id) became ready, as the worker counts it: as
    counted at an earlier look when it was seen then, else `arrived` (this look's kick), or the
    kick of an earlier look that was cut before reaching it although its event was stored."""
    return {
        inbox: since[inbox] if inbox in since else arrival(first, arrived, cuts)
        for inbox, first in listed
    }


def arrival(first: int, arrived: float, cuts: Sequence[Cut]) -> float:
    """When an inbox first seen now arrived: this look's kick, or, if its oldest event was
    already stored at an earlier look that cut the list before it, that look's kick."""
    for top, at in cuts:
        if first <= top:
            return min(at, arrived)
    return arrived


def note_cut(
    cuts: Sequence[Cut], top: int, arrived: float, t: float, cut: bool, window: float
) -> list[Cut]:
    """The cuts to remember after a look at `t`: a look that listed every ready inbox ends the
    record; one cut at its limit adds (the newest event id then, its kick). Looks whose kick
    is over a window old collapse into the newest of them: any inbox they date is due already."""
    if not cut:
        return []
    kept = [*cuts, (top, arrived)]
    expired = [c for c in kept if c[1] <= t - window]
    if len(expired) > 1:
        return [expired[-1], *(c for c in kept if c[1] > t - window)]
    return kept


def settled(
    ready: Sequence[str],
    since: Mapping[str, float],
    start: int,
    t: float,
    window: float,
    limit: int,
) -> list[str]:
    """The ready inboxes to claim now, at most `limit`: those that have waited out the batch
    window, in list order (oldest work first) but from `start`, so workers on other hosts
    reading the same list take different inboxes instead of queueing on the same leases."""
    rotated = [*ready[start:], *ready[:start]]
    return [i for i in rotated if window <= 0 or t - since[i] >= window][:limit]


def window_end(since: Mapping[str, float], window: float) -> float | None:
    """When the first ready inbox not yet run will have waited out its batch window; None when
    there is no window or no such inbox."""
    if window <= 0 or not since:
        return None
    return min(since.values()) + window


def fast(run_time: float | None, flush_after: float) -> bool:
    """Whether runs take less than a commit may wait (`flush_after`): then many go in one claim
    and one finish; slow runs (a model call) go one inbox at a time. Unknown is slow."""
    return run_time is not None and run_time < flush_after


def smoothed(run_time: float | None, took: float) -> float:
    """The run time after a run that took `took` seconds (the first one sets it)."""
    return took if run_time is None else 0.8 * run_time + 0.2 * took


def groups(items: Sequence[T], size: int) -> list[list[T]]:
    """`items` in order, `size` at a time: each group is one claim transaction."""
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


@dataclass(frozen=True, slots=True)
class Turn:
    """What the followers (next batches of inboxes this worker just ran) do this round."""

    run: int
    """How many of them run now, from the front of the line."""
    holding: float | None
    """Since when they have been held back for a batch window; None: not held."""


def followers_turn(
    waiting: int,
    holding: float | None,
    t: float,
    window_ends: float | None,
    window: float,
    run_time: float | None,
    flush_after: float,
) -> Turn:
    """The followers' turn after the newly ready inboxes had theirs. When some inbox's batch
    window ends (`window_ends`) before a busy inbox's next run would, that inbox goes first and
    the busy ones wait for it, a window at most. Otherwise slow runs go one busy inbox at a
    time, each after a fresh look at the ready list; fast ones all together, so their finishes
    still share commits."""
    if waiting and window_ends is not None and window_ends - t < (run_time or 0.0):
        since = t if holding is None else holding
        if t - since < window:
            return Turn(0, since)
    if not waiting:
        return Turn(0, None)
    return Turn(waiting if fast(run_time, flush_after) else 1, None)
