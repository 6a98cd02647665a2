"""A look at a store without opening it as the engine does: opening migrates, and an
operator's read (`wakeful inspect`, `wakeful doctor`) must change nothing, nor create a SQLite
file where none was."""

from __future__ import annotations

import os
import sqlite3
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

from wakeful.core.errors import InvalidInput
from wakeful.core.store.sql import load_migrations
from wakeful.core.store.target import store_target

NO_STORE = "no store at {path}"
"""What a read-only command says of a path where there is no store: it never creates one."""


@dataclass(frozen=True, slots=True)
class Probe:
    dialect: str
    """`sqlite` or `postgres`."""
    version: int
    """The highest migration applied (0: not a wakeful store yet)."""
    latest: int
    """The highest migration this wakeful ships."""
    journal_mode: str = ""
    """SQLite only: `wal` is what wakeful runs in."""
    clock_skew: float | None = None
    """PostgreSQL only: the server's clock minus this host's, in seconds."""

    @property
    def current(self) -> bool:
        return self.version == self.latest

    def state(self) -> str:
        """One phrase for the migration state, for people."""
        if self.version == 0:
            return "not a wakeful store yet (the first wakeful start creates it)"
        if self.version < self.latest:
            pending = self.latest - self.version
            return (
                f"schema {self.version}, {pending} migration(s) pending (the next wakeful start "
                f"applies them)"
            )
        if self.version > self.latest:
            return f"schema {self.version} is newer than this wakeful ({self.latest}): upgrade it"
        return f"schema {self.version}, current"


def latest_version(dialect: str) -> int:
    return max(v for v, _, _ in load_migrations(dialect))


def probe(target: str) -> Probe:
    """Read the store's schema version (and journal mode or clock) read-only. Raises
    InvalidInput when there is no SQLite file, StoreUnavailable (or StoreRefused) when the
    server cannot be reached or refuses the address (the caller reports them in one line)."""
    backend, path = store_target(target)
    if backend == "postgres":
        return _probe_postgres(target)
    if not os.path.isfile(path):
        raise InvalidInput(f"{NO_STORE.format(path=path)} (`wakeful serve` creates a new one)")
    uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=5.0)
    try:
        mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
        try:
            row = conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()
            version = int(row[0] or 0)
        except sqlite3.OperationalError:
            version = 0  # no migration table: not a wakeful store
    finally:
        conn.close()
    return Probe("sqlite", version, latest_version("sqlite"), journal_mode=mode)


def _probe_postgres(dsn: str) -> Probe:
    import psycopg

    from wakeful.core.store.postgres import connect_error, translate

    try:
        conn = psycopg.connect(dsn, connect_timeout=5, autocommit=True)
    except psycopg.Error as exc:  # a server that cannot be reached: one line, not a crash
        raise connect_error(exc) from exc
    try:
        return _read_postgres(conn)
    except psycopg.Error as exc:
        raise translate(exc) from exc
    finally:
        conn.close()


def _read_postgres(conn: Any) -> Probe:
    import psycopg

    with conn:
        before = time.time()
        row = conn.execute("SELECT EXTRACT(EPOCH FROM clock_timestamp())").fetchone()
        after = time.time()
        skew = float(row[0]) - (before + after) / 2 if row else None
        try:
            found = conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()
            version = int(found[0] or 0) if found else 0
        except psycopg.errors.UndefinedTable:
            version = 0
    return Probe("postgres", version, latest_version("postgres"), clock_skew=skew)


def check_readable(db: str) -> Probe:
    """The store exists and is at this wakeful's schema: an operator's read never creates or
    migrates one (InvalidInput otherwise, saying what to do)."""
    found = probe(db)
    if found.version == 0:
        raise InvalidInput(f"{db} is not a wakeful store")
    if not found.current:
        raise InvalidInput(f"the store is at {found.state()}; nothing was read")
    return found
