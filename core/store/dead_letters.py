"""Dead-letter operations: discard and requeue dead events in bulk, by filter, audited; and
each attempt's error, kept apart from the event's latest one.

A bulk operation goes a batch at a time, each batch one short transaction (the filter's next
ids over the status index, one UPDATE of those ids that returns what it changed, the audit
row's count), so a requeue of 100,000 events never holds the write lock for longer than one
batch: ingest waits at most that.
A discarded event leaves the dead count (the `WakefulDeadEvents > 0` alert clears) but stays
in the store, status `discarded`, until a person requeues it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from wakeful.core import tracing
from wakeful.core.storable import storable
from wakeful.core.store.base import StoreBase
from wakeful.core.store.sql import Row, Tx

OP_BATCH = 500
"""Events one operator transaction changes at most (as retention's PRUNE_BATCH)."""
TRACEBACK_BYTES = 8192
"""Most bytes of an attempt's traceback kept; a longer one keeps its end (where it was raised)."""
TRUNCATED = "(truncated)\n"
"""What a cut traceback starts with."""
_TYPED = re.compile(r"([A-Za-z_][\w.]*): (.*)", re.DOTALL)

Action = Literal["discard", "requeue"]


@dataclass(frozen=True, slots=True)
class DeadFilter:
    """Which events an operator means: every field given must match (all dead events if none).

    `since` / `until` bound when the event died (or was discarded), in epoch seconds, `until`
    excluded; `error` is a substring of its error, case as written; `discarded` looks at
    discarded events instead of dead ones."""

    inbox: str | None = None
    error: str | None = None
    since: int | None = None
    until: int | None = None
    ids: tuple[int, ...] | None = None
    discarded: bool = False

    def params(self) -> dict[str, Any]:
        return {
            "status": "discarded" if self.discarded else "dead",
            "inbox": self.inbox,
            "error": self.error,
            "since": self.since,
            "until": self.until,
            "ids": None if self.ids is None else json.dumps(list(self.ids)),
        }

    def describe(self) -> str:
        """The filter as the audit row keeps it: the fields given, as JSON."""
        given = {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}
        return json.dumps({k: v for k, v in given.items() if v not in (None, False)})


@dataclass(frozen=True, slots=True)
class Touched:
    """One event an operation changed (or, in a dry run, would change)."""

    id: int
    inbox: str


@dataclass(frozen=True, slots=True)
class Operation:
    """The audit of one operation: its row id (None for a dry run) and what it touched."""

    id: int | None
    action: Action
    touched: list[Touched]


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt of an event that did not end well."""

    event_id: int
    attempt: int
    run_id: str
    started_ms: int
    finished_ms: int
    outcome: str
    error_type: str | None
    message: str | None
    traceback: str | None


def bounded_traceback(text: str | None) -> str | None:
    """At most TRACEBACK_BYTES of UTF-8: the end kept, marked `(truncated)` when cut."""
    if text is None:
        return None
    raw = storable(text).encode("utf-8")
    if len(raw) <= TRACEBACK_BYTES:
        return storable(text)
    keep = TRACEBACK_BYTES - len(TRUNCATED)
    return TRUNCATED + raw[-keep:].decode("utf-8", "ignore")


def split_error(error: str) -> tuple[str | None, str]:
    """`ValueError: bad` as (`ValueError`, `bad`); an error without a type as (None, text)."""
    m = _TYPED.fullmatch(error)
    return (m.group(1), m.group(2)) if m else (None, error)


def record_attempt(
    tx: Tx,
    *,
    event_id: int,
    inbox: str,
    attempt: int,
    run_id: str,
    started_ms: int,
    finished_ms: int,
    outcome: str,
    error: str | None,
    traceback: str | None,
) -> None:
    """Write one attempt's row inside the caller's transaction (a finish, or a fence's), with
    its run's trace (core/tracing.py `row_trace`): a retry's span links to it."""
    error_type, message = split_error(error) if error else (None, None)
    tx.run(
        "insert_attempt",
        {
            "event_id": event_id,
            "inbox": inbox,
            "attempt": attempt,
            "run_id": run_id,
            "started_ms": started_ms,
            "finished_ms": finished_ms,
            "outcome": outcome,
            "error_type": error_type,
            "message": None if message is None else storable(message[:2000]),
            "traceback": bounded_traceback(traceback),
            "trace": tracing.row_trace(inbox),
        },
    )


def _attempt(row: Row) -> Attempt:
    return Attempt(
        event_id=int(row["event_id"]),
        attempt=int(row["attempt"]),
        run_id=str(row["run_id"]),
        started_ms=int(row["started_ms"]),
        finished_ms=int(row["finished_ms"]),
        outcome=str(row["outcome"]),
        error_type=row["error_type"],
        message=row["message"],
        traceback=row["traceback"],
    )


class DeadLetterOps(StoreBase):
    def matching(self, which: DeadFilter, limit: int | None = None) -> list[Row]:
        """Every event the filter matches (up to `limit`), oldest id first, read a batch at a
        time in read-only transactions: what a dry run lists, and changes nothing."""
        found: list[Row] = []
        after = 0
        while limit is None or len(found) < limit:
            size = OP_BATCH if limit is None else min(OP_BATCH, limit - len(found))
            params = {**which.params(), "after": after, "limit": size}
            with self._tx(write=False) as tx:
                rows = tx.all("matching_events", params)
            found += rows
            if len(rows) < size:
                break
            after = int(rows[-1]["id"])
        return found

    def operate(
        self, action: Action, which: DeadFilter, actor: str, now: int, batch: int = OP_BATCH
    ) -> Operation:
        """Discard or requeue every event the filter matches, a batch per transaction; the
        audit row (who, when, what filter) is written first and counted up by each batch."""
        with self._tx() as tx:
            row = tx.one(
                "insert_operation",
                {
                    "action": action,
                    "actor": actor,
                    "filter": which.describe(),
                    "now": now,
                },
            )
        assert row is not None
        op_id = int(row["id"])
        statement = "discard_ids" if action == "discard" else "requeue_ids"
        params = {**which.params(), "after": 0, "limit": batch}
        touched: list[Touched] = []
        while True:
            # A batch: the filter's next events (matching_events, the filter's one copy), then
            # those of them still in the status changed by id, in one short transaction.
            with self._tx() as tx:
                found = [int(r["id"]) for r in tx.all("matching_events", params)]
                ids = {"status": params["status"], "ids": json.dumps(found), "now": now}
                rows = tx.all(statement, ids) if found else []
                if rows:
                    tx.run("count_operation", {"id": op_id, "n": len(rows)})
            touched += sorted((Touched(int(r["id"]), str(r["inbox"])) for r in rows), key=_by_id)
            if len(found) < batch:
                break
        return Operation(op_id, action, touched)

    def event_attempts(self, event_id: int) -> list[Attempt]:
        """The recorded attempts of one event, in order."""
        with self._tx(write=False) as tx:
            return [_attempt(r) for r in tx.all("event_attempts", {"id": event_id})]

    def attempt_trace(self, event_ids: Sequence[int]) -> str | None:
        """The trace of the latest traced attempt of any of `event_ids` (None: none traced):
        the failed run a retried run's span links to. One indexed read."""
        with self._tx(write=False) as tx:
            row = tx.one("latest_attempt_trace", {"ids": json.dumps(list(event_ids))})
        return None if row is None else row["trace"]

    def operations(self, limit: int = 20) -> list[dict[str, Any]]:
        """The latest operator actions on dead events, newest first (the audit)."""
        with self._tx(write=False) as tx:
            return [dict(r) for r in tx.all("recent_operations", {"limit": limit})]


def _by_id(t: Touched) -> int:
    return t.id
