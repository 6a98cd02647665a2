"""The embedded store: one SQLite file in WAL mode, one connection per thread.

Write transactions begin IMMEDIATE, so the write lock is taken up front and a transaction never
fails half-way on a lock upgrade; SQLite's busy timeout bounds the wait for that lock, after which
the caller gets StoreUnavailable. synchronous=FULL by default: a commit is on disk when it
returns, which is what lets the HTTP front acknowledge Slack only after the commit.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar

from wakeful.core.errors import StoreError, StoreUnavailable
from wakeful.core.store.base import Connector, NewEvent, insert_events
from wakeful.core.store.group_commit import GroupCommit
from wakeful.core.store.sql import (
    AfterCommit,
    Row,
    batched,
    load_migrations,
    load_queries,
)
from wakeful.core.store.sqlite_files import FileWatch, Holder

_QUERIES = load_queries("sqlite")
_T = TypeVar("_T")
_TRANSIENT = ("locked", "busy", "full", "disk i/o", "unable to open", "readonly")
WAL_SIZE_LIMIT = 32 * 1024 * 1024
"""Bytes the -wal file is cut back to after each checkpoint reset (SQLite's journal_size_limit)."""
_KEEP_CONNECTION = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_CONSTRAINT)
"""Failures that say nothing about the connection itself: it stays open for the next try."""


class WriteGate:
    """The in-process write lock, with a fast lane: a caller whose answer a person (or Slack's
    three-second clock) is waiting for goes before background writers that are still queued.
    Waiters wake the moment the holder commits, unlike SQLite's sleeping busy handler."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._held = False
        self._urgent_waiting = 0
        self._waiting = 0

    def acquire(self, urgent: bool, timeout: float) -> bool:
        with self._cv:
            if not self._held and (urgent or not self._urgent_waiting):
                self._held = True  # the common, uncontended case
                return True
            deadline = time.monotonic() + timeout
            self._waiting += 1
            if urgent:
                self._urgent_waiting += 1
            try:
                while self._held or (not urgent and self._urgent_waiting):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._cv.wait(left)
                self._held = True
                return True
            finally:
                self._waiting -= 1
                if urgent:
                    self._urgent_waiting -= 1

    def release(self) -> None:
        with self._cv:
            self._held = False
            if self._waiting:
                self._cv.notify_all()


class _SqliteTx(AfterCommit):
    """Runs named statements on the connection of one open transaction."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        super().__init__()
        self._conn = conn

    def run(self, name: str, params: Mapping[str, Any] | None = None) -> int:
        return self._conn.execute(_QUERIES[name], params or {}).rowcount

    def one(self, name: str, params: Mapping[str, Any] | None = None) -> Row | None:
        row: Row | None = self._conn.execute(_QUERIES[name], params or {}).fetchone()
        return row

    def all(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        return list(self._conn.execute(_QUERIES[name], params or {}).fetchall())

    def many(self, name: str, rows: Sequence[Mapping[str, Any]]) -> list[Row]:
        return list(self._conn.execute(*batched(_QUERIES[name], rows)).fetchall())


def translate(exc: sqlite3.Error, path: str = "") -> StoreError:
    """Driver error -> wakeful error. Lock, busy, read-only, I/O and disk-full conditions are
    transient (503: Slack retries, nothing is acknowledged unstored), each with a hint at what
    an operator should look at; anything else is a StoreError."""
    text = str(exc).lower()
    where = f" ({path})" if path else ""
    if isinstance(exc, sqlite3.OperationalError) and any(t in text for t in _TRANSIENT):
        hint = next((h for key, h in _HINTS.items() if key in text), "")
        return StoreUnavailable(f"SQLite store unavailable{where}: {exc}{hint}")
    return StoreError(f"SQLite store error{where}: {exc}")


_HINTS = {
    "full": "; the disk holding the database and its -wal file is full",
    "readonly": "; the database file or its folder cannot be written by this process",
    "i/o": "; the database or its -wal file cannot be written (read-only, full or failing disk?)",
}


class SQLiteConnector(Connector):
    """One SQLite file. Safe to share between threads; each thread gets a connection."""

    dialect = "sqlite"

    def __init__(
        self,
        path: str | Path,
        busy_timeout_ms: int = 5000,
        synchronous: str = "FULL",
        max_pages: int = 0,
        migrate: bool = True,
    ) -> None:
        """`migrate=False` opens a store as it is, for a reader that must change nothing."""
        if synchronous.upper() not in ("FULL", "NORMAL", "EXTRA"):
            raise ValueError(f"synchronous must be FULL, NORMAL or EXTRA, got {synchronous!r}")
        self.path = str(path)
        self._busy_timeout_ms = busy_timeout_ms
        self._synchronous = synchronous.upper()
        self._max_pages = int(max_pages)
        self.max_pages = self._max_pages
        """WAKEFUL_SQLITE_MAX_PAGES (0: no cap): the metrics show the store against it."""
        self._local = threading.local()
        self._ingests = SimpleNamespace()
        """Where the one connection every ingest batch commits on is kept (`store_events`)."""
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._write_lock = WriteGate()
        self._closed = False
        self._group: GroupCommit[NewEvent, int | None] = GroupCommit(self.store_events)
        self._holder = Holder(self.path)  # `wakeful restore` refuses while this is held
        self._watch = FileWatch(self.path)  # and a file removed or swapped anyway is noticed
        try:
            if migrate:
                self._migrate()
        except BaseException:
            self.close()
            raise

    def _connect(self, urgent: bool = False, slots: Any = None) -> sqlite3.Connection:
        """This thread's connection; an urgent writer's is a second one whose busy timeout is 0,
        because it waits for another process's lock in `_locking` instead of SQLite's handler
        (reads and background writes keep the handler, on the first connection). `slots`
        holds the connection instead of this thread: the ingests' one (`store_events`)."""
        name = "urgent" if urgent else "conn"
        slots = self._local if slots is None else slots
        conn: sqlite3.Connection | None = getattr(slots, name, None)
        if conn is not None:
            return conn
        if self._closed:
            raise StoreError("store is closed")
        try:
            conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=0
            )
            conn.row_factory = sqlite3.Row
            busy = 0 if urgent else int(self._busy_timeout_ms)
            conn.execute(f"PRAGMA busy_timeout = {busy}")
            self._wal(conn)
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            # Checkpoints run as SQLite's own (at 1,000 pages); this truncates the -wal file
            # back to the limit whenever it restarts, so a burst does not leave it large.
            conn.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
            conn.execute("PRAGMA foreign_keys = ON")
            # What a write frees is overwritten with zeros, not left in free pages: text a
            # person had forgotten (core/store/forget.py) is gone from the file, not hidden.
            conn.execute("PRAGMA secure_delete = ON")
            if self._max_pages:
                # A cap on the file's size: past it, writes fail as on a full disk.
                conn.execute(f"PRAGMA max_page_count = {self._max_pages}")
        except sqlite3.Error as exc:
            if conn is not None:
                conn.close()
            raise translate(exc, self.path) from exc
        setattr(slots, name, conn)
        with self._lock:
            self._all.append(conn)
        self._watch.pin()
        return conn

    def _idle_connection(self) -> sqlite3.Connection | None:
        """A connection of this process outside any transaction (this thread's first): what
        still reads the store's file after it was removed or replaced at its path. Never the
        ingests' one: an autocommit insert on it is in no transaction, yet it is in use (the
        ingest checks with it itself, holding the write gate)."""
        mine = [getattr(self._local, name, None) for name in ("conn", "urgent")]
        ingests = getattr(self._ingests, "urgent", None)
        with self._lock:
            others = [c for c in self._all if c is not ingests]
        return next((c for c in (*mine, *others) if c is not None and not c.in_transaction), None)

    def _wal(self, conn: sqlite3.Connection) -> None:
        """Switch the file to WAL. On a fresh file that another process or thread is
        switching at the same moment, SQLite answers "locked" at once, without its busy
        handler: look again until the busy timeout is over."""
        self._while_busy(lambda: conn.execute("PRAGMA journal_mode = WAL"), 0.005)

    def _while_busy(self, statement: Callable[[], _T], pause: float) -> _T:
        """Run `statement`, again every `pause` seconds while SQLite answers busy, up to the
        busy timeout (then its error stands)."""
        deadline = time.monotonic() + self._busy_timeout_ms / 1000
        while True:
            try:
                return statement()
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY:
                    raise
                if time.monotonic() >= deadline:
                    raise
            time.sleep(pause)

    @contextmanager
    def _gated(self, write: bool, urgent: bool) -> Iterator[None]:
        """Hold this process's write gate around a write (reads pass straight through).

        Writers of this process queue on a gate that wakes the next one the moment the previous
        commits; SQLite's own busy handler (for other processes) sleeps in steps of up to 100 ms,
        which would show up directly in Slack's acknowledgement latency. For the same reason an
        urgent writer waits for another process's lock in `_locking`, not in that handler."""
        if not write:
            yield
            return
        if not self._write_lock.acquire(urgent, self._busy_timeout_ms / 1000):
            raise StoreUnavailable("SQLite store unavailable: database is locked (in-process)")
        try:
            yield
        finally:
            self._write_lock.release()

    def _locking(self, urgent: bool, statement: Callable[[], _T]) -> _T:
        """Run the statement that takes SQLite's write lock.

        An urgent writer finding another process's lock looks again every 0.2 ms, up to the
        busy timeout, instead of SQLite's 1, 2, 5, 10, 15, 20 ms sleeps between looks."""
        return self._while_busy(statement, 0.0002) if urgent else statement()

    @contextmanager
    def _open(self, write: bool, urgent: bool) -> Iterator[sqlite3.Connection]:
        """BEGIN (IMMEDIATE for a write) ... COMMIT on this thread's connection; on any error
        roll back and re-raise, driver errors translated. A write that committed into a file
        no longer at the store's path fails too (StoreReplaced): it must not be acknowledged."""
        self._watch.check(self._idle_connection)
        conn = self._connect(urgent and write)
        with self._gated(write, urgent):
            try:
                self._locking(urgent, lambda: conn.execute("BEGIN IMMEDIATE" if write else "BEGIN"))
            except sqlite3.Error as exc:
                raise self._failed(exc, conn) from exc
            try:
                yield conn
            except sqlite3.Error as exc:
                _rollback(conn)
                raise self._failed(exc, conn) from exc
            except BaseException:
                _rollback(conn)
                raise
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                _rollback(conn)
                raise self._failed(exc, conn) from exc
        if write:
            self._watch.check(self._idle_connection)

    @contextmanager
    def transaction(self, write: bool = True, urgent: bool = False) -> Iterator[_SqliteTx]:
        with self._open(write, urgent) as conn:
            tx = _SqliteTx(conn)
            yield tx
        tx.committed()

    def scrub(
        self, tables: Sequence[str], erased_in: int | None = None, patience: float | None = None
    ) -> list[str]:
        """Checkpoint the WAL into the file and truncate it: the frames of pages as they were
        before an erasure (`secure_delete` already zeroed the file's own free space) go.
        Another process's open read can hold the checkpoint back: looked again for up to
        `patience` (None: the busy timeout). One checkpoint does every table, or none."""
        if not tables:
            return []
        conn = self._connect()
        wait = self._busy_timeout_ms / 1000 if patience is None else patience
        deadline = time.monotonic() + wait
        while True:
            row = self._while_busy(
                lambda: conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone(), 0.01
            )
            if row is not None and int(row[0]) == 0:
                return []
            if time.monotonic() >= deadline:
                return list(tables)
            time.sleep(0.05)

    def store_event(self, event: NewEvent) -> int | None:
        """Concurrent ingests share one `store_events` transaction and one fsync (group
        commit); each caller returns only after the commit that holds its row."""
        return self._group.submit(event)

    def store_events(self, events: Sequence[NewEvent]) -> list[int | None]:
        """`insert_events` as one autocommit statement: SQLite commits a lone statement by
        itself, so a batch takes one step with the GIL released, not four (BEGIN, INSERT,
        its rows, COMMIT) that each wait to get it back from the callers. All or nothing."""
        with self._gated(write=True, urgent=True):
            # One connection for every batch, whichever HTTP thread leads it (the write gate
            # lets one in at a time): its page cache stays warm from one delivery to the next,
            # where each thread's own connection re-read the pages another had just written
            # (seven reads a delivery, and their CPU, measured with sixteen threads).
            conn = self._connect(urgent=True, slots=self._ingests)

            # Should the file be gone, the copy may read it through `conn`: ours alone here.
            def source() -> sqlite3.Connection:
                return self._idle_connection() or conn

            self._watch.check(source)
            try:
                ids = self._locking(True, lambda: insert_events(_SqliteTx(conn), events))
            except sqlite3.Error as exc:
                _rollback(conn)
                raise self._failed(exc, conn) from exc
            self._watch.check(source)  # committed where it will be read?
        return ids

    def _failed(self, exc: sqlite3.Error, conn: sqlite3.Connection) -> StoreError:
        """Translate a driver error; a connection that hit anything but a lock or a constraint
        is closed and forgotten. SQLite can keep a connection read-only after an I/O or
        read-only failure even once its cause is fixed; the next transaction on this thread
        opens a fresh one, so the process recovers without a restart."""
        if exc.sqlite_errorcode & 0xFF not in _KEEP_CONNECTION:
            for slots in (self._local, self._ingests):
                for name in ("conn", "urgent"):
                    if getattr(slots, name, None) is conn:
                        delattr(slots, name)
            with self._lock:
                if conn in self._all:
                    self._all.remove(conn)
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        return translate(exc, self.path)

    def _migrate(self) -> None:
        """Apply each packaged migration not yet recorded: the check, the migration and its
        record in one write transaction, so a crash half-way leaves neither, and processes
        opening a fresh file at once apply each migration once (the others wait for the write
        lock, then find it recorded)."""
        with self._open(write=True, urgent=False) as conn:
            conn.execute(_QUERIES["create_migrations_table"])
        for version, name, script in load_migrations(self.dialect):
            with self._open(write=True, urgent=False) as conn:
                if conn.execute(_QUERIES["migration_applied"], {"version": version}).fetchone():
                    continue
                # Statement by statement: executescript would commit the open transaction
                # first, between the check and the migration.
                for statement in _statements(script):
                    conn.execute(statement)
                conn.execute(_QUERIES["record_migration"], {"version": version, "name": name})

    def disk(self) -> tuple[tuple[str, ...], int]:
        return (self.path, self.path + "-wal"), self._max_pages

    def close(self) -> None:
        self._closed = True
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()
        self._ingests = SimpleNamespace()
        self._holder.release()


def _statements(script: str) -> Iterator[str]:
    """A migration script's statements one at a time (comments go with the next one)."""
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            yield pending
            pending = ""
    if pending.strip():
        yield pending  # trailing comments: nothing to run, but nothing is dropped unseen


def _rollback(conn: sqlite3.Connection) -> None:
    # The original error is what the caller needs to see, not a failed rollback.
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
