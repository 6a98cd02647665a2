"""The backend contract, and the base every concern of the store builds on.

A backend is a `Connector`: it supplies a connection, a transaction and a runner for the named
statements of its dialect (`sql.py`: the shared file and its own), and nothing else. The rules
live in the concern modules (inbox, claims, timers, approvals, outbox, admin) over that runner,
so both backends obey exactly the same ones (procrastinate's connector / manager split).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from wakeful.core import tracing
from wakeful.core.effects import Post
from wakeful.core.kinds import ENGINE_KINDS, Kinds
from wakeful.core.records import StoredEvent
from wakeful.core.settings import Settings
from wakeful.core.store.sql import Tx

log = logging.getLogger("wakeful.store")

NewEvent = (
    tuple[str, str, str, str, int]
    | tuple[str, str, str, str, int, int | None]
    | tuple[str, str, str, str, int, int | None, str | None]
)
"""(inbox, source, source_id, payload JSON, now[, waiting since[, trace]]): one delivery on its
way into the inbox; the sixth, when a person waits on it (`StoredEvent.awaited`), is when they
began; the seventh the traceparent of the span that stores it (core/tracing.py), taken in the
caller's thread (a group commit's batch is written by another caller's)."""


def insert_events(tx: Tx, events: Sequence[NewEvent]) -> list[int | None]:
    """The one way an event enters the inbox: insert each unless its (source, source_id) key
    exists; for each, the new id, or None for a repeat (of a stored event, or of an earlier
    one in `events`: the first copy wins).

    Every event goes through this one statement (`insert_events`), whoever stores it: a
    delivery through `Connector.store_event`, where concurrent callers share a batch and one
    commit, or a timer occurrence or an approval's answer or expiry inside the transaction
    that decides it (`insert_event`). On PostgreSQL the same statement wakes idle workers on
    every host."""
    rows = tx.many(
        "insert_events",
        [
            {
                "inbox": e[0],
                "source": e[1],
                "source_id": e[2],
                "payload": e[3],
                "now": e[4],
                "waiting": e[5] if len(e) > 5 else None,
                "trace": e[6] if len(e) > 6 else None,
            }
            for e in events
        ],
    )
    stored = {(str(r["source"]), str(r["source_id"])): int(r["id"]) for r in rows}
    return [stored.pop((e[1], e[2]), None) for e in events]


def insert_event(
    tx: Tx,
    inbox: str,
    source: str,
    source_id: str,
    body: str,
    now: int,
    waiting: int | None = None,
) -> int | None:
    """`insert_events` for one event inside the caller's transaction: the new id, or None. It
    stores the current span's trace (an approval's answer: the click's request)."""
    trace = tracing.current_context()
    return insert_events(tx, [(inbox, source, source_id, body, now, waiting, trace)])[0]


class Connector(ABC):
    """What a backend owes the store: transactions over its named statements."""

    dialect: str
    """Which statements (`shared.sql` and `<dialect>.sql`) and migrations the backend runs:
    `sqlite` or `postgres`."""

    @abstractmethod
    def transaction(self, write: bool = True, urgent: bool = False) -> AbstractContextManager[Tx]:
        """A transaction that commits on success and rolls back on any error, re-raising it
        (driver errors translated to `StoreError`s). A write one takes the write lock up front
        (BEGIN IMMEDIATE on SQLite), so it never fails half-way on a lock upgrade.

        `urgent` marks a write someone is waiting on (an HTTP answer to Slack): a backend with
        an in-process write queue lets it go before background writers."""

    @abstractmethod
    def close(self) -> None:
        """Release connections. The connector is unusable afterwards."""

    def disk(self) -> tuple[tuple[str, ...], int]:
        """The files the store lives in and its cap in pages (0: none), for its size gauge: a
        file-backed backend's own (SQLite); a server's store has neither."""
        return (), 0

    def scrub(
        self, tables: Sequence[str], erased_in: int | None = None, patience: float | None = None
    ) -> list[str]:
        """Leave no erased text readable in the files of `tables`, after an erasure committed
        (core/store/forget.py, `erased_in`: PostgreSQL's erasing transaction); the tables left
        undone (empty: done). `patience`: seconds to wait for what holds the scrub back (None:
        the backend's own). The base form has no files to scrub."""
        return []

    def store_event(self, event: NewEvent) -> int | None:
        """Commit one new event (None when its key exists), returning after its commit. Both
        backends batch concurrent callers into one `store_events` (group commit); this base
        form commits each event alone."""
        return self.store_events([event])[0]

    def store_events(self, events: Sequence[NewEvent]) -> list[int | None]:
        """Commit a batch of new events in one urgent transaction (`insert_events`): all of
        them or, on an error, none."""
        with self.transaction(urgent=True) as tx:
            return insert_events(tx, events)

    def listen(self, on_work: Callable[[], None]) -> Callable[[], None] | None:
        """Call `on_work` whenever any process stores an event; return a function that stops
        listening, or None when the backend cannot notify (workers elsewhere then poll)."""
        return None


def prefix_match(prefix: str) -> dict[str, Any]:
    """The parameters that match the inboxes starting with `prefix` (`:prefix`, its length
    `:n`): a workspace's are matched a prefix at a time (core/tenancy.py
    `Workspace.prefixes`; a team's people's inboxes start with `<team>:`)."""
    return {"prefix": prefix, "n": len(prefix)}


ERASED_TABLES = (
    "memories",
    "events",
    "attempts",
    "outbox",
    "sessions",
    "set_aside_sessions",
    "steps",
    "timers",
    "approvals",
)
"""The tables an erasure rewrites rows of (core/store/forget.py): PostgreSQL's scrub copies
each anew."""
SCRUB_RETRY_PATIENCE = 1.0
"""Seconds the scheduler's retry of a scrub waits for what holds it back (an older transaction,
a reader of SQLite's WAL) before leaving it to the next: its loop also fires timers."""


class StoreBase:
    """The settings, the outbox's kinds and the backend every concern of the store shares."""

    def __init__(
        self, db: Connector, settings: Settings | None = None, kinds: Kinds = ENGINE_KINDS
    ) -> None:
        self.db = db
        self.settings = settings or Settings()
        self.kinds = kinds
        """The kinds the outbox takes and plans (core/kinds.py): the engine's alone unless the
        process's assembly hands in its edge's (bot/slack/kinds.py `SLACK_KINDS`)."""
        self.failure_notice: Callable[[StoredEvent], list[Post]] | None = None
        """What to tell the person whose event ran out of attempts, and where (None: no one);
        the worker sets it from its agent's failure text."""
        self.process: str | None = None
        """The process this store's leases are held by, once it registered (processes.py):
        a lease names it, so its leases end when it does. None: leases last their TTL."""

    def _tx(self, write: bool = True, urgent: bool = False) -> AbstractContextManager[Tx]:
        return self.db.transaction(write, urgent)

    def close(self) -> None:
        """Release the backend's connections. The store is unusable afterwards."""
        self.db.close()

    def scrub(self, now: int, retry: bool = False) -> bool:
        """Make what erasures removed (core/store/forget.py) unreadable in the store's files:
        every erasure whose `forgets` row still names tables, only those tables. False when
        some are left (the text is unreachable already): the scheduler retries them
        (`retry`: its pass, which waits SCRUB_RETRY_PATIENCE for what holds them back). Never
        raises: the erasure stands whatever happens to its scrub."""
        try:
            undone = self._scrub(now, SCRUB_RETRY_PATIENCE if retry else None)
        except Exception as exc:  # the tables stay named for the next try
            log.warning("forget: the store's files could not be scrubbed: %s", exc)
            return False
        if undone and not retry:
            log.warning(
                "forget: the store's files are not scrubbed yet (%s held back): the scheduler "
                "retries until they are",
                ", ".join(undone),
            )
        return not undone

    def _scrub(self, now: int, patience: float | None) -> list[str]:
        """One scrub of the tables the unscrubbed erasures name; the tables left undone."""
        with self._tx(write=False) as tx:
            rows = tx.all("unscrubbed_forgets")
        if not rows:
            return []
        left = {int(r["id"]): set(str(r["unscrubbed"]).split(",")) - {""} for r in rows}
        tables = [t for t in ERASED_TABLES if any(t in names for names in left.values())]
        xids = [int(r["erase_xid"]) for r in rows if r["erase_xid"] is not None]
        undone = set(self.db.scrub(tables, max(xids, default=None), patience))
        with self._tx() as tx:
            for row_id, names in left.items():
                still = [t for t in ERASED_TABLES if t in names and t in undone]
                if not still or set(still) != names:  # a name not scrubbed now counts done
                    done = None if still else now
                    params = {"id": row_id, "unscrubbed": ",".join(still), "scrubbed_at": done}
                    tx.run("set_unscrubbed", params)
        if not undone and patience is not None:
            log.info("forget: the store's files are scrubbed now (%s)", ", ".join(tables))
        return [t for t in tables if t in undone]

    def listen(self, on_work: Callable[[], None]) -> Callable[[], None] | None:
        """See `Connector.listen`: PostgreSQL wakes workers on every host; SQLite returns None."""
        return self.db.listen(on_work)

    def schema_version(self) -> int:
        """The highest migration applied."""
        with self._tx(write=False) as tx:
            row = tx.one("schema_version")
        return int(row["version"] or 0) if row else 0

    def server_time(self) -> float | None:
        """The database server's clock in seconds, or None when the store has no clock of its
        own (SQLite runs on this host: the host clock is the store's clock)."""
        with self._tx(write=False) as tx:
            row = tx.one("server_time")
        return None if row is None or row["now"] is None else float(row["now"])

    def healthy(self) -> bool:
        """True when the store answers a trivial query; for /healthz."""
        try:
            with self._tx(write=False) as tx:
                return tx.one("ping") is not None
        except Exception:
            return False
