"""A lease ends when its process ends: through the store (register, beat, reap, forget) and
through the heartbeat loop, on both stores, with the time and the pid check injected.

Two stores on one backend play two processes (each `Store` object knows its own process);
`HERE` is the host both run on unless a test moves one elsewhere."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import PG_DSN, T0, MakeStore, need_pg
from tests.support.tcp_proxy import TcpProxy
from wakeful.core.clock import ManualClock
from wakeful.core.effects import Effects, Post
from wakeful.core.errors import StoreUnavailable
from wakeful.core.heartbeat import Heartbeat
from wakeful.core.records import ProcessRecord
from wakeful.core.rules.liveness import Host, Verdict, Watch, silence_for
from wakeful.core.settings import Settings
from wakeful.core.store import Store, open_store
from wakeful.devtools.stores import fresh_postgres

INBOX = "T1:U1"
HERE = Host("web-1", "boot-a pid:[1]")
ELSEWHERE = Host("web-2", "boot-b pid:[1]")
SILENCE = silence_for(Settings().heartbeat)


def twin(store: Store) -> Store:
    """A second process's view of the same store (same backend, a process of its own)."""
    return Store(store.db, store.settings, store.kinds)


def register(store: Store, pid: int, host: Host = HERE, at: int = T0) -> ProcessRecord:
    me = ProcessRecord(f"{host.name}:{pid}", host.name, host.boot, pid, f"s{pid}", "serve", at, at)
    store.register(me)
    return me


def watch(live: set[int], host: Host = HERE, since: int = T0 - 600) -> Watch:
    """This host's view: the pids in `live` run (each with the start time `register` gave)."""
    return Watch(host, SILENCE, since, lambda pid: f"s{pid}" if pid in live else None)


def add(store: Store, *ids: str, at: int = T0) -> None:
    for i in ids:
        store.ingest(INBOX, "slack", i, {"text": i}, at)


# -- the store -------------------------------------------------------------------------------


def test_a_lease_held_by_a_dead_process_is_granted_to_another_at_once(store: Store) -> None:
    b = twin(store)
    dead = register(store, 111)
    register(b, 222)
    assert store.acquire(INBOX, "worker-a", T0) == 1
    assert store.lease_process(INBOX, T0) == dead
    assert b.acquire(INBOX, "worker-b", T0 + 1) is None  # held, 119 s of TTL left
    [reaped] = b.reap(watch({222}), T0 + 1)  # pid 111 is gone from this host
    assert (reaped.process, reaped.leases, reaped.why) == (dead, 1, "its process has ended")
    assert b.acquire(INBOX, "worker-b", T0 + 1) == 2  # at once, and the next generation
    assert [p.pid for p in b.processes()] == [222]
    assert b.reap(watch({222}), T0 + 2) == []  # nothing left to reap: said once


def test_a_lease_held_by_a_live_process_is_kept_for_its_whole_ttl(store: Store) -> None:
    b = twin(store)
    register(store, 111)  # then never beats again: a long tool call, on this host
    register(b, 222)
    assert store.acquire(INBOX, "worker-a", T0) == 1
    for now in (T0 + 1, T0 + 60, T0 + 119):
        assert b.reap(watch({111, 222}), now) == []
        assert b.acquire(INBOX, "worker-b", now) is None
    assert b.acquire(INBOX, "worker-b", T0 + 120) == 2  # the TTL, as before


def test_a_process_elsewhere_is_dead_after_three_silent_heartbeats(store: Store) -> None:
    b = twin(store)
    far = register(store, 111, host=ELSEWHERE)
    register(b, 222)
    assert store.acquire(INBOX, "worker-a", T0) == 1
    assert store.beat(far.id, T0 + 2)
    # Its pid means nothing here (pid 111 does not run on this host): only silence counts.
    assert b.reap(watch({222}), T0 + 2 + SILENCE) == []
    assert b.acquire(INBOX, "worker-b", T0 + 2 + SILENCE) is None
    [reaped] = b.reap(watch({222}), T0 + 3 + SILENCE)
    assert reaped.leases == 1 and reaped.why == f"silent for {SILENCE + 1} s"
    assert b.acquire(INBOX, "worker-b", T0 + 3 + SILENCE) == 2


def test_a_stalled_holder_that_wakes_up_after_the_takeover_is_fenced(store: Store) -> None:
    b = twin(store)
    stalled = register(store, 111, host=ELSEWHERE)
    register(b, 222)
    add(store, "E1")
    mine = store.acquire_and_claim(INBOX, "worker-a", T0)
    assert mine is not None and len(mine.events) == 1
    later = T0 + SILENCE + 1
    [reaped] = b.reap(watch({222}), later)  # silent since T0: dead
    assert reaped.process == stalled and reaped.leases == 1
    # Its run's events are due at once (not after the backoff their claim fixed, 10 s),
    # their attempt counted, under the next generation.
    theirs = b.acquire_and_claim(INBOX, "worker-b", later)
    assert theirs is not None and theirs.gen == 2 and theirs.ids == mine.ids
    assert [e.attempts for e in theirs.events] == [2]
    # The stalled process wakes: its finish is refused by the generation, as after a TTL ...
    assert not store.finish(mine, Effects(messages=[Post("D1", "late")]), later + 1)
    assert store.outbox(inbox=INBOX) == []
    # ... and its heartbeat finds its row gone: it registers again, as itself.
    assert not store.beat(stalled.id, later + 1)
    register(store, 111, host=ELSEWHERE, at=later + 1)
    assert b.finish(theirs, Effects(messages=[Post("D1", "on time")]), later + 2)
    assert [r.text for r in store.outbox(inbox=INBOX)] == ["on time"]
    assert sorted(p.pid for p in b.processes()) == [111, 222]


def test_silence_counts_from_when_the_watcher_could_see(store: Store) -> None:
    # The store came back to every host at T0 + 60: one silent through the outage is given
    # three heartbeats from then, not judged by the outage.
    b = twin(store)
    register(store, 111, host=ELSEWHERE)
    register(b, 222)
    assert store.acquire(INBOX, "worker-a", T0) == 1
    back = T0 + 60
    assert b.reap(watch({222}, since=back), back) == []
    assert b.reap(watch({222}, since=back), back + SILENCE) == []
    [reaped] = b.reap(watch({222}, since=back), back + SILENCE + 1)
    assert reaped.leases == 1


def test_a_process_that_beat_since_it_was_read_is_left_alone(store: Store) -> None:
    b = twin(store)
    far = register(store, 111, host=ELSEWHERE)
    register(b, 222)
    assert store.acquire(INBOX, "worker-a", T0) == 1

    class BeatsMeanwhile(Watch):
        """Judges from the rows read before: meanwhile, the process beats."""

        def judge(self, p: ProcessRecord, now: int) -> Verdict:
            store.beat(far.id, now)
            return super().judge(p, now)

    late = T0 + SILENCE + 1
    assert b.reap(BeatsMeanwhile(HERE, SILENCE, T0 - 600, lambda pid: None), late) == []
    assert b.acquire(INBOX, "worker-b", late) is None
    assert [p.seen_at for p in b.processes() if p.pid == 111] == [late]


def test_two_processes_reaping_the_same_dead_one_take_its_leases_once(store: Store) -> None:
    dead = register(store, 111)
    for n in range(5):
        store.acquire(f"T1:U{n}", "worker-a", T0)
    reapers = [twin(store) for _ in range(4)]
    for n, r in enumerate(reapers):
        register(r, 300 + n)
    gate = threading.Barrier(len(reapers))
    found: list[int] = []

    def reap(r: Store) -> None:
        gate.wait()
        found.extend(x.leases for x in r.reap(watch(set(range(300, 304))), T0 + 1))

    threads = [threading.Thread(target=reap, args=(r,)) for r in reapers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert found == [5], f"{dead.name} was reaped {len(found)} times: {found}"


def test_this_process_is_never_judged_by_itself(store: Store) -> None:
    me = register(store, 111)
    assert store.acquire(INBOX, "worker-a", T0) == 1
    assert store.reap(watch(set()), T0 + 3600) == []  # its own pid "gone", silent an hour
    assert store.processes() == [me]


def test_a_clean_stop_forgets_the_process_and_frees_what_it_still_holds(store: Store) -> None:
    b = twin(store)
    me = register(store, 111)
    assert store.acquire(INBOX, "worker-a", T0) == 1
    assert store.acquire("T1:U2", "worker-a", T0) == 1
    assert store.release("T1:U2", "worker-a", 1, T0 + 1)  # ended its run: not counted
    assert store.forget(me.id, T0 + 2) == 1
    assert store.processes() == []
    assert b.acquire(INBOX, "worker-b", T0 + 2) == 2


def test_a_dead_process_s_run_is_due_at_once_with_its_attempt_counted(
    store: Store,
) -> None:
    b = twin(store)
    register(store, 111)
    register(b, 222)
    store.ingest(INBOX, "slack", "E1", {"text": "E1"}, T0)
    store.ingest("T1:U2", "slack", "E2", {"text": "E2"}, T0)
    assert store.acquire_and_claim(INBOX, "worker-a", T0) is not None
    store.process = None  # a lease of no process: it lapses by its TTL alone
    assert store.acquire_and_claim("T1:U2", "worker-a", T0) is not None
    [reaped] = b.reap(watch({222}), T0 + 1)
    assert reaped.leases == 1
    # The dead process's run due at once (not after the 10 s backoff its claim fixed), a
    # retry now: left for a claim of its own; the lease of no process is still held.
    ready = b.claim_inboxes([INBOX, "T1:U2"], "worker-b", T0 + 1)
    assert [(c.inbox, c.events, c.retry_next) for c in ready] == [(INBOX, (), True)]
    alone = b.acquire_and_claim(INBOX, "worker-b", T0 + 1)
    assert alone is not None and [e.attempts for e in alone.events] == [2]  # counted


def test_a_lease_without_a_process_lasts_its_ttl_whoever_dies(store: Store) -> None:
    # A store no process registered on (the tests' workers, `wakeful` commands) names none.
    b = twin(store)
    register(b, 222)
    assert store.acquire(INBOX, "worker-a", T0) == 1
    assert store.lease_process(INBOX, T0) is None
    assert b.reap(watch({222}), T0 + 100) == []
    assert b.acquire(INBOX, "worker-b", T0 + 100) is None


def test_an_ended_workspace_s_aside_lease_is_no_process_s(make_store: MakeStore) -> None:
    # A dead process's reap must not free an inbox held aside for an uninstalled workspace,
    # even when the process held that inbox's lease before.
    store = make_store()
    b = twin(store)
    register(store, 111)
    register(b, 222)
    assert store.acquire(INBOX, "worker-a", T0) == 1
    with store._tx() as tx:
        tx.run("set_inbox_aside", {"inbox": INBOX, "holder": "aside:T1", "until": T0 + 10**6})
    assert store.lease_process(INBOX, T0) is None
    [reaped] = b.reap(watch({222}), T0 + 1)
    assert reaped.leases == 0
    assert b.acquire(INBOX, "worker-b", T0 + 1) is None


# -- the heartbeat loop ----------------------------------------------------------------------


class Kicks:
    def __init__(self) -> None:
        self.count = 0

    def kick(self) -> None:
        self.count += 1


def heartbeat(
    store: Store,
    clock: ManualClock,
    pid: int,
    live: set[int],
    here: Host = HERE,
    wake_worker: Kicks | None = None,
    poll: float = 1.0,
) -> Heartbeat:
    """The heartbeat of process `pid` on `here`, whose pid check sees the pids in `live`."""
    return Heartbeat(
        store=store,
        clock=clock,
        poll=poll,
        role="worker",
        here=here,
        pid=pid,
        pid_start=lambda p: f"s{p}" if p in live else None,
        wake_worker=wake_worker or Kicks(),
    )


def test_the_heartbeat_takes_a_dead_process_s_leases_says_so_once_and_wakes_the_worker(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    clock, live, kicks = ManualClock(T0), {111, 222}, Kicks()
    a = heartbeat(store, clock, 111, live)
    a.start(T0)
    assert store.acquire(INBOX, "worker-a", T0) == 1
    assert store.acquire("T1:U2", "worker-a", T0) == 1
    b_store = twin(store)
    b = heartbeat(b_store, clock, 222, live, wake_worker=kicks)
    b.start(T0)
    assert kicks.count == 0
    live.discard(111)  # SIGKILL
    caplog.set_level(logging.INFO, "wakeful")
    b.tick(T0 + 2)
    b.tick(T0 + 4)
    said = [r for r in caplog.records if r.getMessage().startswith("took over")]
    assert [(r.levelno, r.getMessage()) for r in said] == [
        (
            logging.WARNING,
            "took over 2 inboxes from pid 111 on web-1 (worker), not alive since "
            "2023-11-14 22:13:20 UTC: its process has ended",
        )
    ]
    assert kicks.count == 1
    assert b_store.acquire(INBOX, "worker-b", T0 + 4) == 2


def test_a_restarted_process_takes_over_before_it_starts_its_loops(store: Store) -> None:
    clock, live = ManualClock(T0), {111}
    heartbeat(store, clock, 111, live).start(T0)
    assert store.acquire(INBOX, "worker-a", T0) == 1
    live.clear()  # killed; the new process runs as pid 112
    again = twin(store)
    heartbeat(again, ManualClock(T0 + 1), 112, {112}).start(T0 + 1)
    assert again.acquire(INBOX, "worker-b", T0 + 1) == 2


def test_a_process_found_reaped_after_a_stall_records_itself_again(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock(T0)
    stalled = heartbeat(store, clock, 111, set(), here=ELSEWHERE)
    stalled.start(T0)
    assert store.acquire(INBOX, "worker-a", T0) == 1
    other = twin(store)
    register(other, 222)
    assert [r.leases for r in other.reap(watch({222}), T0 + SILENCE + 1)] == [1]
    caplog.set_level(logging.WARNING, "wakeful")
    stalled.tick(T0 + SILENCE + 2)
    assert "was judged dead" in caplog.text
    [back] = [p for p in store.processes() if p.pid == 111]
    assert (back.id, back.started_at, back.seen_at) == (stalled.id, T0, T0 + SILENCE + 2)
    assert store.acquire("T1:U2", "worker-a", T0 + SILENCE + 2) == 1
    assert store.lease_process("T1:U2", T0 + SILENCE + 2) == back


class Outage:
    """Writes to a store refused between `begin` and `end`, as a real store refuses them
    (SQLite: another connection holds the write lock; PostgreSQL: the server's port refuses
    connections, through a loopback proxy)."""

    def __init__(self, backend: str, tmp_path: Path, stack: contextlib.ExitStack) -> None:
        self.lite: sqlite3.Connection | None = None
        self.proxy: TcpProxy | None = None
        if backend == "sqlite":
            db = tmp_path / "outage.db"
            self.store = open_store(db, busy_timeout_ms=200)
            self.lite = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
            stack.callback(self.lite.close)
        else:
            need_pg()
            seed = fresh_postgres(PG_DSN)
            stack.callback(seed.close)
            self.proxy = stack.enter_context(TcpProxy(("127.0.0.1", 5432)))
            host, port = self.proxy.address
            dsn = PG_DSN.replace("127.0.0.1:5432", f"{host}:{port}")
            schema = seed.db.schema  # type: ignore[attr-defined]
            self.store = open_store(dsn, schema=schema, pool_size=2, connect_timeout=1)
        stack.callback(self.store.close)

    def begin(self) -> None:
        if self.lite is not None:
            self.lite.execute("BEGIN IMMEDIATE")
        else:
            assert self.proxy is not None
            self.proxy.refuse()

    def end(self) -> None:
        if self.lite is not None:
            self.lite.execute("ROLLBACK")
        else:
            assert self.proxy is not None
            self.proxy.accept()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.pg)])
def outage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Outage]:
    with contextlib.ExitStack() as stack:
        yield Outage(request.param, tmp_path, stack)


def test_a_heartbeat_the_store_refuses_never_stops_its_process(
    outage: Outage, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "wakeful")
    store = outage.store
    beat = heartbeat(store, ManualClock(T0), 111, {111}, poll=0.05)
    outage.begin()
    beat.start(T0)  # refused: said, not raised
    assert "heartbeat: store unavailable at start-up" in caplog.text
    with pytest.raises(StoreUnavailable):
        beat.tick(T0 + 2)
    stop = threading.Event()
    loop = threading.Thread(target=beat.run, args=(stop,))
    loop.start()
    try:
        assert eventually(lambda: "Heartbeat: store unavailable" in caplog.text)
        outage.end()
        assert eventually(lambda: store_has(store, 111)), "never recorded once back"
        assert loop.is_alive(), "the heartbeat loop ended"
    finally:
        stop.set()
        loop.join(10)


def test_after_an_outage_others_get_three_heartbeats_to_come_back(outage: Outage) -> None:
    # The store went away for everyone: a process elsewhere, silent through the outage, is
    # not dead the moment this one's beats land again; it is once silent 3 heartbeats more.
    store = outage.store
    beat = heartbeat(store, ManualClock(T0), 111, {111})
    beat.start(T0)
    other = twin(store)
    far = register(other, 222, host=ELSEWHERE, at=T0)
    assert other.acquire(INBOX, "worker-b", T0) == 1
    outage.begin()
    with pytest.raises(StoreUnavailable):
        beat.tick(T0 + 2)
    outage.end()
    back = T0 + 60
    beat.tick(back)  # silent for 60 s, but this process could not see it for most of them
    beat.tick(back + SILENCE)
    assert [p.id for p in store.processes() if p.pid == 222] == [far.id]
    beat.tick(back + SILENCE + 1)
    assert [p.pid for p in store.processes()] == [111]
    assert store.acquire(INBOX, "worker-a", back + SILENCE + 1) == 2


def store_has(store: Store, pid: int) -> bool:
    try:
        return any(p.pid == pid for p in store.processes())
    except StoreUnavailable:
        return False


def eventually(predicate: Callable[[], bool], timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False
