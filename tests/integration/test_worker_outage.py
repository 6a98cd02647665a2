"""A store that refuses writes (a full disk, a PostgreSQL server that refuses connections)
spends no attempts: the events it caught half-way are answered once it accepts writes again,
and none is dead-lettered for the store's sake."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from pathlib import Path

from tests.conftest import PG_DSN, T0, need_pg
from tests.support.tcp_proxy import TcpProxy
from wakeful.core.clock import ManualClock
from wakeful.core.effects import Effects, Post
from wakeful.core.errors import StoreUnavailable
from wakeful.core.run import Run
from wakeful.core.settings import Settings
from wakeful.core.store import Store, open_store
from wakeful.core.worker import Worker
from wakeful.devtools.audit import count_events
from wakeful.devtools.stores import fresh_postgres

USERS = [f"T1:U{i}" for i in range(4)]


class Replier:
    """Answers every batch with a long reply (each needs pages of its own in the outbox)."""

    def __init__(self) -> None:
        self.runs: list[list[str]] = []

    def run(self, run: Run) -> Effects:
        self.runs.append([e.key for e in run.events])
        return Effects(messages=[Post("D1", f"{run.inbox}: " + "x" * 3000)])


class Ticks:
    """Drives a worker as its loop does (a failed tick is logged and retried), on a manual clock
    and a manual monotonic clock, so leases expire and back-offs pass without waiting."""

    def __init__(self, store: Store, agent: Replier) -> None:
        self.clock = ManualClock(T0)
        self.mono = 1000.0
        self.worker = Worker(
            store=store, clock=self.clock, agent=agent, monotonic=lambda: self.mono
        )

    def tick(self, seconds: int) -> None:
        with contextlib.suppress(StoreUnavailable):
            self.worker.tick(self.clock.now)
        self.clock.now += seconds
        self.mono += seconds


def _full_store(tmp_path: Path) -> tuple[Store, sqlite3.Connection]:
    """A store whose file may grow 40 pages, with events of four users stored, and another
    writer that can fill the file past that cap (a full disk, for this store)."""
    db = tmp_path / "full.db"
    open_store(db).close()
    probe = sqlite3.connect(db)
    pages = probe.execute("PRAGMA page_count").fetchone()[0]
    probe.close()
    store = open_store(db, max_pages=pages + 40)
    for inbox in USERS:
        for i in range(2):
            store.ingest(inbox, "slack", f"{inbox}-{i}", {"text": f"m{i}"}, T0)
    filler = sqlite3.connect(db, isolation_level=None)
    filler.execute("CREATE TABLE ballast (b BLOB)")
    return store, filler


def _assert_all_answered(store: Store) -> None:
    for inbox in USERS:
        assert [e.status for e in store.events(inbox)] == ["done", "done"], inbox
        assert len(store.outbox(inbox=inbox)) >= 1, inbox
    assert count_events(store, "dead") == 0


def test_a_full_disk_for_half_an_hour_spends_no_attempts(tmp_path: Path) -> None:
    store, filler = _full_store(tmp_path)
    agent = Replier()
    ticks = Ticks(store, agent)
    try:
        filler.execute("INSERT INTO ballast VALUES (zeroblob(4000000))")
        for _ in range(12):  # 30 minutes: every lease expires and every back-off passes, often
            ticks.tick(150)
        assert agent.runs, "nothing ran while the disk was full"
        assert count_events(store, "dead") == 0, [e.error for e in store.events(USERS[0], "dead")]
        assert count_events(store, "done") < 2 * len(USERS), "the disk never refused a finish"
        assert all(e.attempts <= 1 for u in USERS for e in store.events(u))
        filler.execute("DROP TABLE ballast")  # space returns
        for _ in range(6):
            ticks.tick(1)
        _assert_all_answered(store)
        assert all(e.attempts == 1 for u in USERS for e in store.events(u))
    finally:
        filler.close()
        store.close()


def test_a_finish_refused_while_the_lease_holds_is_retried_without_running_again(
    tmp_path: Path,
) -> None:
    store, filler = _full_store(tmp_path)
    agent = Replier()
    ticks = Ticks(store, agent)
    try:
        filler.execute("INSERT INTO ballast VALUES (zeroblob(4000000))")
        ticks.tick(1)
        unfinished = {e.source_id for u in USERS for e in store.events(u) if e.status != "done"}
        refused = [run for run in agent.runs if set(run) <= unfinished]
        assert refused, "the disk never refused a finish"
        for _ in range(30):  # half an hour, the worker retrying every minute: its leases hold
            ticks.tick(60)
        assert count_events(store, "dead") == 0
        filler.execute("DROP TABLE ballast")  # space returns
        for _ in range(3):
            ticks.tick(1)
        _assert_all_answered(store)
        # The runs the full disk caught were committed as they ran, not run a second time.
        assert [run for run in agent.runs if run in refused] == refused
        assert all(e.attempts == 1 for u in USERS for e in store.events(u))
    finally:
        filler.close()
        store.close()


def latest_lease_expiry(schema: str) -> int:
    """When the last lease written in `schema` runs out (store seconds: the wall clock)."""
    import psycopg

    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        row = conn.execute(f'SELECT max(expires_at) FROM "{schema}".leases').fetchone()
    assert row is not None and row[0] is not None, "no lease was ever taken"
    return int(row[0])


def test_a_postgres_server_refusing_past_every_lease_spends_no_attempts() -> None:
    need_pg()
    settings = Settings(max_attempts=1, lease_ttl=3)  # the outage outlasts every lease
    seed = fresh_postgres(PG_DSN, settings)
    schema = seed.db.schema  # type: ignore[attr-defined]
    running, go_on = threading.Event(), threading.Event()

    class Held(Replier):
        """Holds its first run until the server is refusing."""

        def run(self, run: Run) -> Effects:
            running.set()
            assert go_on.wait(30)
            return super().run(run)

    agent = Held()
    with TcpProxy(("127.0.0.1", 5432)) as proxy:
        host, port = proxy.address
        dsn = PG_DSN.replace("127.0.0.1:5432", f"{host}:{port}")
        store = open_store(dsn, settings, schema=schema, pool_size=2)
        worker = Worker(store=store, agent=agent, poll=0.1)
        stop = threading.Event()
        thread = threading.Thread(target=worker.run, args=(stop,))
        try:
            now = int(time.time())
            for inbox in USERS:
                for i in range(2):
                    seed.ingest(inbox, "slack", f"{inbox}-{i}", {"text": f"m{i}"}, now)
            thread.start()
            assert running.wait(30), "no run started"
            proxy.refuse()
            go_on.set()  # the run ends while the server refuses: its finish cannot be written
            # The outage lasts until every lease taken before it has run out, and a second
            # more in which the worker (polling every 0.1 s) keeps trying while nothing is
            # held: nothing can renew a lease meanwhile, so the last one written is the last.
            outage_ends = latest_lease_expiry(schema) + 2
            while time.time() < outage_ends:
                time.sleep(0.1)
            proxy.accept()
            deadline = time.monotonic() + 60
            while count_events(seed, "done") < 2 * len(USERS):
                assert count_events(seed, "dead") == 0, seed.dead_letters().events
                assert time.monotonic() < deadline, "not answered after the server came back"
                time.sleep(0.1)
            _assert_all_answered(seed)
        finally:
            go_on.set()
            stop.set()
            if thread.is_alive():
                thread.join(30)
            store.close()
            seed.close()
