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
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql as pgsql
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from ..errors import StoreError, StoreUnavailable
from ..settings import Settings
from .contract import Store
from .sql import Row, load_migrations, load_queries

_QUERIES = load_queries("postgres.sql")
_MIGRATION_LOCK = 7_311_995  # pg_advisory_xact_lock key: one migrator at a time
CHANNEL = "wakeful_work"


class _PgTx:
    def __init__(self, conn: psycopg.Connection[Any]) -> None:
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


def translate(exc: Exception) -> StoreError:
    """Driver error -> wakeful error; connection loss, pool exhaustion, lock timeouts and a
    full disk are transient."""
    if isinstance(exc, PoolTimeout | psycopg.OperationalError):
        return StoreUnavailable(f"PostgreSQL store unavailable: {exc}")
    if isinstance(exc, psycopg.errors.DiskFull | psycopg.errors.LockNotAvailable):
        return StoreUnavailable(f"PostgreSQL store unavailable: {exc}")
    return StoreError(f"PostgreSQL store error: {exc}")


class PostgresStore(Store):
    """Store on a PostgreSQL database named by a libpq DSN (`postgresql://...`)."""

    notifies = True

    def __init__(
        self,
        dsn: str,
        settings: Settings | None = None,
        schema: str | None = None,
        pool_size: int = 8,
        connect_timeout: float = 10.0,
    ) -> None:
        self.dsn = dsn
        self.settings = settings or Settings()
        self.schema = schema
        kwargs: dict[str, Any] = {"autocommit": True, "row_factory": dict_row}
        if schema:
            if not re.fullmatch(r"[a-z_][a-z0-9_]*", schema):
                raise ValueError(f"schema must be a plain lower-case identifier, got {schema!r}")
            kwargs["options"] = f"-c search_path={schema}"
        self._conn_kwargs = kwargs
        self._pool = ConnectionPool(
            dsn,
            min_size=1,
            max_size=pool_size,
            kwargs=kwargs,
            open=False,
            timeout=connect_timeout,
            name="wakeful",
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
        except PoolTimeout as exc:
            self._pool.close()
            raise StoreUnavailable(f"cannot connect to PostgreSQL: {exc}") from exc
        self._listeners: list[threading.Event] = []
        self._migrate()

    @classmethod
    def fresh_for_tests(cls, dsn: str, settings: Settings | None = None) -> PostgresStore:
        """A store in a new, empty schema of its own, dropped again by `close()`."""
        schema = f"wakeful_t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(pgsql.SQL("CREATE SCHEMA {}").format(pgsql.Identifier(schema)))
        store = cls(dsn, settings, schema=schema, pool_size=4)
        store._drop_on_close = True
        return store

    _drop_on_close = False

    @contextmanager
    def _tx(self, write: bool = True, urgent: bool = False) -> Iterator[_PgTx]:
        try:
            with self._pool.connection() as conn, conn.transaction():
                yield _PgTx(conn)
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc) from exc

    def _migrate(self) -> None:
        try:
            with self._pool.connection() as conn, conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations ("
                    "version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                    "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
                )
            for version, name, script in load_migrations("postgres"):
                with self._pool.connection() as conn, conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                    done = conn.execute(
                        "SELECT 1 FROM schema_migrations WHERE version = %s", (version,)
                    ).fetchone()
                    if done:
                        continue
                    conn.execute(script.encode())
                    conn.execute(
                        "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                        (version, name),
                    )
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc) from exc

    def schema_version(self) -> int:
        with self._pool.connection() as conn:
            row = conn.execute("SELECT MAX(version) AS v FROM schema_migrations").fetchone()
        return int(row["v"] or 0) if row else 0  # type: ignore[call-overload]

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
                        conn.execute(f"LISTEN {CHANNEL}")
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
        if self._drop_on_close and self.schema:
            try:
                with self._pool.connection() as conn:
                    conn.execute(
                        pgsql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                            pgsql.Identifier(self.schema)
                        )
                    )
            except psycopg.Error:
                pass
        self._pool.close()
