"""What an operator reads: the gauges a metrics scrape shows and the `wakeful inspect` views.

Every read here is one bounded statement over an index (open rows, dead rows, open approvals,
the due-timer order, or one inbox's latest rows up to a limit), inside a read-only transaction:
neither a scrape nor an inspect waits for the write lock, and neither walks done history, so
both stay fast on a store with millions of events.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from wakeful.core.store.base import StoreBase
from wakeful.core.store.sql import Row

OUTBOX_STATES = {"pending": "held", "sending": "sending", "failed": "parked"}
"""Outbox statuses as an operator names them: a pending row is held (by the gap or waiting for
a dispatcher), a failed one is parked until a person requeues it."""


@dataclass(frozen=True, slots=True)
class StoreGauges:
    """The store's state at one instant, for a metrics scrape."""

    events: dict[str, int]
    """Events by status: pending, running, dead."""
    oldest_pending_age: int
    outbox: dict[str, int]
    """Outbox rows by state: held, sending, parked."""
    oldest_outbox_age: int
    approvals_open: int
    timers_due: int
    oldest_due_timer_age: int
    people_waiting: dict[str, int] = field(default_factory=dict)
    """Inboxes where a person has waited over `1m`, `5m`, `15m` for a first word back."""


WAITS = {"1m": 60, "5m": 300, "15m": 900}
"""The silences the gauge counts (`wakeful_people_waiting{over=...}`)."""


def waiting_params(now: int) -> dict[str, int]:
    return {"horizon": now - 86_400, **{f"over_{k}": now - v for k, v in WAITS.items()}}


@dataclass(frozen=True, slots=True)
class Overview:
    """`wakeful inspect`: where work is waiting, across inboxes (each list capped)."""

    now: int
    totals: StoreGauges
    backlog: list[dict[str, Any]] = field(default_factory=list)
    dead: list[dict[str, Any]] = field(default_factory=list)
    held_outbox: list[dict[str, Any]] = field(default_factory=list)
    parked_outbox: list[dict[str, Any]] = field(default_factory=list)
    open_approvals: list[dict[str, Any]] = field(default_factory=list)
    next_timers: list[dict[str, Any]] = field(default_factory=list)
    dead_events: list[dict[str, Any]] = field(default_factory=list)
    """The latest dead events themselves (id, inbox, source, key, attempts, when it died, the
    first line of its error); `dead` counts them by inbox."""
    approved_calls: dict[str, int] = field(default_factory=dict)
    """Approved calls by state: waiting (on a transient failure), failed, given_up."""
    approved_calls_waiting: list[dict[str, Any]] = field(default_factory=list)
    """Since when (first failure), tries, next try and the latest reason of each."""
    approved_calls_failed: list[dict[str, Any]] = field(default_factory=list)
    """The latest calls that failed for good or were given up, with their reason."""


CALL_STATES = ("waiting", "failed", "given_up")
"""The fates of an approved call an operator looks at (`done` and not yet made are not)."""


@dataclass(frozen=True, slots=True)
class InboxView:
    """`wakeful inspect <inbox>`: one inbox's latest rows of every kind (each list capped)."""

    inbox: str
    now: int
    counts: dict[str, int]
    lease: dict[str, Any] | None
    events: list[dict[str, Any]] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    outbox: list[dict[str, Any]] = field(default_factory=list)
    timers: list[dict[str, Any]] = field(default_factory=list)
    approvals: list[dict[str, Any]] = field(default_factory=list)
    dead: list[dict[str, Any]] = field(default_factory=list)
    """Each shown dead event's payload and recorded attempts (error type, message, traceback)."""


def _plain(rows: list[Row]) -> list[dict[str, Any]]:
    return [{k: _value(v) for k, v in dict(r).items()} for r in rows]


def first_line(text: Any) -> str | None:
    """The first non-blank line of an error (an exception's type and message, as a person
    reads it first); None for none."""
    if text is None:
        return None
    return next((line.strip() for line in str(text).splitlines() if line.strip()), "")


def _value(v: Any) -> Any:
    """Driver values as JSON-able ones (PostgreSQL sums come back as Decimal)."""
    if v is None or isinstance(v, bool | str | float):
        return v
    return int(v) if not isinstance(v, int) else v


@dataclass(frozen=True, slots=True)
class StoreSize:
    """How big the store is: bytes now, and the cap past which writes fail (None: no cap of
    wakeful's, as on PostgreSQL; 0: SQLite without WAKEFUL_SQLITE_MAX_PAGES)."""

    bytes: int
    cap: int | None


class OverviewReads(StoreBase):
    def store_size(self) -> StoreSize:
        """SQLite: the file plus its WAL, against max pages x page size; PostgreSQL: the
        database's size (pg_database_size), no cap."""
        with self._tx(write=False) as tx:
            row = tx.one("store_size")
        if self.db.dialect != "sqlite":
            return StoreSize(int(row["bytes"]) if row else 0, None)
        files, max_pages = self.db.disk()
        total = sum(os.path.getsize(p) for p in files if os.path.exists(p))
        return StoreSize(total, max_pages * int(row["page_size"]) if row else 0)

    def gauges(self, now: int) -> StoreGauges:
        """The backlog, dead events, outbox states, open approvals and overdue timers."""
        with self._tx(write=False) as tx:
            events = tx.all("gauge_events")
            outbox = tx.all("gauge_outbox")
            approvals = tx.one("gauge_approvals")
            timers = tx.one("gauge_timers", {"now": now})
            waiting = tx.one("gauge_waiting", waiting_params(now))
        by_status = {str(r["status"]): int(r["n"]) for r in events}
        oldest = {str(r["status"]): r["oldest"] for r in events}
        pending_since = oldest.get("pending")
        rows = {OUTBOX_STATES[str(r["status"])]: int(r["n"]) for r in outbox}
        open_since = [
            int(r["oldest"])
            for r in outbox
            if r["oldest"] is not None and r["status"] in ("pending", "sending")
        ]
        earliest = None if timers is None else timers["earliest"]
        return StoreGauges(
            events={s: by_status.get(s, 0) for s in ("pending", "running", "dead")},
            oldest_pending_age=0 if pending_since is None else max(0, now - int(pending_since)),
            outbox={s: rows.get(s, 0) for s in ("held", "sending", "parked")},
            oldest_outbox_age=max(0, now - min(open_since)) if open_since else 0,
            approvals_open=int(approvals["n"]) if approvals else 0,
            timers_due=int(timers["n"]) if timers else 0,
            oldest_due_timer_age=0 if earliest is None else max(0, now - int(earliest)),
            people_waiting={k: int(waiting[f"over_{k}"] or 0) if waiting else 0 for k in WAITS},
        )

    def overview(self, now: int, limit: int = 20) -> Overview:
        """Inboxes with backlog, dead events (by inbox, and the latest ones), held and parked
        outbox rows; open approvals, approved calls waiting, failed or given up, and the next
        timers; `limit` rows of each."""
        totals = self.gauges(now)
        params = {"limit": limit}
        with self._tx(write=False) as tx:
            calls = {str(r["state"]): int(r["n"]) for r in tx.all("inspect_call_counts")}
            return Overview(
                now=now,
                totals=totals,
                backlog=_plain(tx.all("inspect_backlog", params)),
                dead=_plain(tx.all("inspect_dead", params)),
                held_outbox=_plain(tx.all("inspect_held_outbox", params)),
                parked_outbox=_plain(tx.all("inspect_parked_outbox", params)),
                open_approvals=_plain(tx.all("inspect_open_approvals", params)),
                next_timers=_plain(tx.all("inspect_next_timers", params)),
                dead_events=[
                    {**e, "error": first_line(e["error"])}
                    for e in _plain(tx.all("inspect_dead_events", params))
                ],
                approved_calls={s: calls.get(s, 0) for s in CALL_STATES},
                approved_calls_waiting=_plain(tx.all("inspect_calls_waiting", params)),
                approved_calls_failed=_plain(tx.all("inspect_calls_failed", params)),
            )

    def inbox_view(self, inbox: str, now: int, limit: int = 20) -> InboxView:
        """One inbox: its latest events, runs, outbox rows, timers and approvals, `limit` each."""
        params = {"inbox": inbox, "limit": limit}
        with self._tx(write=False) as tx:
            events = _plain(tx.all("inspect_inbox_events", params))
            dead = [
                {
                    "id": e["id"],
                    "payload": json.loads(str(row["payload"])),
                    "attempts": _plain(tx.all("event_attempts", {"id": e["id"]})),
                    "traceback": row["traceback"],
                }
                for e in events
                if e["status"] == "dead"
                if (row := tx.one("get_event", {"id": e["id"]})) is not None
            ]
            counts = {str(r["status"]): int(r["n"]) for r in tx.all("inspect_inbox_counts", params)}
            lease = tx.one("get_lease", {"inbox": inbox})
            return InboxView(
                inbox=inbox,
                now=now,
                counts={s: counts.get(s, 0) for s in ("pending", "running", "dead")},
                lease=None if lease is None else _plain([lease])[0],
                events=events,
                runs=_plain(tx.all("inspect_inbox_runs", params)),
                outbox=_plain(tx.all("inspect_inbox_outbox", params)),
                timers=_plain(tx.all("inspect_inbox_timers", params)),
                approvals=_plain(tx.all("inspect_inbox_approvals", params)),
                dead=dead,
            )

    def store_synchronous(self) -> str:
        """How durable a commit is: SQLite's `synchronous` level (2 = FULL) or PostgreSQL's
        `synchronous_commit`, as the store's own connections have it."""
        with self._tx(write=False) as tx:
            row = tx.one("store_synchronous")
        return "" if row is None else str(next(iter(dict(row).values())))
