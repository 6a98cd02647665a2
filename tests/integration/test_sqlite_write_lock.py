"""SQLite's write lock, which the HTTP front's insert (and Slack's three-second clock) waits for
whenever someone else holds it. Idle loop passes do not take it: the scheduler and the
dispatcher are woken far more often than they find work. An urgent write that finds another
process holding it keeps looking until the busy timeout, then fails (503, Slack retries)."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import T0
from wakeful.core.clock import ManualClock
from wakeful.core.effects import Effects, Post, Timer
from wakeful.core.errors import StoreUnavailable
from wakeful.core.scheduler import Scheduler
from wakeful.core.settings import DAY, Settings
from wakeful.core.store import Store, open_store
from wakeful.devtools.audit import count_events


@contextmanager
def write_locked(path: str) -> Iterator[None]:
    """Another process's writer holding the database's write lock."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        conn.execute("ROLLBACK")
        conn.close()


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[Store, Store]]:
    """The store that sets things up, and a second one (same file) with a short busy wait."""
    settings = Settings(send_timeout=60)
    setup = open_store(tmp_path / "idle.db", settings)
    probe = open_store(tmp_path / "idle.db", settings, busy_timeout_ms=100)
    yield setup, probe
    probe.close()
    setup.close()


def test_a_dispatcher_pass_with_nothing_to_send_takes_no_write_lock(
    stores: tuple[Store, Store],
) -> None:
    setup, probe = stores
    setup.post("T1:U1", [Post("C1", "now", priority="urgent")], T0)
    assert len(setup.claim_batches(T0)) == 1  # in flight until T0 + 60
    with write_locked(setup.db.path):  # type: ignore[attr-defined]
        assert probe.claim_batches(T0 + 1) == []  # still in flight: nothing to claim
        with pytest.raises(StoreUnavailable):
            probe.claim_batches(T0 + 61)  # its deadline passed: reclaiming it must write


def test_a_scheduler_pass_with_nothing_due_takes_no_write_lock(
    stores: tuple[Store, Store],
) -> None:
    setup, probe = stores
    setup.add_timer("T1:U1", Timer.once("ping", T0 + 60), T0)
    with write_locked(setup.db.path):  # type: ignore[attr-defined]
        assert probe.fire_due_timers(T0 + 59).due == 0
        with pytest.raises(StoreUnavailable):
            probe.fire_due_timers(T0 + 60)
    assert probe.fire_due_timers(T0 + 60).fired == 1


def test_a_retention_pass_with_nothing_aged_takes_no_write_lock(
    stores: tuple[Store, Store],
) -> None:
    setup, probe = stores
    assert setup.ingest("T1:U1", "slack", "E1", {"text": "x"}, T0).stored
    claim = setup.acquire_and_claim("T1:U1", "W", T0)
    assert claim is not None and setup.finish(claim, Effects(), T0, release=True)
    scheduler = Scheduler(store=probe, clock=ManualClock(T0))
    with write_locked(setup.db.path):  # type: ignore[attr-defined]
        assert scheduler.tick(T0 + 60) == 0  # the done event is a minute old: nothing to do
        with pytest.raises(StoreUnavailable):
            probe.prune(T0 + 31 * DAY)  # aged out: deleting it must write


def test_an_urgent_write_waits_out_another_process_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQLite's own busy handler sleeps 1, 2, 5, 10, ... 25-50 ms between looks, so a write could
    # be stored ~28 ms after the lock's release; the urgent writer's connection leaves that
    # handler off (busy timeout 0) and looks again itself every 0.2 ms. Checked by what it
    # does, not by a time: many looks, each after a 0.2 ms pause, none inside SQLite's handler.
    from wakeful.core.store import sqlite as sqlite_store

    store = open_store(tmp_path / "wait.db", busy_timeout_ms=5000)
    other = sqlite3.connect(store.db.path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    pauses: list[float] = []
    real_sleep = time.sleep

    class Clock:
        monotonic = staticmethod(time.monotonic)

        @staticmethod
        def sleep(seconds: float) -> None:
            pauses.append(seconds)
            real_sleep(seconds)

    monkeypatch.setattr(sqlite_store, "time", Clock)
    timer = threading.Timer(0.2, lambda: other.execute("ROLLBACK"))
    timer.start()
    try:
        assert store.ingest("T1:U1", "slack", "Ev1", {"text": "hi"}, T0).stored
    finally:
        timer.join()
        other.close()
    assert len(pauses) >= 10, f"{len(pauses)} looks: the ingest did not wait for the lock itself"
    assert set(pauses) == {0.0002}
    ingests = store.db._ingests.urgent  # type: ignore[attr-defined]  # the one that ingested
    assert ingests.execute("PRAGMA busy_timeout").fetchone()[0] == 0
    assert count_events(store) == 1
    store.close()


def test_an_urgent_write_gives_up_at_the_busy_timeout_and_stores_nothing(tmp_path: Path) -> None:
    store = open_store(tmp_path / "give-up.db", busy_timeout_ms=300)
    with write_locked(store.db.path), pytest.raises(StoreUnavailable):
        store.ingest("T1:U1", "slack", "Ev1", {"text": "hi"}, T0)
    assert count_events(store) == 0
    assert store.ingest("T1:U1", "slack", "Ev1", {"text": "hi"}, T0).stored  # the retry
    store.close()
