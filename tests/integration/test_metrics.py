"""Metrics: counters move where events happen, gauges follow the store, a scrape is cheap.

Counters live in one in-process registry shared by every test, so each test reads them before
and after and asserts the difference. Gauges are read through the registry a `/metrics` scrape
uses, against the real store of each backend.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import T0
from tests.integration.test_sqlite_write_lock import write_locked
from tests.support.approvals import ApprovalRequest
from wakeful.bot.slack.sender import SlackSender, make_client
from wakeful.core import logs, metrics
from wakeful.core.clock import HostClock, ManualClock
from wakeful.core.dispatcher import Dispatcher
from wakeful.core.effects import Effects, Post, Timer
from wakeful.core.errors import StoreUnavailable
from wakeful.core.run import Run
from wakeful.core.store import Store, open_store
from wakeful.core.store.sqlite import SQLiteConnector
from wakeful.core.worker import Worker
from wakeful.devtools.emulator import SlackEmulator

MakeStore = Callable[..., Store]
INBOX = "T1:U1"


def counter(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


class Delta:
    """A counter's value now, to compare with later."""

    def __init__(self, name: str, **labels: str) -> None:
        self.name, self.labels = name, labels
        self.start = counter(name, **labels)

    @property
    def moved(self) -> float:
        return counter(self.name, **self.labels) - self.start


def gauge(store: Store, name: str, **labels: str) -> float | None:
    return metrics.registry_for(store).get_sample_value(name, labels)


# -- counters ----------------------------------------------------------------------------------


def test_ingest_counts_stored_duplicate_and_rejected_deliveries(store: Store) -> None:
    stored = Delta("wakeful_events_ingested_total", source="slack", outcome="stored")
    duplicate = Delta("wakeful_events_ingested_total", source="slack", outcome="duplicate")
    rejected = Delta("wakeful_events_ingested_total", source="slack", outcome="rejected")
    store.ingest(INBOX, "slack", "Ev1", {"text": "a"}, T0)
    store.ingest(INBOX, "slack", "Ev2", {"text": "b"}, T0)
    store.ingest(INBOX, "slack", "Ev1", {"text": "a"}, T0)  # Slack's retry
    with pytest.raises(ValueError):
        store.ingest(INBOX, "slack", "Ev3", {"text": "x" * 300_000}, T0)
    assert (stored.moved, duplicate.moved, rejected.moved) == (2, 1, 1)


def test_a_malformed_source_does_not_mint_a_series(store: Store) -> None:
    invalid = Delta("wakeful_events_ingested_total", source="invalid", outcome="rejected")
    with pytest.raises(ValueError):
        store.ingest(INBOX, "Weird Source!" * 3, "", {"text": "a"}, T0)
    assert invalid.moved == 1


class Scripted:
    """An agent whose run does what the test says: succeed, fail, or lose its lease."""

    def __init__(self, store: Store, behaviour: str, clock: ManualClock) -> None:
        self.store, self.behaviour, self.clock = store, behaviour, clock

    def run(self, run: Run) -> Effects:
        if self.behaviour == "fail":
            raise RuntimeError("the model is down")
        if self.behaviour == "stall":
            # The lease runs out mid-run and another worker takes the inbox over.
            self.clock.now += self.store.settings.lease_ttl + 1
            assert self.store.acquire_and_claim(run.inbox, "other", self.clock.now)
        return Effects(messages=[Post("D1", "done", priority="urgent")])


def worker(store: Store, behaviour: str, clock: ManualClock) -> Worker:
    return Worker(store=store, agent=Scripted(store, behaviour, clock), holder="W", clock=clock)


def test_runs_are_counted_by_outcome_with_their_duration(make_store: MakeStore) -> None:
    store = make_store(max_attempts=2, backoff_base=1)
    clock = ManualClock(T0)
    done = Delta("wakeful_runs_total", outcome="done")
    failed = Delta("wakeful_runs_total", outcome="failed")
    timed = Delta("wakeful_run_duration_seconds_count")
    first = Delta("wakeful_event_attempts_total", attempt="first")
    retry = Delta("wakeful_event_attempts_total", attempt="retry")
    exhausted = Delta("wakeful_events_dead_total", reason="exhausted")
    store.ingest(INBOX, "slack", "Ev1", {"text": "a"}, T0)
    assert worker(store, "fail", clock).tick(clock.now) == 1
    clock.now += 5
    assert worker(store, "fail", clock).tick(clock.now) == 1
    clock.now += 10
    store.ingest(INBOX, "slack", "Ev2", {"text": "b"}, clock.now)
    assert worker(store, "ok", clock).tick(clock.now) == 1  # Ev1 buried, Ev2 runs
    assert (failed.moved, done.moved, timed.moved) == (2, 1, 3)
    assert (first.moved, retry.moved, exhausted.moved) == (2, 1, 1)
    assert gauge(store, "wakeful_events", status="dead") == 1


def test_a_takeover_and_the_refused_finish_are_counted(store: Store) -> None:
    clock = ManualClock(T0)
    takeovers = Delta("wakeful_lease_takeovers_total")
    fenced = Delta("wakeful_finishes_fenced_total")
    fenced_runs = Delta("wakeful_runs_total", outcome="fenced")
    store.ingest(INBOX, "slack", "Ev1", {"text": "a"}, T0)
    assert worker(store, "stall", clock).tick(clock.now) == 0  # its finish was refused
    assert (takeovers.moved, fenced.moved, fenced_runs.moved) == (1, 1, 1)


def test_a_claim_that_rolls_back_counts_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A claim's transaction can fail at its end (a lock timeout, a dropped connection): the
    # takeover and the claimed attempts it saw were never stored, so no counter may move
    # (an alert on takeovers or dead letters would fire for nothing). The retry counts once.
    store.ingest(INBOX, "slack", "Ev1", {"text": "a"}, T0)
    first = store.acquire_and_claim(INBOX, "W1", T0)
    assert first is not None and first.events  # W1 stalls; its lease runs out
    later = T0 + store.settings.lease_ttl + 1
    takeovers = Delta("wakeful_lease_takeovers_total")
    retries = Delta("wakeful_event_attempts_total", attempt="retry")
    real = store._tx

    @contextmanager
    def failing_commit(write: bool = True, urgent: bool = False) -> Iterator[Any]:
        with real(write, urgent) as tx:
            yield tx
            raise StoreUnavailable("the commit failed")

    monkeypatch.setattr(store, "_tx", failing_commit)
    with pytest.raises(StoreUnavailable):
        store.acquire_and_claim(INBOX, "W2", later)  # a retry is claimed alone
    assert (takeovers.moved, retries.moved) == (0, 0)
    monkeypatch.undo()
    claim = store.acquire_and_claim(INBOX, "W2", later)
    assert claim is not None and claim.events[0].attempts == 2
    assert (takeovers.moved, retries.moved) == (1, 1)


def test_an_action_after_commit_runs_only_once_the_transaction_commits(store: Store) -> None:
    ran: list[str] = []
    with store.db.transaction() as tx:
        tx.after_commit(lambda: ran.append("committed"))
        assert ran == []
    assert ran == ["committed"]
    with pytest.raises(RuntimeError), store.db.transaction() as tx:
        tx.after_commit(lambda: ran.append("rolled back"))
        raise RuntimeError("boom")
    assert ran == ["committed"]


def test_an_agent_dead_letter_is_counted_apart_from_exhaustion(store: Store) -> None:
    by_agent = Delta("wakeful_events_dead_total", reason="agent")
    dead_runs = Delta("wakeful_runs_total", outcome="dead")
    store.ingest(INBOX, "slack", "Ev1", {"text": "a"}, T0)

    class Gives:
        def run(self, run: Run) -> Effects:
            return Effects(dead={e.id: "cannot do this" for e in run.events})

    w = Worker(store=store, agent=Gives(), holder="W", clock=HostClock(lambda: T0))
    assert w.tick(T0) == 1
    assert (by_agent.moved, dead_runs.moved) == (1, 1)


def test_approvals_and_timer_lateness_are_counted(store: Store) -> None:
    requested = Delta("wakeful_approvals_total", outcome="requested")
    yes = Delta("wakeful_approvals_total", outcome="yes")
    expired = Delta("wakeful_approvals_total", outcome="expired")
    late_sum = Delta("wakeful_timer_lateness_seconds_sum")
    late_count = Delta("wakeful_timer_lateness_seconds_count")
    store.ingest(INBOX, "slack", "Ev1", {"text": "a"}, T0)
    claim = store.acquire_and_claim(INBOX, "W", T0)
    assert claim is not None
    asks = [
        ApprovalRequest(id=rid, tool="refund_order", args={}, requester="U1", deadline=T0 + 60)
        for rid in ("R1", "R2")
    ]
    assert store.finish(claim, Effects(approvals=asks), T0, release=True)
    assert gauge(store, "wakeful_approvals_open") == 2
    assert store.answer("R1", "yes", "U1", T0 + 1).outcome == "yes"
    store.add_timer(INBOX, Timer.once("ping", T0 + 30), T0)
    store.fire_due_timers(T0 + 100)  # the ping is 70 s late; R2 expires 40 s late
    assert (requested.moved, yes.moved, expired.moved) == (2, 1, 1)
    assert (late_count.moved, late_sum.moved) == (1, 70)
    assert gauge(store, "wakeful_approvals_open") == 0


def test_timer_lateness_is_observed_only_once_its_firing_committed(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every metric waits for the commit: a firing rolled back (the store failed after the
    # occurrence was inserted) observes nothing, and its retry observes the occurrence once.
    late_count = Delta("wakeful_timer_lateness_seconds_count")
    store.add_timer(INBOX, Timer.once("ping", T0 + 30), T0)
    real = store.db.transaction

    @contextmanager
    def failing_at_commit(*args: Any, **kwargs: Any) -> Iterator[Any]:
        with real(*args, **kwargs) as tx:
            yield tx
            if args and args[0]:  # a write: the read that looks for due timers goes through
                raise StoreUnavailable("disk full at commit")

    monkeypatch.setattr(store.db, "transaction", failing_at_commit)
    with pytest.raises(StoreUnavailable):
        store.fire_due_timers(T0 + 100)
    assert late_count.moved == 0
    monkeypatch.setattr(store.db, "transaction", real)
    assert store.fire_due_timers(T0 + 100).fired == 1
    assert late_count.moved == 1


@pytest.fixture
def emulator() -> Iterator[SlackEmulator]:
    with SlackEmulator() as emu:
        yield emu


def test_sends_slack_errors_and_rate_limit_pauses_are_counted(
    store: Store, emulator: SlackEmulator
) -> None:
    clock = ManualClock(T0)
    sender = SlackSender(make_client(emulator.bot_token, emulator.api_url), sleep=lambda s: None)
    dispatcher = Dispatcher(store=store, sender=sender, clock=clock, concurrency=1)
    sent = Delta("wakeful_outbox_parts_total", kind="post", outcome="sent")
    retried = Delta("wakeful_outbox_parts_total", kind="post", outcome="retry")
    failed = Delta("wakeful_outbox_parts_total", kind="post", outcome="failed")
    rows = Delta("wakeful_outbox_rows_sent_total")
    limited = Delta(
        "wakeful_slack_api_errors_total", method="chat.postMessage", error="ratelimited"
    )
    gone = Delta(
        "wakeful_slack_api_errors_total", method="chat.postMessage", error="channel_not_found"
    )
    pauses = Delta("wakeful_dispatch_pauses_total")
    paused = Delta("wakeful_dispatch_paused_seconds_total")
    timed = Delta("wakeful_outbox_send_seconds_count")
    emulator.fault("chat.postMessage", status=429, error="ratelimited", retry_after=7)
    store.post(INBOX, [Post("C1", "one", priority="urgent")], T0)
    assert dispatcher.tick(clock.now) == 0
    assert gauge(store, "wakeful_outbox_rows", state="sending") == 1
    assert (limited.moved, pauses.moved, paused.moved, retried.moved) == (1, 1, 7, 1)
    clock.now += 9
    store.post(INBOX, [Post("C1", "two", priority="urgent")], clock.now)
    assert dispatcher.tick(clock.now) == 1  # the retried batch first
    assert dispatcher.tick(clock.now) == 1
    emulator.remove_channel("C2")
    store.post(INBOX, [Post("C2", "nowhere", priority="urgent")], clock.now)
    assert dispatcher.tick(clock.now) == 0
    assert (sent.moved, rows.moved, failed.moved, gone.moved, timed.moved) == (2, 2, 1, 1, 4)
    assert gauge(store, "wakeful_outbox_rows", state="parked") == 1


# -- gauges ------------------------------------------------------------------------------------


def test_the_gauges_follow_the_store(store: Store) -> None:
    assert gauge(store, "wakeful_store_up") == 1
    assert gauge(store, "wakeful_events", status="pending") == 0
    assert gauge(store, "wakeful_oldest_pending_event_age_seconds") == 0
    for i in range(3):
        store.ingest(f"T1:U{i}", "slack", f"Ev{i}", {"text": "a"}, T0 + i)
    store.post(INBOX, [Post("C1", "held by the gap")], T0)
    store.add_timer(INBOX, Timer.once("due", T0 + 5), T0)
    store.add_timer(INBOX, Timer.once("later", T0 + 10_000), T0)
    collector = metrics.StoreCollector(store, clock=lambda: T0 + 65)
    registry = metrics.CollectorRegistry()
    registry.register(collector)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("wakeful_events", status="pending") == 3
    assert value("wakeful_events", status="running") == 0
    assert value("wakeful_oldest_pending_event_age_seconds") == 65
    assert value("wakeful_outbox_rows", state="held") == 1
    assert value("wakeful_oldest_held_outbox_age_seconds") == 65
    assert value("wakeful_timers_due") == 1
    assert value("wakeful_oldest_due_timer_age_seconds") == 60
    claim = store.acquire_and_claim("T1:U0", "W", T0 + 65)
    assert claim is not None
    assert value("wakeful_events", status="running") == 1
    assert value("wakeful_events", status="pending") == 2
    assert value("wakeful_oldest_pending_event_age_seconds") == 64


def test_a_scrape_of_a_store_that_is_down_says_so_and_keeps_the_counters(tmp_path: Path) -> None:
    store = open_store(tmp_path / "gone.db")
    registry = metrics.registry_for(store)
    store.close()
    text = metrics.exposition(registry).decode()
    assert "wakeful_store_up 0.0" in text
    assert "wakeful_events_ingested_total" in text


def test_a_scrape_takes_no_write_lock(tmp_path: Path) -> None:
    """Another process holds SQLite's write lock: the scrape still answers, with the data."""
    setup = open_store(tmp_path / "locked.db")
    setup.ingest(INBOX, "slack", "Ev1", {"text": "a"}, T0)
    scraper = open_store(tmp_path / "locked.db", busy_timeout_ms=100)
    registry = metrics.registry_for(scraper)
    with write_locked(str(tmp_path / "locked.db")):
        text = metrics.exposition(registry).decode()
        with pytest.raises(Exception, match="locked"):
            scraper.ingest(INBOX, "slack", "Ev2", {"text": "b"}, T0)  # the lock is real
    assert "wakeful_store_up 1.0" in text
    assert 'wakeful_events{status="pending"} 1.0' in text
    scraper.close()
    setup.close()


# -- every read an operator makes is indexed ---------------------------------------------------

OPERATOR_READS = [
    "gauge_events",
    "gauge_outbox",
    "gauge_approvals",
    "gauge_timers",
    "inspect_backlog",
    "inspect_dead",
    "inspect_dead_events",
    "inspect_held_outbox",
    "inspect_parked_outbox",
    "inspect_open_approvals",
    "inspect_call_counts",
    "inspect_calls_waiting",
    "inspect_calls_failed",
    "inspect_next_timers",
    "inspect_inbox_events",
    "inspect_inbox_counts",
    "inspect_inbox_runs",
    "inspect_inbox_outbox",
    "inspect_inbox_timers",
    "inspect_inbox_approvals",
    # read before each model call of an agent with a spend budget (issue 34)
    "inbox_model_spend",
    "team_model_spend",
    # an agent's queries and an approver's lists, of one workspace (issue 34, items 1 and 2)
    "team_open_approvals",
    "team_open_approvals_first",
    "team_open_approvals_requested_by",
    "team_dead_events",
    "team_failed_outbox",
    "team_named_steps",
]
TABLES = ("events", "outbox", "approvals", "timers", "runs")


@pytest.mark.parametrize("name", OPERATOR_READS)
def test_every_scrape_and_inspect_read_searches_an_index(store: Store, name: str) -> None:
    params = {"now": T0, "limit": 20, "inbox": INBOX, "since": T0, "team": "T1"}
    params.update(prefix="T1:", n=3, tool="refund_order", user="U1", name="refund_order")
    if isinstance(store.db, SQLiteConnector):
        from wakeful.core.store.sqlite import _QUERIES

        conn = sqlite3.connect(store.db.path)
        plan = [str(r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + _QUERIES[name], params)]
        conn.close()
        # A scan of a table without an index walks its history; a scan of a partial index
        # (open rows, failed rows, open approvals) or of an ordered index with a LIMIT does not.
        assert not [d for d in plan if d in {f"SCAN {t}" for t in TABLES}], plan
        assert any(" USING " in d and "INDEX" in d for d in plan), plan
        return
    import psycopg

    from wakeful.core.store.postgres import _QUERIES as PG

    db = store.db
    options = f"-c search_path={db.schema}"  # type: ignore[attr-defined]
    with psycopg.connect(db.dsn, options=options) as conn, conn.transaction():  # type: ignore[attr-defined]
        conn.execute("SET LOCAL enable_seqscan = off")
        rows = conn.execute("EXPLAIN " + PG[name], params).fetchall()
    plan = " ".join(str(r[0]) for r in rows)
    assert not [t for t in TABLES if f"Seq Scan on {t}" in plan], plan
    assert "Index" in plan, plan


def test_every_line_a_run_logs_carries_its_inbox_events_generation_and_run_id(
    store: Store,
) -> None:
    seen: list[dict[str, object]] = []

    class Looks:
        def run(self, run: Run) -> Effects:
            seen.append(dict(logs.current()))
            return Effects()

    store.ingest(INBOX, "slack", "Ev1", {"text": "a"}, T0)
    store.ingest(INBOX, "slack", "Ev2", {"text": "b"}, T0)
    w = Worker(store=store, agent=Looks(), holder="W", clock=HostClock(lambda: T0))
    assert w.tick(T0) == 1
    (context,) = seen
    ids = [e.id for e in store.events(INBOX)]
    assert {k: context[k] for k in ("inbox", "events", "gen", "holder")} == {
        "inbox": INBOX,
        "events": ids,
        "gen": 1,
        "holder": "W",
    }
    assert len(str(context["run_id"])) == 12
    assert logs.current() == {}  # nothing leaks past the run


@pytest.mark.parametrize(
    ("url", "method"),
    [
        ("https://slack.com/api/chat.postMessage", "chat.postMessage"),
        ("https://slack.com/api/assistant.threads.setStatus", "assistant.threads.setStatus"),
        ("https://slack.com/api/", "unknown"),
        ("https://slack.com/api/x.y.z.w.v", "unknown"),
    ],
)
def test_a_refused_web_api_call_is_counted_under_its_method(url: str, method: str) -> None:
    # Slack's answer names no method; the call's URL does. Three-part names (the assistant
    # methods) are methods too, and nothing else may make a new series.
    from slack_sdk.errors import SlackApiError
    from slack_sdk.web.slack_response import SlackResponse

    from wakeful.bot.slack.sender import count_error

    refused = Delta("wakeful_slack_api_errors_total", method=method, error="invalid_arguments")
    response = SlackResponse(
        client=None,
        http_verb="POST",
        api_url=url,
        req_args={},
        data={"ok": False, "error": "invalid_arguments"},
        headers={},
        status_code=200,
    )
    count_error(SlackApiError("refused", response))
    assert refused.moved == 1
