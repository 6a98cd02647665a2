"""Versioned schema: recorded with the migration, applied once, reopening is a no-op."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.conftest import T0, MakeStore
from wakeful.core.errors import InvalidInput
from wakeful.core.store import open_store
from wakeful.core.store.sql import load_migrations
from wakeful.core.store.sqlite import _QUERIES, SQLiteConnector


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


def test_upgrading_to_thread_activity_dates_a_thread_by_its_latest_post(tmp_path: Path) -> None:
    # A store from before migration 8 knew when the bot first took part in a thread, not when
    # it last did: the upgrade dates each thread by its latest sent post, so the first prune
    # after an upgrade does not forget a long-running thread still in use.
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(_QUERIES["create_migrations_table"])
    for version, name, script in load_migrations("sqlite"):
        if version >= 8:
            break
        conn.executescript(script)
        conn.execute(_QUERIES["record_migration"], {"version": version, "name": name})
    conn.execute(
        "INSERT INTO threads (channel, thread_ts, why, created_at) VALUES"
        " ('C1', '1.1', 'posted', ?), ('C1', '2.2', 'mentioned', ?)",
        (T0, T0),
    )
    posts = [("1.1", "sent", T0 + 50), ("1.1", "sent", T0 + 90), ("1.1", "pending", None)]
    for thread_ts, status, sent_at in posts:
        conn.execute(
            "INSERT INTO outbox (inbox, channel, thread_ts, text, priority, status, created_at,"
            " sent_at) VALUES ('T1:U1', 'C1', ?, 'x', 'normal', ?, ?, ?)",
            (thread_ts, status, T0, sent_at),
        )
    conn.close()
    store = open_store(path)
    assert store.schema_version() >= 8
    store.close()
    conn = sqlite3.connect(path)
    dated = dict(conn.execute("SELECT thread_ts, last_at FROM threads").fetchall())
    conn.close()
    assert dated == {"1.1": T0 + 90, "2.2": T0}
