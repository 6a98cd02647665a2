"""History that does not grow forever: what has aged past the retention is pruned in short
batches; what is open, dead, parked or set aside stays; a key outlives every redelivery."""

from __future__ import annotations

import sqlite3

import pytest

from tests.conftest import T0, MakeStore
from tests.support.approvals import ApprovalRequest
from wakeful.bot.process.config import Config, ConfigError
from wakeful.core.clock import ManualClock
from wakeful.core.effects import Effects, Post
from wakeful.core.errors import InvalidInput
from wakeful.core.scheduler import Scheduler
from wakeful.core.settings import DAY, REDELIVERY_WINDOW, Settings
from wakeful.core.store import Store
from wakeful.core.store.retention import PRUNE_BATCH
from wakeful.core.store.sqlite import _QUERIES, SQLiteConnector
from wakeful.devtools.audit import count_events, runs

RETENTION = 30 * DAY


def handle(store: Store, inbox: str, key: str, at: int, **effects: object) -> None:
    """Store one event and finish it (done) at `at`, with whatever effects are given."""
    assert store.ingest(inbox, "slack", key, {"text": key}, at).stored
    claim = store.acquire_and_claim(inbox, "W", at)
    assert claim is not None and len(claim.events) == 1
    assert store.finish(claim, Effects(**effects), at, release=True)  # type: ignore[arg-type]


def answered_approval(store: Store, inbox: str, rid: str, at: int) -> None:
    req = ApprovalRequest(rid, "refund_order", {"order_id": rid}, "U1", at + 600)
    handle(store, inbox, f"ask-{rid}", at, approvals=[req])
    assert store.answer(rid, "yes", "U1", at + 1).outcome == "yes"
    claim = store.acquire_and_claim(inbox, "W", at + 2)  # the answer event runs and is done
    assert claim is not None and [e.source for e in claim.events] == ["approval"]
    assert store.finish(claim, Effects(), at + 2, release=True)


def test_aged_history_is_pruned_and_everything_open_dead_or_parked_stays(
    store: Store,
) -> None:
    old, recent = T0, T0 + 20 * DAY
    handle(store, "T1:U1", "old", old, messages=[Post("D1", "old reply")])
    answered_approval(store, "T1:U1", "old-approval", old)
    store.post("T1:U1", [Post("D1", "old sent")], old)
    for batch in store.claim_batches(old):
        for part in batch.parts:
            store.mark_sent(part, "1.0", old)
    handle(store, "T1:U2", "recent", recent)
    # Kept whatever their age: a pending event, a dead one, a parked row, an open approval.
    assert store.ingest("T1:U3", "slack", "pending", {"text": "x"}, old).stored
    assert store.record_step("refund-old", "T1:U1", "refund_order", {}, True, old)
    # A model's recorded answer (replay-only) goes with the history; the refund's record stays.
    store.record_step("call-old", "T1:U1", "claude:call:0", None, {"a": 1}, old, replay=True)
    store.record_step("call-new", "T1:U2", "claude:call:0", None, {"a": 2}, recent, replay=True)
    open_req = ApprovalRequest("open-approval", "refund_order", {}, "U4", old + 10 * DAY)
    handle(store, "T1:U4", "asks", old, approvals=[open_req])
    store.post("T1:U5", [Post("C-gone", "never delivered")], old)
    (batch,) = [b for b in store.claim_batches(old) if b.channel == "C-gone"]
    store.fail_part(batch.parts[0], "channel_not_found", old)

    before = store.prune(old + RETENTION - 1)  # nothing is older than the retention yet
    assert before.total == 0
    pruned = store.prune(old + RETENTION + 5)
    # outbox: the old reply, the old approval's prompt and the old post, all sent
    assert pruned.counts == {
        "events": 4,
        "outbox": 3,
        "runs": 4,
        "steps": 1,
        "approvals": 1,
        "threads": 2,  # the old top-level posts' threads (a reply under one reaches the agent)
        "memories": 0,  # none written here (tests/integration/test_memory.py prunes them)
        "attempts": 0,
    }
    assert [e.source_id for e in store.events("T1:U1")] == []
    assert [e.source_id for e in store.events("T1:U2")] == ["recent"]
    assert [e.source_id for e in store.events("T1:U3")] == ["pending"]
    assert store.approval("old-approval") is None
    open_state = store.approval("open-approval")
    assert open_state is not None and open_state.answer is None
    assert [r.text for r in store.outbox(status="failed")] == ["never delivered"]
    assert sorted(c.key for c in store.recorded_steps()) == ["call-new", "refund-old"]
    assert [r.inbox for r in runs(store)] == ["T1:U2"]
    assert store.prune(old + RETENTION + 5).total == 0


def test_dead_events_are_never_pruned(make_store: MakeStore) -> None:
    store = make_store(max_attempts=1)
    assert store.ingest("T1:U1", "slack", "bad", {"text": "x"}, T0).stored
    claim = store.acquire_and_claim("T1:U1", "A", T0)
    assert claim is not None
    assert store.finish(claim, Effects(failed={claim.events[0].id: "boom"}), T0, release=True)
    assert store.acquire_and_claim("T1:U1", "B", T0 + 1000) is not None  # buries it
    assert [e.status for e in store.events("T1:U1")] == ["dead"]
    assert store.prune(T0 + 400 * DAY).counts["events"] == 0
    assert [e.status for e in store.events("T1:U1")] == ["dead"]


def test_a_redelivery_inside_the_window_is_refused_after_a_prune_pass(store: Store) -> None:
    handle(store, "T1:U1", "Evt-stripe-1", T0)
    store.prune(T0 + REDELIVERY_WINDOW - 1)
    assert store.ingest("T1:U1", "slack", "Evt-stripe-1", {"text": "again"}, T0 + 3 * DAY).duplicate


def test_pruning_goes_a_batch_per_transaction_and_the_scheduler_drains_a_backlog(
    store: Store,
) -> None:
    n = PRUNE_BATCH + 20
    for i in range(n):
        assert store.ingest(f"T1:U{i % 7}", "slack", f"E{i}", {"i": i}, T0).stored
    for u in range(7):
        claim = store.acquire_and_claim(f"T1:U{u}", "W", T0)
        while claim is not None and claim.events:
            _, claim = store.finish_and_claim(claim, Effects(), T0)
    later = T0 + RETENTION + 1
    mono = [100.0]

    def monotonic() -> float:  # each reading 10 ms after the previous one
        mono[0] += 0.01
        return mono[0]

    scheduler = Scheduler(store=store, clock=ManualClock(later), monotonic=monotonic)
    assert scheduler.tick(later) >= PRUNE_BATCH  # one batch per table per pass (and the runs)
    assert count_events(store, "done") == n - PRUNE_BATCH
    # More is left; the pass took 10 ms, so the next waits 90 ms (pruning keeps to 10%).
    assert scheduler.tick(later) == 0
    assert 0.05 < scheduler.idle_wait() <= 0.09
    mono[0] += 0.1
    assert scheduler.tick(later) == 20  # the rest
    assert scheduler.tick(later) == 0 and scheduler.idle_wait() == 1.0  # drained: poll
    assert count_events(store, "done") == 0
    assert store.prune(later).total == 0


def test_retention_below_the_redelivery_window_is_refused() -> None:
    with pytest.raises(InvalidInput, match="retention must be at least 345600 seconds"):
        Settings(retention=3 * DAY)
    with pytest.raises(ConfigError, match="WAKEFUL_RETENTION must be at least 4d"):
        Config.from_env({"WAKEFUL_RETENTION": "72h"})
    with pytest.raises(ConfigError, match=r"WAKEFUL_RETENTION must be a duration: 90 \(seconds\)"):
        Config.from_env({"WAKEFUL_RETENTION": "a month"})
    assert Config.from_env({"WAKEFUL_RETENTION": "90d"}).settings.retention == 90 * DAY
    assert Config.from_env({}).settings.retention == 30 * DAY


@pytest.mark.parametrize(
    ("statement", "index"),
    [
        ("prune_events", "events_done_age"),
        ("prune_outbox", "outbox_sent_age"),
        ("prune_runs", "runs_age"),
        ("prune_approvals", "approvals_answered_age"),
        ("prune_threads", "threads_age"),
        ("oldest_history", "events_done_age"),
        ("oldest_history", "threads_age"),
    ],
)
def test_each_prune_reads_its_age_index_not_the_history(
    store: Store, statement: str, index: str
) -> None:
    if isinstance(store.db, SQLiteConnector):
        conn = sqlite3.connect(store.db.path)
        plan = conn.execute(
            "EXPLAIN QUERY PLAN " + _QUERIES[statement], {"cutoff": T0, "batch": 10}
        ).fetchall()
        conn.close()
        details = " | ".join(str(r[3]) for r in plan)
        assert index in details, details
        assert all(f"SCAN {t}" not in details for t in ("events", "outbox", "threads")), details
        assert "events_status" not in details, details  # the index of every status, no
        return
    import psycopg

    from wakeful.core.store.postgres import _QUERIES as PG

    db = store.db
    options = f"-c search_path={db.schema}"  # type: ignore[attr-defined]
    with psycopg.connect(db.dsn, options=options) as conn:  # type: ignore[attr-defined]
        conn.execute("SET enable_seqscan = off")
        rows = conn.execute("EXPLAIN " + PG[statement], {"cutoff": T0, "batch": 10}).fetchall()
        conn.rollback()
    plan = " ".join(str(r[0]) for r in rows)
    assert index in plan, plan


def test_a_thread_the_bot_left_alone_past_the_retention_is_forgotten(store: Store) -> None:
    # A thread row lets replies reach the agent without an @mention. One the bot was last
    # mentioned in or posted in longer ago than the retention is pruned; each post or mention
    # renews it, so a thread still in use is never forgotten.
    old = T0
    store.remember_thread("C1", "100.1", "mentioned", old)
    store.remember_thread("C1", "200.2", "mentioned", old)
    store.remember_thread("C1", "200.2", "mentioned", old + 20 * DAY)  # mentioned again
    store.post("T1:U1", [Post("C1", "in a thread", thread_ts="300.3")], old)
    for batch in store.claim_batches(old):
        for part in batch.parts:
            store.mark_sent(part, "300.4", old)
    store.post("T1:U1", [Post("C1", "still going", thread_ts="300.3")], old + 25 * DAY)
    for batch in store.claim_batches(old + 25 * DAY):
        for part in batch.parts:
            store.mark_sent(part, "300.5", old + 25 * DAY)
    assert all(store.takes_part("C1", ts) for ts in ("100.1", "200.2", "300.3"))

    assert store.prune(old + RETENTION + 5).counts["threads"] == 1
    assert not store.takes_part("C1", "100.1")
    assert store.takes_part("C1", "200.2") and store.takes_part("C1", "300.3")
    assert store.prune(old + 25 * DAY + RETENTION + 5).counts["threads"] == 2
    assert not store.takes_part("C1", "200.2") and not store.takes_part("C1", "300.3")
