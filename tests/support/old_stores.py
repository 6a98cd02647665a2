"""A SQLite store as an older wakeful left it: migrated up to a version, not past it, for the
tests of what an upgrade does to rows it finds."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from wakeful.core.store.sql import load_migrations
from wakeful.core.store.sqlite import _QUERIES


def sqlite_before(path: Path, version: int) -> sqlite3.Connection:
    """A new SQLite file at `path` with every migration before `version` applied and recorded,
    open (autocommit) for the test to write the old rows an upgrade must handle."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(_QUERIES["create_migrations_table"])
    for number, name, script in load_migrations("sqlite"):
        if number >= version:
            break
        conn.executescript(script)
        conn.execute(_QUERIES["record_migration"], {"version": number, "name": name})
    return conn
