"""The worker loop: a run per ready inbox, failures retried alone, fenced finish."""

from __future__ import annotations

from tests.conftest import T0
from wakeful.core.agent import Run
from wakeful.core.clock import ManualClock
from wakeful.core.effects import Effects, Message
from wakeful.core.loops import Scheduler, Wakeup, Worker
from wakeful.core.store import Store


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
        effects = Effects(messages=[Message("D1", f"handled {len(texts)}", priority="urgent")])
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
    assert store.count_events("done") == 6
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
    assert dead.error == "too many attempts"


def test_scheduler_kicks_the_worker_wakeup(store: Store) -> None:
    from wakeful.core.effects import Timer

    store.add_timer("T1:U1", Timer.once("t", T0 + 5, {"text": "tick"}), T0)
    wakeup = Wakeup()
    scheduler = Scheduler(store=store, clock=ManualClock(T0), wake_worker=wakeup)
    assert scheduler.tick(T0) == 0
    assert not wakeup.wait(0)
    assert scheduler.tick(T0 + 5) == 1
    assert wakeup.wait(0)
