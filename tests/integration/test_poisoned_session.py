"""A poisoned session: a run that fails because of the inbox's saved state (not its events)
is retried like any failure, then its events are dead-lettered with a readable error, the
session is set aside for the operator (kept, not deleted), the person is told once, and the
inbox's next events run from a fresh session instead of dying one after another."""

from __future__ import annotations

import sqlite3
from typing import Any

from tests.conftest import T0
from tests.support.agents import refund_desk
from wakeful.bot.builtin.common import SESSION_RESET
from wakeful.core.clock import ManualClock
from wakeful.core.effects import Effects, Post
from wakeful.core.errors import SessionUnusable
from wakeful.core.events import Message
from wakeful.core.run import Run
from wakeful.core.store import Store
from wakeful.core.store.sqlite import SQLiteConnector
from wakeful.core.worker import Worker

INBOX = "T1:U1"


class PickyAgent:
    """Fails every run whose saved session says it is poisoned; otherwise saves a count."""

    def __init__(self) -> None:
        self.sessions: list[Any] = []

    def run(self, run: Run) -> Effects:
        self.sessions.append(run.session)
        if isinstance(run.session, dict) and run.session.get("poisoned"):
            raise SessionUnusable(
                "the model refused the saved history",
                Post("D1", "starting over", priority="urgent"),
            )
        fx = Effects(messages=[Post("D1", f"ok {len(run.events)}", priority="urgent")])
        fx.set_session({"seen": len(run.events)})
        return fx


def say(store: Store, key: str, text: str, at: int) -> None:
    said = Message(text=text, user="U1", team="T1", channel="D1", ts=f"{at}.1")
    assert store.ingest(INBOX, "slack", key, said.to_wire(), at).stored


def poison(store: Store, state: Any) -> None:
    """Save `state` as the inbox's session through a real (fenced) finish."""
    say(store, "setup", "setup", T0 - 100)
    claim = store.acquire_and_claim(INBOX, "setup", T0 - 100)
    assert claim is not None
    fx = Effects()
    fx.set_session(state)
    assert store.finish(claim, fx, T0 - 99, release=True)


def run_until_quiet(worker: Worker, clock: ManualClock, rounds: int = 8) -> None:
    for _ in range(rounds):
        worker.tick(clock.now)
        clock.now += 1000  # past every backoff


def test_a_poisoned_session_is_set_aside_after_the_attempts_and_the_inbox_goes_on(
    store: Store,
) -> None:
    poison(store, {"poisoned": True, "history": ["turn 1", "turn 2"]})
    say(store, "E1", "first", T0)
    clock = ManualClock(T0)
    agent = PickyAgent()
    worker = Worker(store=store, agent=agent, clock=clock)
    run_until_quiet(worker, clock)

    first = store.event_by_key("slack", "E1")
    assert first is not None and (first.status, first.attempts) == ("dead", 3)
    assert first.error == "session unusable: the model refused the saved history"
    (aside,) = store.set_aside_sessions(INBOX)
    assert '"history":["turn 1","turn 2"]' in aside.state  # kept whole for the operator
    assert aside.reason == "the model refused the saved history"
    assert store.session(INBOX) is None
    # The person was told exactly once, in the finish that gave up.
    assert [r.text for r in store.outbox(inbox=INBOX) if r.text == "starting over"] == [
        "starting over"
    ]

    # The next message runs from a fresh session and is handled.
    say(store, "E2", "second", clock.now)
    run_until_quiet(worker, clock)
    second = store.event_by_key("slack", "E2")
    assert second is not None and second.status == "done"
    assert agent.sessions[-1] is None
    assert store.session(INBOX) == {"seen": 1}
    assert len(store.set_aside_sessions(INBOX)) == 1


def test_events_that_arrive_while_the_session_is_failing_run_once_it_is_set_aside(
    store: Store,
) -> None:
    poison(store, {"poisoned": True})
    say(store, "E1", "first", T0)
    clock = ManualClock(T0)
    worker = Worker(store=store, agent=PickyAgent(), clock=clock)
    worker.tick(clock.now)  # attempt 1 of E1 fails
    say(store, "E2", "meanwhile", clock.now + 1)
    run_until_quiet(worker, clock)
    outcome = {e.source_id: (e.status, e.attempts) for e in store.events(INBOX)}
    # E2 failed on the bad session too while E1 waited out its backoffs; when E1 used up its
    # attempts and the session went aside, E2 got its attempts back and ran fresh, handled.
    assert outcome["E1"] == ("dead", 3)
    assert outcome["E2"] == ("done", 1)
    assert store.session(INBOX) == {"seen": 1}


def test_a_session_that_is_not_json_is_set_aside_like_any_unusable_state(
    store: Store,
) -> None:
    poison(store, {"fine": True})
    if not isinstance(store.db, SQLiteConnector):
        return _corrupt_postgres(store)
    conn = sqlite3.connect(store.db.path)
    conn.execute("UPDATE sessions SET state = '{not json' WHERE inbox = ?", (INBOX,))
    conn.commit()
    conn.close()
    _assert_corrupt_state_is_set_aside(store)


def _corrupt_postgres(store: Store) -> None:
    import psycopg

    db = store.db
    options = f"-c search_path={db.schema}"  # type: ignore[attr-defined]
    with psycopg.connect(db.dsn, options=options, autocommit=True) as conn:  # type: ignore[attr-defined]
        conn.execute("UPDATE sessions SET state = '{not json' WHERE inbox = %s", (INBOX,))
    _assert_corrupt_state_is_set_aside(store)


def _assert_corrupt_state_is_set_aside(store: Store) -> None:
    say(store, "E1", "first", T0)
    clock = ManualClock(T0)
    worker = Worker(store=store, agent=PickyAgent(), clock=clock)
    run_until_quiet(worker, clock)
    first = store.event_by_key("slack", "E1")
    assert first is not None and first.status == "dead"
    assert "not valid JSON" in (first.error or "")
    (aside,) = store.set_aside_sessions(INBOX)
    assert aside.state == "{not json"
    say(store, "E2", "second", clock.now)
    run_until_quiet(worker, clock)
    second = store.event_by_key("slack", "E2")
    assert second is not None and second.status == "done"


def test_refund_desk_sets_aside_a_state_it_cannot_decode_and_says_so_once(
    store: Store,
) -> None:
    poison(store, {"stats": {"messages": "many"}, "calls": {}})
    say(store, "E1", "status", T0)
    clock = ManualClock(T0)
    worker = Worker(store=store, agent=refund_desk(store), clock=clock)
    run_until_quiet(worker, clock)
    first = store.event_by_key("slack", "E1")
    assert first is not None and first.status == "dead"
    assert first.error == "session unusable: the saved digest counts are not numbers"
    told = [r for r in store.outbox(inbox=INBOX) if r.text.startswith("I had to start over")]
    assert [r.text for r in told] == [
        SESSION_RESET.format(reason="the saved digest counts are not numbers")
    ]
    assert told[0].channel == "D1" and told[0].priority == "urgent"
    say(store, "E2", "status", clock.now)
    run_until_quiet(worker, clock)
    second = store.event_by_key("slack", "E2")
    assert second is not None and second.status == "done"
    replies = [r.text for r in store.outbox(inbox=INBOX) if r.text.startswith("Handled 1")]
    assert len(replies) == 1 and "Status:" in replies[0]


def test_the_operator_sees_the_set_aside_session_in_dead_letters(store: Store) -> None:
    import os
    import subprocess
    import sys

    poison(store, {"poisoned": True})
    say(store, "E1", "first", T0)
    clock = ManualClock(T0)
    run_until_quiet(Worker(store=store, agent=PickyAgent(), clock=clock), clock)
    if isinstance(store.db, SQLiteConnector):
        db = store.db.path
    else:
        db = f"{store.db.dsn}?options=-csearch_path%3D{store.db.schema}"  # type: ignore[attr-defined]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAKEFUL_")}
    done = subprocess.run(
        [sys.executable, "-m", "wakeful.bot.commands.cli", "dead-letters", "--db", db],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "session unusable: the model refused the saved history" in done.stdout
    assert "sessions set aside: 1" in done.stdout
    assert f"inbox {INBOX}" in done.stdout and "reason: the model refused" in done.stdout
