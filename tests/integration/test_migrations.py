"""Versioned schema: recorded with the migration, applied once, reopening is a no-op."""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import T0, MakeStore, need_pg
from tests.support.old_stores import sqlite_before
from wakeful.core.errors import InvalidInput
from wakeful.core.store import Store, open_store
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
    with pytest.raises(InvalidInput, match="must be a file path or a postgresql:// URL"):
        open_store("mysql://localhost/x")


def test_upgrading_to_thread_activity_dates_a_thread_by_its_latest_post(tmp_path: Path) -> None:
    # A store from before migration 8 knew when the bot first took part in a thread, not when
    # it last did: the upgrade dates each thread by its latest sent post, so the first prune
    # after an upgrade does not forget a long-running thread still in use.
    path = tmp_path / "old.db"
    conn = sqlite_before(path, 8)
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


# -- opening a fresh store from several processes at once ---------------------------------------

OPENERS = 4
ROUNDS = 12


def _open_each(target: str, schemas: list[str], paths: list[str], barrier: Any, out: Any) -> None:
    """One opener: for each round, wait for the others, then open (and migrate) that round's
    fresh store; report every failure."""
    for i in range(ROUNDS):
        barrier.wait(timeout=60)
        try:
            _open_round(target, schemas, paths, i).close()
        except Exception as exc:
            out.put(f"round {i}: {type(exc).__name__}: {exc}")
    out.put("done")


def _open_round(dsn: str, schemas: list[str], paths: list[str], i: int) -> Store:
    if dsn:
        return open_store(dsn, schema=schemas[i], pool_size=1)
    return open_store(paths[i])


@contextmanager
def _fresh_schemas(dsn: str, n: int) -> Iterator[list[str]]:
    import psycopg

    names = [f"wakeful_mig_{uuid.uuid4().hex[:10]}" for _ in range(n)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in names:
            conn.execute(f"CREATE SCHEMA {name}")
    try:
        yield names
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for name in names:
                conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.pg)])
def test_processes_opening_a_fresh_store_at_once_never_fail(backend: str, tmp_path: Path) -> None:
    # Four real processes open the same fresh store at the same moment, twelve times over:
    # each migration is applied once, and no opener sees "table ... already exists" or a lock
    # it was not given time to wait for.
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(OPENERS), ctx.Queue()
    paths = [str(tmp_path / f"fresh-{i}.db") for i in range(ROUNDS)]
    dsn = need_pg() if backend == "postgres" else ""
    with _fresh_schemas(dsn, ROUNDS) if dsn else nullcontext([]) as schemas:
        procs = [
            ctx.Process(target=_open_each, args=(dsn, schemas, paths, barrier, out))
            for _ in range(OPENERS)
        ]
        for proc in procs:
            proc.start()
        reports: list[str] = []
        while reports.count("done") < OPENERS:
            reports.append(out.get(timeout=120))
        for proc in procs:
            proc.join(30)
        assert [r for r in reports if r != "done"] == []
        assert [proc.exitcode for proc in procs] == [0] * OPENERS
        latest = load_migrations(backend)[-1][0]
        for i in range(ROUNDS):
            store = _open_round(dsn, schemas, paths, i)
            try:
                assert store.schema_version() == latest
            finally:
                store.close()


def test_threads_opening_a_fresh_store_at_once_never_fail(tmp_path: Path) -> None:
    # The same race inside one process (a front and its loops opening one file together).
    failures: list[str] = []
    for i in range(ROUNDS):
        path = tmp_path / f"threads-{i}.db"
        barrier = threading.Barrier(OPENERS)

        def open_it(path: Path = path, barrier: threading.Barrier = barrier) -> None:
            barrier.wait(timeout=30)
            try:
                open_store(path).close()
            except Exception as exc:
                failures.append(f"{type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=open_it) for _ in range(OPENERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert failures == []
