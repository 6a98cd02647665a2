"""Issue 38 follow-up: a scrub that could not finish is remembered and retried by the scheduler
until it is done, only the tables still left, on both stores.

What holds a scrub back, each made real here: on PostgreSQL another connection's lock on one
table (its VACUUM FULL cannot lock it) or a transaction older than the erasure still open
anywhere in the database (VACUUM FULL would copy the erased rows as "recently dead": what
made the Slack acceptance test keep the marker while a parallel suite ran); on SQLite a
reader holding the WAL. Each time the erased bytes stay on disk (tests/support/raw_bytes.py),
the forget says it was not scrubbed and its audit line has no `scrubbed_at`; once released,
a pass of the scheduler clears them.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.conftest import PG_SCHEMAS, T0, MakeStore, need_pg
from tests.integration.test_forget import A, B, raw_holders, two_people
from tests.support.old_stores import sqlite_before
from wakeful.bot.commands import privacy
from wakeful.bot.slack.kinds import SLACK_KINDS
from wakeful.core.clock import ManualClock
from wakeful.core.scheduler import Scheduler
from wakeful.core.settings import Settings
from wakeful.core.store import Store, base, open_store
from wakeful.core.store import postgres as pg_store
from wakeful.core.store.base import ERASED_TABLES

LATER = T0 + 60
"""When the scheduler's retry runs: what its audit line says the scrub was done at."""


@pytest.fixture
def pg() -> Iterator[Store]:
    need_pg()
    store = PG_SCHEMAS.store(Settings(), kinds=SLACK_KINDS)
    yield store
    store.close()


def unscrubbed(store: Store) -> list[str]:
    """The tables each erasure not yet scrubbed still names (its `forgets` row)."""
    with store._tx(write=False) as tx:
        return [str(r["unscrubbed"]) for r in tx.all("unscrubbed_forgets")]


def scheduler(store: Store) -> Scheduler:
    """The process's maintenance loop, looking for scrubs to retry at every tick."""
    return Scheduler(store=store, clock=ManualClock(LATER), scrub_every=0.0)


def retried_until_clean(store: Store, loop: Scheduler, mark: str, within: float = 20.0) -> None:
    """Scheduler ticks until `mark` left the raw bytes: each retry waits a second at most for
    what holds it back, and other tests' transactions on the same server may, for a moment."""
    deadline = time.monotonic() + within
    while raw_holders(store, mark) and time.monotonic() < deadline:
        loop.tick(LATER)
    assert raw_holders(store, mark) == [], "the retry left the erased text on disk"


def rewritten_all_but(store: Store, locked: str, within: float = 20.0) -> None:
    """Wait until the scrub of the forget left only `locked`: the forget's own scrub waits
    SCRUB_HORIZON_WAIT for the server's older transactions to end (other tests' may take
    longer, for a moment), then it or a later one rewrites every table it can lock."""
    deadline = time.monotonic() + within
    while unscrubbed(store) != [locked] and time.monotonic() < deadline:
        store.scrub(T0 + 10)
    assert unscrubbed(store) == [locked]


def file_nodes(store: Store) -> dict[str, int]:
    """Each erased table's current file: VACUUM FULL gives a table a new one."""
    dsn = os.environ["WAKEFUL_TEST_PG_DSN"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT relname, relfilenode FROM pg_class"
            " WHERE relnamespace = %s::regnamespace AND relname = ANY(%s)",
            (store.db.schema, list(ERASED_TABLES)),  # type: ignore[attr-defined]
        ).fetchall()
    return {str(name): int(node) for name, node in rows}


def test_pg_a_table_locked_during_the_forget_is_scrubbed_by_the_scheduler_once_released(
    pg: Store, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(pg_store, "SCRUB_LOCK_TIMEOUT", 0.5)  # each lock is waited for 0.5 s
    mark_a, mark_b = two_people(pg)
    schema = pg.db.schema  # type: ignore[attr-defined]
    holder = psycopg.connect(os.environ["WAKEFUL_TEST_PG_DSN"])
    try:
        holder.execute(f"LOCK TABLE {schema}.memories IN ACCESS SHARE MODE")  # a reader's lock
        dsn = os.environ["WAKEFUL_TEST_PG_DSN"]
        url = f"{dsn}{'&' if '?' in dsn else '?'}options=-csearch_path%3D{schema}"
        assert privacy.forget(argparse.Namespace(inbox=A, yes=True), {"WAKEFUL_DB": url}) == 0
        said = capsys.readouterr().out.splitlines()
        assert said == [
            f"forgot {A}: 1 document (1 version), 1 event, 1 outbox row",
            privacy.NOT_SCRUBBED.format(inbox=A),
        ]
        assert "the scrub is retried until it is done" in said[1]
        # Every other table was rewritten; the locked one still holds the erased rows.
        rewritten_all_but(pg, "memories")
        assert raw_holders(pg, mark_a) == [f"{schema}.memories"]
        assert unscrubbed(pg) == ["memories"]
        [line] = pg.forgets(A)
        assert line["scrubbed_at"] is None
        loop = scheduler(pg)
        loop.tick(LATER)  # still locked: tried again, still left
        assert unscrubbed(pg) == ["memories"] and raw_holders(pg, mark_a)
    finally:
        holder.rollback()
        holder.close()
    before = file_nodes(pg)
    retried_until_clean(pg, scheduler(pg), mark_a)
    after = file_nodes(pg)
    assert {t for t in ERASED_TABLES if before[t] != after[t]} == {"memories"}, "not only it"
    assert unscrubbed(pg) == []
    [line] = pg.forgets(A)
    assert line["scrubbed_at"] == LATER
    assert raw_holders(pg, mark_b) != [], "the other person's words went too"


def test_pg_a_transaction_older_than_the_forget_holds_the_scrub_until_it_ends(
    pg: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another schema's work in the same database (another test, another deployment): a
    # transaction begun before the erasure still open. VACUUM FULL would keep the erased rows
    # for it, and a scrub that said it was done would leave them on disk for good.
    monkeypatch.setattr(pg_store, "SCRUB_HORIZON_WAIT", 0.5)
    monkeypatch.setattr(base, "SCRUB_RETRY_PATIENCE", 0.3)
    mark_a, mark_b = two_people(pg)
    older = psycopg.connect(os.environ["WAKEFUL_TEST_PG_DSN"])
    try:
        older.execute("SELECT pg_current_xact_id()")  # a write's transaction, left open
        done = pg.forget_inbox(A, "cli", T0 + 10)
        assert done.scrubbed is False, "scrubbed while an older transaction could read the rows"
        assert raw_holders(pg, mark_a) != []
        assert unscrubbed(pg) == [",".join(ERASED_TABLES)]
        loop = scheduler(pg)
        loop.tick(LATER)  # still open: nothing is done
        assert unscrubbed(pg) == [",".join(ERASED_TABLES)] and raw_holders(pg, mark_a)
    finally:
        older.rollback()
        older.close()
    retried_until_clean(pg, loop, mark_a)
    [line] = pg.forgets(A)
    assert line["scrubbed_at"] == LATER and unscrubbed(pg) == []
    assert raw_holders(pg, mark_b) != []
    assert pg.memory_docs(A) == [] and pg.memory_read(B, "/memories/said.md") is not None


def test_sqlite_a_reader_holding_the_wal_during_the_forget_is_outlasted_by_the_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(base, "SCRUB_RETRY_PATIENCE", 0.3)
    path = tmp_path / "wakeful.db"
    store = open_store(path, kinds=SLACK_KINDS, busy_timeout_ms=300)
    try:
        mark_a, mark_b = two_people(store)
        reader = sqlite3.connect(path, isolation_level=None)
        try:
            reader.execute("BEGIN")
            reader.execute("SELECT count(*) FROM events").fetchone()  # its snapshot holds the WAL
            done = store.forget_inbox(A, "cli", T0 + 10)
            assert done.scrubbed is False
            assert raw_holders(store, mark_a) != []  # the pages as they were, in file or WAL
            assert unscrubbed(store) == [",".join(ERASED_TABLES)]
            loop = scheduler(store)
            loop.tick(LATER)  # still reading: tried again, still left
            assert unscrubbed(store) != [] and raw_holders(store, mark_a)
        finally:
            reader.execute("COMMIT")
            reader.close()
        loop.tick(LATER)
        assert raw_holders(store, mark_a) == []
        assert raw_holders(store, mark_b) != []
        [line] = store.forgets(A)
        assert line["scrubbed_at"] == LATER and unscrubbed(store) == []
    finally:
        store.close()


def test_a_scrub_not_held_back_is_done_with_the_forget_and_the_scheduler_finds_nothing(
    make_store: MakeStore,
) -> None:
    store = make_store()
    mark_a, _ = two_people(store)
    done = store.forget_inbox(A, "cli", T0 + 10)
    assert done.scrubbed is True and raw_holders(store, mark_a) == []
    [line] = store.forgets(A)
    assert line["scrubbed_at"] == T0 + 10 and unscrubbed(store) == []
    assert scheduler(store).tick(LATER) == 0
    [line] = store.forgets(A)
    assert line["scrubbed_at"] == T0 + 10


def test_an_erasure_from_before_the_scrub_was_recorded_is_scrubbed_once_more(
    tmp_path: Path,
) -> None:
    # Migration 0020 cannot know whether an older erasure's scrub finished (a lock, or an
    # older transaction on PostgreSQL, could have kept the text): it names every table.
    path = tmp_path / "old.db"
    conn = sqlite_before(path, 20)
    conn.execute(
        "INSERT INTO forgets (inbox, asked_by, forgotten_at, documents, versions, events,"
        " outbox) VALUES (?, 'cli', ?, 1, 1, 1, 1)",
        (A, T0),
    )
    conn.close()
    store = open_store(path)
    try:
        assert unscrubbed(store) == [",".join(ERASED_TABLES)]
        [line] = store.forgets(A)
        assert line["scrubbed_at"] is None
        scheduler(store).tick(LATER)
        [line] = store.forgets(A)
        assert line["scrubbed_at"] == LATER and unscrubbed(store) == []
    finally:
        store.close()
