"""The worker loop: a run per ready inbox, failures retried alone, fenced finish."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest

from tests.conftest import T0
from wakeful.core.clock import ManualClock
from wakeful.core.effects import Effects, Post
from wakeful.core.loops import Wakeup
from wakeful.core.run import Run
from wakeful.core.scheduler import Scheduler
from wakeful.core.store import Store
from wakeful.core.store.base import Connector, NewEvent
from wakeful.core.store.sql import Row, Tx
from wakeful.core.worker import Worker
from wakeful.devtools.audit import count_events


class EchoAgent:
    """Replies once per batch; raises on any event whose text is 'boom'."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def run(self, run: Run) -> Effects:
        texts = [e.payload["text"] for e in run.events]
        self.batches.append(texts)
        if "boom" in texts:
            raise RuntimeError("poison")
        run.heartbeat()
        effects = Effects(messages=[Post("D1", f"handled {len(texts)}", priority="urgent")])
        effects.set_session({"seen": (run.session or {}).get("seen", 0) + len(texts)})
        return effects


def test_worker_runs_each_ready_inbox_once_per_batch(store: Store) -> None:
    for u in range(3):
        for i in range(2):
            store.ingest(f"T1:U{u}", "slack", f"E{u}{i}", {"text": f"m{i}"}, T0)
    agent = EchoAgent()
    worker = Worker(store=store, clock=ManualClock(T0), agent=agent)
    assert worker.tick(T0) == 3
    assert agent.batches == [["m0", "m1"]] * 3
    assert count_events(store, "done") == 6
    assert [r.text for r in store.outbox(inbox="T1:U0")] == ["handled 2"]
    assert store.session("T1:U0") == {"seen": 2}
    assert worker.tick(T0) == 0  # nothing left


def test_a_failing_event_is_retried_alone_then_buried(store: Store) -> None:
    store.ingest("T1:U1", "slack", "bad", {"text": "boom"}, T0)
    store.ingest("T1:U1", "slack", "good", {"text": "fine"}, T0)
    clock = ManualClock(T0)
    agent = EchoAgent()
    worker = Worker(store=store, clock=clock, agent=agent)
    for _ in range(6):
        worker.tick(clock.now)
        clock.now += 1000  # past every backoff
    assert agent.batches[0] == ["boom", "fine"]
    # Every later batch holds one event: the poison never takes the healthy one down again.
    assert all(len(b) == 1 for b in agent.batches[1:])
    assert agent.batches.count(["boom"]) == 2 and agent.batches.count(["fine"]) == 1
    status = {e.source_id: (e.status, e.attempts) for e in store.events("T1:U1")}
    assert status == {"bad": ("dead", 3), "good": ("done", 2)}
    dead = store.events("T1:U1")[0]
    # Dead with the cause kept: the last error the agent raised, and where it raised it.
    assert dead.error == "too many attempts; last error: RuntimeError: poison"
    assert dead.traceback is not None and 'raise RuntimeError("poison")' in dead.traceback


class Killed(BaseException):
    """What a SIGKILL does to a worker, in process: it leaves at once, its claims held in
    the store, no finish and no give-back (the runner catches only Exception)."""


class KillingAgent(EchoAgent):
    """EchoAgent whose event 'kill' kills the worker running it; `held` says how many events
    the store had running (claimed, by the worker) at each death."""

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store, self.held = store, list[int]()

    def run(self, run: Run) -> Effects:
        if any(e.payload["text"] == "kill" for e in run.events):
            self.held.append(count_events(self.store, "running"))
            raise Killed()
        return super().run(run)


def test_an_event_that_kills_its_worker_dies_alone(store: Store) -> None:
    """Each worker here dies (as a process would, SIGKILLed by its own agent) holding a group
    of inboxes' claims. The poison event dies after three deaths; the others, whose attempt
    the first death spent, are each run once more, alone, and answered: no death spends their
    attempts again (it spent all three of each before)."""
    clock = ManualClock(T0)
    agent = KillingAgent(store)
    people = [f"T1:U{i}" for i in range(2, 8)]
    deaths = 0
    for life in range(5):
        worker = Worker(store=store, clock=clock, agent=agent, holder=f"w{life}")
        store.ingest(f"T1:W{life}", "slack", f"warm-{life}", {"text": "warm"}, clock.now)
        try:
            # A run alone first (the dead worker's leases still hold the rest): it sets the
            # worker's pace, fast, so ready inboxes then go in groups, one claim for all.
            worker.tick(clock.now)
            if life == 0:
                store.ingest("T1:U1", "slack", "poison", {"text": "kill"}, T0)
                for inbox in people:
                    store.ingest(inbox, "slack", f"m-{inbox}", {"text": "fine"}, T0)
            else:
                clock.now += store.settings.lease_ttl + 1  # the dead worker's leases lapse
            for _ in range(3):
                worker.tick(clock.now)
        except Killed:
            deaths += 1
    status = {e.inbox: (e.status, e.attempts) for i in ["T1:U1", *people] for e in store.events(i)}
    # The first death held the whole group; each later one the poison event alone.
    assert deaths == 3 and agent.held == [1 + len(people), 1, 1]
    assert status.pop("T1:U1") == ("dead", 3)
    assert status == dict.fromkeys(people, ("done", 2))
    assert all([r.text for r in store.outbox(inbox=i)] == ["handled 1"] for i in people)


def test_a_retry_runs_with_no_other_claim_held_and_held_batches_go_back_unspent(
    store: Store,
) -> None:
    """A worker that claimed an inbox's next batch ahead (a follower, for its next round)
    gives it back, its attempt unspent, before it runs a retried event: were the retry to kill
    the process, it would spend no other event's attempt."""
    clock = ManualClock(T0)
    ticks = iter(range(10**6))
    held: dict[str, int] = {}

    class Agent(EchoAgent):
        def run(self, run: Run) -> Effects:
            text = run.events[0].payload["text"]
            held[text] = count_events(store, "running")
            if text == "first":  # a second message arrives while the first runs
                store.ingest("T1:U1", "slack", "second", {"text": "second"}, T0)
            return super().run(run)

    store.ingest("T1:U9", "slack", "retried", {"text": "retried"}, T0)
    assert store.claim_inboxes(["T1:U9"], "dead-worker", T0)  # it dies holding it
    clock.now += store.settings.lease_ttl - 10  # its lease still holds
    store.ingest("T1:U1", "slack", "first", {"text": "first"}, clock.now)
    # Each look at the time a second later: the next batch a finish claims waits for the
    # next round instead of running in this one.
    worker = Worker(
        store=store, clock=clock, agent=Agent(), group=16, monotonic=lambda: float(next(ticks))
    )
    worker.tick(clock.now)  # "first" runs; "second", claimed by its finish, waits
    assert store.events("T1:U1")[1].status == "running"
    clock.now += 11  # the dead worker's lease lapses, not this one's of "second"
    worker.tick(clock.now)
    assert held["retried"] == 1  # its own event alone: "second", claimed ahead, went back
    second = next(e for e in store.events("T1:U1") if e.source_id == "second")
    assert (second.status, second.attempts) == ("pending", 0)
    worker.tick(clock.now)
    assert held["second"] == 1
    final = {
        e.source_id: (e.status, e.attempts) for i in ("T1:U1", "T1:U9") for e in store.events(i)
    }
    assert final == {"first": ("done", 1), "second": ("done", 1), "retried": ("done", 2)}


def test_scheduler_kicks_the_worker_wakeup(store: Store) -> None:
    from wakeful.core.effects import Timer

    store.add_timer("T1:U1", Timer.once("t", T0 + 5, {"text": "tick"}), T0)
    wakeup = Wakeup()
    scheduler = Scheduler(store=store, clock=ManualClock(T0), wake_worker=wakeup)
    assert scheduler.tick(T0) == 0
    assert not wakeup.wait(0)
    assert scheduler.tick(T0 + 5) == 1
    assert wakeup.wait(0)


# -- one run's failure is its own ------------------------------------------------------------


class _RefusingTx:
    """Runs statements on a real transaction, but makes the database refuse one inbox's
    replies: its outbox rows carry a priority the table's CHECK constraint refuses, so the
    finish fails in the store itself, on either backend, as content a store cannot hold does."""

    def __init__(self, tx: Tx, inbox: str) -> None:
        self._tx, self._inbox = tx, inbox

    def after_commit(self, action: Callable[[], None]) -> None:
        self._tx.after_commit(action)

    def run(self, name: str, params: Mapping[str, Any] | None = None) -> int:
        if name == "insert_outbox" and params and params.get("inbox") == self._inbox:
            params = {**params, "priority": "refused"}
        return self._tx.run(name, params)

    def one(self, name: str, params: Mapping[str, Any] | None = None) -> Row | None:
        return self._tx.one(name, params)

    def all(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        return self._tx.all(name, params)


class _RefusingConnector(Connector):
    """The store's own backend, with one inbox's replies refused (see _RefusingTx)."""

    def __init__(self, real: Connector, inbox: str) -> None:
        self.real, self.inbox, self.dialect = real, inbox, real.dialect

    @contextmanager
    def transaction(self, write: bool = True, urgent: bool = False) -> Iterator[Tx]:
        with self.real.transaction(write, urgent) as tx:
            yield _RefusingTx(tx, self.inbox)

    def store_event(self, event: NewEvent) -> int | None:
        return self.real.store_event(event)

    def close(self) -> None:
        """The fixture closes the real backend."""


def test_a_run_the_store_refuses_fails_alone_and_its_group_is_answered(store: Store) -> None:
    poison = "T1:U99"
    refusing = Store(_RefusingConnector(store.db, poison), store.settings, store.kinds)
    clock = ManualClock(T0)
    worker = Worker(store=refusing, clock=clock, agent=EchoAgent(), flush_after=60.0)
    store.ingest("T1:W", "slack", "warm", {"text": "warm"}, T0)
    assert worker.tick(T0) == 1  # one run to learn that runs are fast: they share a commit now
    users = [f"T1:U{i}" for i in range(15)]
    for inbox in [*users[:8], poison, *users[8:]]:
        store.ingest(inbox, "slack", f"E-{inbox}", {"text": "hello"}, T0)
    worker.tick(T0)
    # The 15 are answered at once, in the tick that ran them, though they shared a group.
    for inbox in users:
        assert [r.text for r in store.outbox(inbox=inbox)] == ["handled 1"], inbox
        assert [(e.status, e.attempts) for e in store.events(inbox)] == [("done", 1)]
    # The poison run alone failed, with the store's own error, and is retried as any failure.
    (ev,) = store.events(poison)
    assert (ev.status, ev.attempts) == ("pending", 1)
    assert ev.error is not None and "store error" in ev.error and "check" in ev.error.lower()
    for _ in range(4):
        clock.now += 1000  # past every backoff
        worker.tick(clock.now)
    (ev,) = store.events(poison)
    assert (ev.status, ev.attempts) == ("dead", store.settings.max_attempts)
    assert ev.error is not None and "store error" in ev.error and "check" in ev.error.lower()
    assert store.outbox(inbox=poison) == []
    assert count_events(store, "dead") == 1


# -- fair turns between inboxes ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("backlogs", "window", "into_run"),
    [(1, 0.0, 0.5), (3, 0.0, 0.5), (1, 0.5, 0.9)],
    ids=["one backlog", "three backlogs", "window half a run"],
)
def test_a_newly_ready_inbox_waits_at_most_two_runs_behind_a_backlog(
    store: Store, backlogs: int, window: float, into_run: float
) -> None:
    """1,000 messages in `backlogs` inboxes; `window` and `into_run` in run times: the batch
    window, and how far into one of the backlog's runs the other user writes (with a window,
    late enough that the window is not over when that run ends).

    The wait is counted in runs, by their order, not in wall seconds (a loaded machine
    stretches every commit): the other user waits for the run in progress and its own, and
    no run of the backlog may start between its arrival and its run."""
    run_time = 0.4  # slow next to a shared commit (flush_after), so runs go one at a time
    started: list[tuple[str, bool]] = []  # each run's inbox, and whether the other had arrived
    second, arrived = threading.Event(), threading.Event()

    class SlowAgent:
        def run(self, run: Run) -> Effects:
            started.append((run.inbox, arrived.is_set()))
            if len(started) == backlogs + 1:  # every backlog had a turn: now they take turns
                second.set()  # the other user writes `into_run` into this run, never after it
                assert arrived.wait(30), "the other user never wrote"
                time.sleep((1 - into_run) * run_time)
            else:
                time.sleep(run_time)
            return Effects(messages=[Post("D1", f"handled {len(run.events)}")])

    now = int(time.time())
    for i in range(1000):  # 20 batches of claim_cap (50)
        store.ingest(f"T1:BUSY{i % backlogs}", "slack", f"busy-{i}", {"text": f"m{i}"}, now)
    worker = Worker(store=store, agent=SlowAgent(), poll=0.05, batch_window=window * run_time)
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,))
    thread.start()
    try:
        assert second.wait(30), "the backlogs never got a second turn"
        time.sleep(into_run * run_time)  # where in the backlog's run the other user writes
        store.ingest("T1:OTHER", "slack", "other-1", {"text": "hi"}, int(time.time()))
        worker.wakeup.kick()  # as the front does after storing an event
        arrived.set()
        deadline = time.monotonic() + 60
        while store.events("T1:OTHER")[0].status != "done":
            assert time.monotonic() < deadline, "the other user was never answered"
            time.sleep(0.005)
    finally:
        stop.set()
        thread.join(30)
    inboxes = [inbox for inbox, _ in started]
    other = inboxes.index("T1:OTHER")
    after = [inbox for inbox, late in started[:other] if late]  # backlog runs it arrived before
    waited = 1 + len(after) + 1  # the run in progress, any backlog run after, its own
    assert waited <= 2, (
        f"the other user waited {waited} runs: behind {other} runs of the backlog, "
        f"{len(after)} of them started after it wrote"
    )
    assert [r.text for r in store.outbox(inbox="T1:OTHER")] == ["handled 1"]
