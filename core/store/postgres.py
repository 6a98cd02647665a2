"""The shared store for many hosts: PostgreSQL through psycopg 3 and a connection pool.

PostgreSQL has no BEGIN IMMEDIATE, so every write that decides on a row locks it explicitly
(`FOR UPDATE` on the lease in claim and finish, on the approval in answer); a worker pool
acquiring leases and schedulers reading due timers use `SKIP LOCKED`, so they never queue behind
one another; dispatchers take a per-destination advisory lock. Storing an event sends
`NOTIFY wakeful_work`, which wakes idle workers on every host.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from wakeful.core.errors import StoreError, StoreUnavailable
from wakeful.core.logs import one_line
from wakeful.core.store.base import Connector, NewEvent
from wakeful.core.store.group_commit import GroupCommit
from wakeful.core.store.sql import (
    AfterCommit,
    Row,
    batched,
    load_migrations,
    load_queries,
)

_QUERIES = load_queries("postgres")


SCRUB_LOCK_TIMEOUT = 10
"""Seconds a scrub waits for each table's lock (core/store/forget.py)."""
SCRUB_HORIZON_WAIT = 10
"""Seconds a scrub right after its erasure waits for the transactions older than it to end
(the scheduler's retry: SCRUB_RETRY_PATIENCE)."""


def _horizon_passed(conn: psycopg.Connection[Any], erased_in: int, wait: float) -> bool:
    """True once no transaction that may read rows as they were before transaction `erased_in`
    is left (scrub_horizon_held), looked again every 50 ms for up to `wait` seconds."""
    deadline = time.monotonic() + wait
    while True:
        row = conn.execute(_QUERIES["scrub_horizon_held"], {"xid": erased_in}).fetchone()
        if row is not None and int(row["n"]) == 0:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


class _PgTx(AfterCommit):
    """Runs named statements on the connection of one open transaction."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        super().__init__()
        self._conn = conn

    def run(self, name: str, params: Mapping[str, Any] | None = None) -> int:
        cur = self._conn.execute(_QUERIES[name], params or {})
        return cur.rowcount

    def one(self, name: str, params: Mapping[str, Any] | None = None) -> Row | None:
        cur = self._conn.execute(_QUERIES[name], params or {})
        row: Row | None = cur.fetchone()
        return row

    def all(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        cur = self._conn.execute(_QUERIES[name], params or {})
        return list(cur.fetchall())

    def many(self, name: str, rows: Sequence[Mapping[str, Any]]) -> list[Row]:
        return list(self._conn.execute(*batched(_QUERIES[name], rows)).fetchall())


def translate(exc: Exception) -> StoreError:
    """Driver error -> wakeful error; connection loss, pool exhaustion, lock timeouts and a
    full disk are transient."""
    if isinstance(exc, PoolTimeout | psycopg.OperationalError):
        return StoreUnavailable(f"PostgreSQL store unavailable: {exc}")
    if isinstance(exc, psycopg.errors.DiskFull | psycopg.errors.LockNotAvailable):
        return StoreUnavailable(f"PostgreSQL store unavailable: {exc}")
    return StoreError(f"PostgreSQL store error: {exc}")


class StoreRefused(StoreError):
    """The server (or the name look-up) refused this address for good: no such role or
    database, a wrong password, a host name that does not exist. Retrying cannot help, so a
    process starting up stops at once with the server's own words."""


_PASSING = (
    "connection refused",
    "server closed the connection",
    "terminating connection",
    "connection reset",
    "the database system is starting up",
    "the database system is shutting down",
    "the database system is in recovery mode",
    "the database system is not yet accepting connections",
    "too many clients",
    "timeout expired",
    "timed out",
    "no route to host",
    "network is unreachable",
    "temporary failure in name resolution",
)
"""What a connection attempt meets while a server boots, restarts or fails over: waited for
at start-up (WAKEFUL_STARTUP_WAIT). Anything else is the address's fault and is not."""


def connect_error(exc: psycopg.Error) -> StoreError:
    """A failed first connection as one line with the server's message: StoreUnavailable
    when it may pass by itself (refused, terminated, starting up), StoreRefused otherwise."""
    text = one_line(str(exc)).removeprefix("connection failed: ")
    if any(p in text.lower() for p in _PASSING):
        return StoreUnavailable(f"cannot connect to PostgreSQL: {text}")
    return StoreRefused(
        f"cannot connect to PostgreSQL: {text} (not retried: fix the address in WAKEFUL_DB)"
    )


class PostgresConnector(Connector):
    """A PostgreSQL database named by a libpq DSN (`postgresql://...`), through a pool.

    `schema` puts every table in that schema (it must exist): several stores share a database."""

    dialect = "postgres"

    def __init__(
        self,
        dsn: str,
        schema: str | None = None,
        pool_size: int = 8,
        connect_timeout: float = 10.0,
        wait_timeout: float = 2.0,
        migrate: bool = True,
    ) -> None:
        """`migrate=False` opens a store as it is, for a reader that must change nothing."""
        self.dsn = dsn
        self.schema = schema
        kwargs: dict[str, Any] = {"autocommit": True, "row_factory": dict_row}
        if schema:
            if not re.fullmatch(r"[a-z_][a-z0-9_]*", schema):
                raise ValueError(f"schema must be a plain lower-case identifier, got {schema!r}")
            kwargs["options"] = f"-c search_path={schema}"
        self._pool = ConnectionPool(
            dsn,
            min_size=1,
            max_size=pool_size,
            kwargs=kwargs,
            open=False,
            # A transaction waits this long for a connection, then fails as unavailable: the
            # HTTP front must answer Slack (503) inside its three seconds, and the loops retry.
            timeout=wait_timeout,
            name="wakeful",
        )
        try:
            # One connection first, so its error (the server's own words) is what the caller
            # sees: the pool only retries in the background and then says it timed out.
            psycopg.connect(dsn, connect_timeout=max(1, round(connect_timeout)), **kwargs).close()
        except psycopg.Error as exc:
            raise connect_error(exc) from exc
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
        except PoolTimeout as exc:
            self._pool.close()
            raise StoreUnavailable(
                f"cannot connect to PostgreSQL: the pool could not open its connections: {exc}"
            ) from exc
        self._listeners: list[threading.Event] = []
        self._group: GroupCommit[NewEvent, int | None] = GroupCommit(self.store_events)
        if migrate:
            try:
                self._migrate()
            except StoreError:
                self.close()  # a caller that tries again opens a new pool; this one must go
                raise

    @contextmanager
    def transaction(self, write: bool = True, urgent: bool = False) -> Iterator[_PgTx]:
        try:
            with self._begun() as conn:
                tx = _PgTx(conn)
                yield tx
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc) from exc
        tx.committed()

    @contextmanager
    def _begun(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection inside BEGIN.

        A connection that died while idle in the pool (the server restarted, an administrator
        or a failover terminated it) fails at BEGIN, before any statement ran: it is dropped
        and the next one tried, so a server restart costs no failed request once the server
        answers again. A failure after BEGIN is the caller's to see."""
        attempts = (self._pool.max_size or 1) + 1
        for attempt in range(1, attempts + 1):
            with ExitStack() as stack:
                conn = stack.enter_context(self._pool.connection())
                try:
                    stack.enter_context(conn.transaction())
                except psycopg.OperationalError:
                    if conn.closed and attempt < attempts:
                        continue  # the pool discards the dead connection on its way back
                    raise
                yield conn
                return

    def scrub(
        self, tables: Sequence[str], erased_in: int | None = None, patience: float | None = None
    ) -> list[str]:
        """Rewrite the tables an erasure touched (VACUUM FULL): an UPDATE or DELETE leaves the
        old row in its page until then, and plain VACUUM frees that space without clearing it.

        The copy keeps every old row a transaction may still read, so it waits first, up to
        `patience` (None: SCRUB_HORIZON_WAIT), until no transaction as old as the erasing one
        (`erased_in`) is left anywhere in the database: until then nothing is done. Each
        table's lock is held while it is copied; one that cannot be locked within
        SCRUB_LOCK_TIMEOUT is left. Returns the tables left, their old rows unreachable but
        still on disk."""
        for table in tables:
            if not re.fullmatch(r"[a-z_]+", table):
                raise ValueError(f"not a table name: {table!r}")
        if not tables:
            return []
        wait = SCRUB_HORIZON_WAIT if patience is None else patience
        left: list[str] = []
        with self._pool.connection() as conn:
            if erased_in is not None and not _horizon_passed(conn, erased_in, wait):
                return list(tables)
            conn.execute(f"SET lock_timeout = '{SCRUB_LOCK_TIMEOUT}s'")
            try:
                for table in tables:
                    try:
                        conn.execute(f"VACUUM (FULL) {table}")
                    except (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected):
                        left.append(table)
            finally:
                if not conn.closed:  # a pooled connection goes back without the timeout
                    conn.execute("RESET lock_timeout")
        return left

    def store_event(self, event: NewEvent) -> int | None:
        """Concurrent ingests share one `store_events` transaction, its one multi-row INSERT
        and one commit (group commit): one WAL flush for the batch instead of one each."""
        return self._group.submit(event)

    def _migrate(self) -> None:
        """Apply each packaged migration not yet recorded, with its record, one transaction
        each, under an advisory lock so hosts starting together migrate once."""
        try:
            with self.transaction() as tx:
                tx.one("migration_lock")
                tx.run("create_migrations_table")
            for version, name, script in load_migrations(self.dialect):
                with self._begun() as conn:
                    tx = _PgTx(conn)
                    tx.one("migration_lock")
                    if tx.one("migration_applied", {"version": version}):
                        continue
                    conn.execute(script.encode())  # bytes: a script is not a %-template
                    tx.run("record_migration", {"version": version, "name": name})
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc) from exc

    def listen(self, on_work: Callable[[], None]) -> Callable[[], None]:
        """Call `on_work` whenever any host stores an event; returns a function that stops it.

        Runs on a dedicated connection in a daemon thread and reconnects after an outage.
        """
        stop = threading.Event()
        self._listeners.append(stop)

        def loop() -> None:
            while not stop.is_set():
                try:
                    with psycopg.connect(self.dsn, autocommit=True) as conn:
                        conn.execute(_QUERIES["listen_work"])
                        on_work()  # events stored while we were not listening
                        while not stop.is_set():
                            for _ in conn.notifies(timeout=0.5, stop_after=100):
                                on_work()
                except psycopg.Error:
                    stop.wait(1.0)

        threading.Thread(target=loop, name="wakeful-listen", daemon=True).start()
        return stop.set

    def close(self) -> None:
        for stop in self._listeners:
            stop.set()
        self._pool.close()
