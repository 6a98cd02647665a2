"""Versioned schema: recorded with the migration, applied once, reopening is a no-op."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.conftest import T0, MakeStore
from wakeful.core.errors import InvalidInput
from wakeful.core.store import open_store
from wakeful.core.store.sql import load_migrations
from wakeful.core.store.sqlite import SQLiteConnector


def test_schema_version_is_the_latest_migration(make_store: MakeStore) -> None:
    store = make_store()
    assert store.schema_version() == load_migrations("sqlite")[-1][0]


def test_reopening_keeps_data_and_does_not_reapply(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    first = open_store(path)
    first.ingest("T1:U1", "slack", "Ev1", {"x": 1}, T0)
    first.close()
    again = open_store(path)
    assert [e.source_id for e in again.events("T1:U1")] == ["Ev1"]
    again.close()
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT COUNT(*) FROM schema_migrations").fetchone()[0] == len(
        load_migrations("sqlite")
    )
    conn.close()


def test_open_store_picks_the_backend_and_rejects_unknown_urls(tmp_path: Path) -> None:
    store = open_store(tmp_path / "a.db")
    assert isinstance(store.db, SQLiteConnector)
    store.close()
    store = open_store(f"sqlite:///{tmp_path / 'b.db'}")
    assert isinstance(store.db, SQLiteConnector)
    store.close()
    with pytest.raises(InvalidInput, match="unsupported store URL"):
        open_store("mysql://localhost/x")
