"""Dead-letter operations on both stores: discard and bulk requeue by inbox, error text, time
range and ids, a dry run that changes nothing, the audit; each attempt's error kept; runs with
outcome, run_id and ms; the command line's output and its refusals, by exact text."""

from __future__ import annotations

import getpass
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import T0, MakeStore
from tests.integration.test_metrics import Scripted
from tests.support.slack_app import pg_schema_url
from wakeful.agents import Agent, Message, Run
from wakeful.bot.commands.cli import main
from wakeful.core import logs, metrics
from wakeful.core.clock import ManualClock
from wakeful.core.effects import Effects
from wakeful.core.settings import Settings
from wakeful.core.store import Store, open_store
from wakeful.core.store.dead_letters import (
    TRACEBACK_BYTES,
    DeadFilter,
    bounded_traceback,
    split_error,
)
from wakeful.core.worker import Worker
from wakeful.devtools.audit import runs

A, B = "T1:U1", "T1:U2"
HOUR = 3600


def kill(store: Store, inbox: str, key: str, error: str, at: int) -> int:
    """Store an event and dead-letter it at `at` through the real claim and finish."""
    ingested = store.ingest(
        inbox, "slack", key, {"text": key, "token": "xoxb-1234567890-abcdef"}, at
    )
    assert ingested.event_id is not None
    [claim] = store.claim_inboxes([inbox], "op-test", at)
    assert store.finish(claim, Effects(dead={ingested.event_id: error}), at, release=True)
    return ingested.event_id


def seed(store: Store) -> dict[str, int]:
    """Five dead events: two inboxes, two kinds of error, died over four hours."""
    return {
        "a1": kill(store, A, "a1", "KeyError: 'the order book'", T0),
        "a2": kill(store, A, "a2", "TimeoutError: stripe did not answer", T0 + HOUR),
        "b1": kill(store, B, "b1", "KeyError: 'the order book'", T0 + 2 * HOUR),
        "b2": kill(store, B, "b2", "TimeoutError: stripe did not answer", T0 + 3 * HOUR),
        "b3": kill(store, B, "b3", "TimeoutError: stripe did not answer", T0 + 4 * HOUR),
    }


def statuses(store: Store, ids: dict[str, int]) -> dict[str, str]:
    return {k: e.status for k, i in ids.items() if (e := store.event(i)) is not None}


FILTERS = [
    (DeadFilter(inbox=A), {"a1", "a2"}),
    (DeadFilter(error="stripe"), {"a2", "b2", "b3"}),
    (DeadFilter(since=T0 + HOUR, until=T0 + 3 * HOUR), {"a2", "b1"}),
    (DeadFilter(inbox=B, error="KeyError"), {"b1"}),
    (DeadFilter(ids=(1, 3)), None),  # ids: resolved against the seeded ids below
]


@pytest.mark.parametrize("which, expected", FILTERS, ids=["inbox", "error", "time", "both", "ids"])
def test_discard_by_each_filter_touches_exactly_the_matching_dead_events(
    make_store: MakeStore, which: DeadFilter, expected: set[str] | None
) -> None:
    store = make_store()
    ids = seed(store)
    if expected is None:
        which, expected = DeadFilter(ids=(ids["a1"], ids["b3"])), {"a1", "b3"}
    preview = {int(r["id"]) for r in store.matching(which)}
    assert preview == {ids[k] for k in expected}
    assert set(statuses(store, ids).values()) == {"dead"}  # a dry run's read changed nothing

    op = store.operate("discard", which, "alice", T0 + 5 * HOUR, batch=1)  # a batch per event
    assert {t.id for t in op.touched} == preview
    after = statuses(store, ids)
    assert {k for k, s in after.items() if s == "discarded"} == expected
    assert {k for k, s in after.items() if s == "dead"} == set(ids) - expected
    gauges = store.gauges(T0 + 5 * HOUR)
    assert gauges.events["dead"] == len(ids) - len(expected)  # the alert counts only the rest
    kept = {int(r["id"]) for r in store.matching(DeadFilter(discarded=True))}
    assert kept == preview  # kept, not deleted, visible with the flag
    [audit] = store.operations()
    assert (audit["action"], audit["actor"], audit["touched"]) == (
        "discard",
        "alice",
        len(expected),
    )
    assert audit["at"] == T0 + 5 * HOUR
    assert json.loads(audit["filter"]) == json.loads(which.describe())


@pytest.mark.parametrize("which, expected", FILTERS[:4], ids=["inbox", "error", "time", "both"])
def test_bulk_requeue_by_each_filter_gives_the_matching_events_a_fresh_start(
    make_store: MakeStore, which: DeadFilter, expected: set[str]
) -> None:
    store = make_store()
    ids = seed(store)
    now = T0 + 5 * HOUR
    op = store.operate("requeue", which, "bob", now, batch=2)
    assert {t.id for t in op.touched} == {ids[k] for k in expected}
    for key in expected:
        event = store.event(ids[key])
        assert event is not None
        assert (event.status, event.attempts, event.error) == ("pending", 0, None)
    assert {k for k, s in statuses(store, ids).items() if s == "dead"} == set(ids) - expected
    assert store.operations()[0]["touched"] == len(expected)


def test_a_discarded_event_can_be_requeued_and_then_runs(make_store: MakeStore) -> None:
    store = make_store()
    ids = seed(store)
    store.operate("discard", DeadFilter(inbox=A), "alice", T0 + 5 * HOUR)
    op = store.operate("requeue", DeadFilter(inbox=A, discarded=True), "alice", T0 + 6 * HOUR)
    assert {t.id for t in op.touched} == {ids["a1"], ids["a2"]}
    assert [c.ids for c in store.claim_inboxes([A], "w", T0 + 6 * HOUR)] == [[ids["a1"], ids["a2"]]]
    assert [o["action"] for o in store.operations()] == ["requeue", "discard"]


# -- attempts and runs ---------------------------------------------------------------------------


class Broken(Agent):
    """Fails every run, noting the run_id its log lines carry."""

    def __init__(self) -> None:
        self.run_ids: list[str] = []

    def run(self, run: Run) -> None:
        self.run_ids.append(str(logs.current()["run_id"]))
        raise KeyError("the order book")


def test_each_attempt_keeps_its_error_and_the_run_log_its_outcome_run_id_and_ms(
    make_store: MakeStore,
) -> None:
    store = make_store(max_attempts=2)
    said = Message(text="refund 7", user="U1", team="T1", channel="D1", ts=f"{T0}.000100")
    event_id = store.ingest(A, "slack", "Ev1", said.to_wire(), T0).event_id
    assert event_id is not None
    clock, agent = ManualClock(T0), Broken()
    ms = iter(range(T0 * 1000, T0 * 1000 + 10**6, 250))  # each reading 250 ms after the last
    worker = Worker(store=store, clock=clock, agent=agent, wall_ms=lambda: next(ms))
    for _ in range(4):
        worker.tick(clock())
        clock.now += 1000
    assert store.event(event_id).status == "dead"  # type: ignore[union-attr]
    attempts = store.event_attempts(event_id)
    assert [(a.attempt, a.outcome, a.error_type, a.message) for a in attempts] == [
        (1, "failed", "KeyError", "'the order book'"),
        (2, "failed", "KeyError", "'the order book'"),
    ]
    assert all(a.traceback and 'raise KeyError("the order book")' in a.traceback for a in attempts)
    assert [a.run_id for a in attempts] == agent.run_ids  # the log's run_id is the row's
    with store.db.transaction(write=False) as tx:
        rows = tx.all("inbox_runs", {"inbox": A})
    assert [(r["outcome"], r["run_id"]) for r in rows] == [("failed", i) for i in agent.run_ids]
    assert [int(r["finished_ms"]) - int(r["started_ms"]) for r in rows] == [250, 250]
    assert [(r.outcome, r.run_id) for r in runs(store, A)] == [("failed", i) for i in agent.run_ids]


def test_a_fenced_run_keeps_its_attempt_though_its_finish_rolled_back(
    make_store: MakeStore,
) -> None:
    store = make_store()
    event_id = store.ingest(A, "slack", "Ev1", {"text": "a"}, T0).event_id
    assert event_id is not None
    clock = ManualClock(T0)
    worker = Worker(store=store, agent=Scripted(store, "stall", clock), holder="W", clock=clock)
    assert worker.tick(clock.now) == 0  # its finish was refused: another worker took over
    [attempt] = store.event_attempts(event_id)
    assert (attempt.attempt, attempt.outcome, attempt.error_type) == (1, "fenced", "LeaseLost")
    assert attempt.run_id and attempt.finished_ms >= attempt.started_ms
    assert runs(store, A) == []  # the run log holds finished runs only


def test_a_traceback_is_kept_bounded_with_its_end_and_a_marker() -> None:
    long = "Traceback (most recent call last):\n" + "  frame é\n" * 3000 + "KeyError: 'x'"
    kept = bounded_traceback(long)
    assert kept is not None and len(kept.encode("utf-8")) <= TRACEBACK_BYTES
    assert kept.startswith("(truncated)\n") and kept.endswith("KeyError: 'x'")
    assert bounded_traceback("short") == "short"
    assert split_error("KeyError: 'x'") == ("KeyError", "'x'")
    assert split_error("too many attempts") == (None, "too many attempts")


def test_retention_drops_a_done_events_attempts_and_keeps_a_dead_ones(
    make_store: MakeStore,
) -> None:
    store = make_store()
    dead = kill(store, A, "dead", "KeyError: 'x'", T0)
    healed = store.ingest(B, "slack", "healed", {"text": "y"}, T0).event_id
    assert healed is not None
    [claim] = store.claim_inboxes([B], "w", T0)
    assert store.finish(claim, Effects(failed={healed: "OSError: flaky"}), T0, release=True)
    retry = store.acquire_and_claim(B, "w", T0 + 100)  # a retry is claimed alone
    assert retry is not None and store.finish(retry, Effects(), T0 + 100, release=True)
    assert [a.outcome for a in store.event_attempts(healed)] == ["failed"]
    later = T0 + store.settings.retention + 200
    assert store.prune(later).counts["attempts"] == 1
    assert store.event_attempts(healed) == []
    assert [a.outcome for a in store.event_attempts(dead)] == ["dead"]
    assert store.prune(later).counts["attempts"] == 0


# -- metrics -------------------------------------------------------------------------------------


def scrape(store: Store) -> str:
    return metrics.exposition(metrics.registry_for(store)).decode()


def sample(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def test_schedule_to_start_is_observed_after_the_claim_commits(make_store: MakeStore) -> None:
    store = make_store()
    before = sample(scrape(store), "wakeful_schedule_to_start_seconds_count") or 0.0
    slow = sample(scrape(store), 'wakeful_schedule_to_start_seconds_bucket{le="30.0"}') or 0.0
    store.ingest(A, "slack", "Ev1", {"text": "x"}, T0)
    store.ingest(A, "slack", "Ev2", {"text": "y"}, T0 + 10)
    store.claim_inboxes([A], "w", T0 + 40)  # waited 40 s and 30 s
    text = scrape(store)
    assert sample(text, "wakeful_schedule_to_start_seconds_count") == before + 2
    assert sample(text, 'wakeful_schedule_to_start_seconds_bucket{le="30.0"}') == slow + 1


def test_the_sqlite_store_size_and_its_cap_in_metrics(tmp_path: Path) -> None:
    path = tmp_path / "sized.db"
    store = open_store(path, max_pages=5000)
    try:
        store.ingest(A, "slack", "Ev1", {"text": "x" * 10_000}, T0)
        text = scrape(store)
        on_disk = path.stat().st_size + Path(f"{path}-wal").stat().st_size
        assert sample(text, "wakeful_store_bytes") == on_disk
        assert sample(text, "wakeful_store_cap_bytes") == 5000 * 4096
    finally:
        store.close()


def test_the_postgres_store_size_has_no_cap(pg_required: str) -> None:
    with pg_schema_url() as dsn:
        store = open_store(dsn)
        try:
            text = scrape(store)
        finally:
            store.close()
    assert (sample(text, "wakeful_store_bytes") or 0) > 1_000_000
    assert sample(text, "wakeful_store_cap_bytes") is None


# -- the command line ----------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "dead.db")
    else:
        with pg_schema_url() as dsn:
            yield dsn


def cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, db: str, *args: str
) -> tuple[int, str, str]:
    monkeypatch.setenv("WAKEFUL_DB", db)
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def seeded(db: str) -> dict[str, int]:
    store = open_store(db)
    try:
        return seed(store)
    finally:
        store.close()


def test_the_dry_run_lists_exactly_what_discard_then_touches(
    db: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = seeded(db)
    code, out, _ = cli(
        capsys, monkeypatch, db, "dead-letters", "discard", "--error", "stripe", "--dry-run"
    )
    assert code == 0
    stripe = "attempts 1  error: TimeoutError: stripe did not answer"
    assert out.splitlines() == [
        "would discard 3 dead event(s) (dry run: nothing changed)",
        f"  event {ids['a2']}  inbox {A}  slack:a2  {stripe}",
        f"  event {ids['b2']}  inbox {B}  slack:b2  {stripe}",
        f"  event {ids['b3']}  inbox {B}  slack:b3  {stripe}",
    ]
    code, out, _ = cli(capsys, monkeypatch, db, "dead-letters", "discard", "--error", "stripe")
    who = getpass.getuser()
    assert code == 0
    assert out.splitlines()[0].startswith("discarded 3 dead event(s) in 2 inbox(es) (operation #")
    assert out.splitlines()[0].endswith(f" by {who})")
    assert out.splitlines()[1:] == [f"  {A}: 1", f"  {B}: 2"]
    code, out, _ = cli(capsys, monkeypatch, db, "dead-letters")
    assert out.splitlines()[0] == "dead events: 2"
    assert f"discard  3 event(s)  by {who}" in out
    assert '{"error": "stripe"}' in out
    code, out, _ = cli(capsys, monkeypatch, db, "dead-letters", "--discarded")
    assert out.splitlines()[0] == "discarded events: 3"


def test_listing_shows_the_payload_redacted_and_each_attempt(
    db: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = seeded(db)
    code, out, _ = cli(capsys, monkeypatch, db, "dead-letters", "--inbox", A)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "dead events: 2 (filtered)"
    assert lines[1] == (
        f"  event {ids['a1']}  inbox {A}  slack:a1  attempts 1  error: KeyError: 'the order book'"
    )
    assert lines[2] == '    payload: {"text": "a1", "token": "[redacted]"}'
    assert lines[3].startswith("    attempt 1  dead  run -  0ms  KeyError: 'the order book'")
    assert "xoxb-1234567890" not in out
    code, out, _ = cli(capsys, monkeypatch, db, "inspect", A, "--json")
    assert [d["payload"] for d in json.loads(out)["dead"]] == [  # newest first, as inspect lists
        {"text": "a2", "token": "[redacted]"},
        {"text": "a1", "token": "[redacted]"},
    ]


def test_inspect_shows_a_dead_events_payload_attempts_and_the_runs_outcome_and_run_id(
    db: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(db, Settings(max_attempts=1))
    try:
        said = Message(text="refund 7", user="U1", team="T1", channel="D1", ts=f"{T0}.000100")
        event_id = store.ingest(A, "slack", "Ev1", said.to_wire(), T0).event_id
        clock, agent = ManualClock(T0), Broken()
        ms = iter(range(T0 * 1000, T0 * 1000 + 10**6, 1250))
        worker = Worker(store=store, clock=clock, agent=agent, wall_ms=lambda: next(ms))
        worker.tick(clock())
    finally:
        store.close()
    code, out, _ = cli(capsys, monkeypatch, db, "inspect", A)
    assert code == 0
    [run_id] = agent.run_ids
    lines = out.splitlines()
    at = lines.index(f"dead event {event_id}")
    assert lines[at + 1].startswith('  payload: {"channel": "D1", ')
    assert lines[at + 2] == f"  attempt 1  failed  run {run_id}  1250ms  KeyError: 'the order book'"
    assert lines[at + 3] == "  last traceback (its last 10 lines):"
    code, out, _ = cli(capsys, monkeypatch, db, "inspect", A, "--json")
    [dead] = json.loads(out)["dead"]
    assert dead["payload"]["text"] == "refund 7"
    assert [a["run_id"] for a in dead["attempts"]] == [run_id]
    runs = lines.index("runs (latest 1, from the run log)")
    assert lines[runs + 1].split() == [
        "claimed",
        "outcome",
        "run_id",
        "took",
        "gen",
        "holder",
        "events",
    ]
    assert lines[runs + 2].split()[2:5] == ["failed", run_id, "1250ms"]  # after "1113d0h ago"


def test_requeue_by_time_range_and_the_single_id_form(
    db: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = seeded(db)
    since = "2023-11-14T23:13:20"  # T0 + 1h, as an ISO time in UTC
    code, out, _ = cli(
        capsys,
        monkeypatch,
        db,
        "requeue",
        "event",
        "--since",
        since,
        "--until",
        "2023-11-15T01:13:20",
    )
    assert code == 0, out
    assert out.splitlines() == [
        "requeued 2 dead event(s) in 2 inbox(es) (operation #1 by " + getpass.getuser() + ")",
        f"  {A}: 1",
        f"  {B}: 1",
    ]
    code, out, _ = cli(capsys, monkeypatch, db, "requeue", "event", str(ids["b3"]))
    assert (code, out) == (0, f"requeued event {ids['b3']}\n")
    code, _, err = cli(capsys, monkeypatch, db, "requeue", "event", str(ids["b3"]))
    assert (code, err) == (1, f"wakeful: no dead event with id {ids['b3']}\n")
    code, out, _ = cli(capsys, monkeypatch, db, "dead-letters", "requeue", "--since", "3000d")
    assert out.splitlines()[0].startswith("requeued 2 dead event(s) in 2 inbox(es)")  # a1, b2


def test_bad_filters_are_refused_saying_what_to_do(
    db: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seeded(db)
    assert cli(capsys, monkeypatch, db, "dead-letters", "discard")[1:] == (
        "",
        "wakeful: discard needs a filter (--inbox, --error, --since, --until or --id), or --all "
        "for every dead event; try --dry-run first to see what it would touch\n",
    )
    assert cli(capsys, monkeypatch, db, "dead-letters", "requeue", "--since", "yesterday")[2] == (
        "wakeful: --since must be an ISO time (2026-12-01T21:00, UTC unless it says) or a "
        "duration ago (90s, 15m, 2h, 30d), got 'yesterday'\n"
    )
    code, _, err = cli(
        capsys, monkeypatch, db, "dead-letters", "discard", "--since", "1h", "--until", "2h"
    )
    assert code == 2 and err.startswith("wakeful: --since (")
    assert "nothing can match; swap them" in err
    assert cli(capsys, monkeypatch, db, "dead-letters", "discard", "--inbox", "T9:U9") == (
        1,
        "",
        'wakeful: no dead event matched {"inbox": "T9:U9"}\n',
    )
    assert cli(capsys, monkeypatch, db, "requeue", "outbox", "4", "--inbox", A)[1:] == (
        "",
        "wakeful: requeue outbox takes one row's id and no filter (the filters are for events: "
        "wakeful requeue event --inbox ...)\n",
    )
    code, out, err = cli(capsys, monkeypatch, db, "dead-letters", "discard", "--all", "--dry-run")
    assert (code, out.splitlines()[0]) == (
        0,
        "would discard 5 dead event(s) (dry run: nothing changed)",
    )


def test_dead_letters_on_a_mistyped_path_creates_no_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "typo.db"
    code, _, err = cli(capsys, monkeypatch, str(missing), "dead-letters")
    assert code == 2 and not missing.exists()
    assert err.startswith("wakeful: ")
