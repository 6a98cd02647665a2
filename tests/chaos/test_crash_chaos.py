"""Crash chaos: real processes SIGKILLed at random while Slack traffic flows (see
tests/support/chaos.py). The default run is short; `pytest -m chaos` runs the full size. The
stream variants answer every person's message with a streamed reply and aim kills at each
point of a stream (tests/support/chaos_streams.py)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from tests.conftest import MakeStore
from tests.support.chaos import Faults, Figures, Plan, run_chaos, sigkills
from tests.support.chaos_streams import (
    BEFORE_START,
    BEFORE_STOP,
    MID_APPEND,
    StreamFigures,
    StreamKills,
    check_streams,
    stream_settings,
)
from wakeful.core.store.sqlite import SQLiteConnector
from wakeful.devtools.emulator import SlackEmulator

LEASE = {"WAKEFUL_LEASE_TTL": "30"}
"""A killed process's leases end at once (its pid is gone, core/heartbeat.py), so none need
lapse; a short lease lapses under live workers on a loaded machine, and each lapse spends an
attempt the kills alone would not have: events died of too many attempts (issue 36)."""


def _run(
    make_store: MakeStore,
    tmp_path: Path,
    plan: Plan,
    faults: Faults = sigkills,
    streams: StreamKills | None = None,
) -> tuple[Figures, str, StreamFigures | None]:
    """The run; with `streams` (the kill plan then), the agent streams and its replies are
    checked too."""
    store = make_store()
    if isinstance(store.db, SQLiteConnector):
        db, backend = store.db.path, "sqlite"
    else:
        schema = store.db.schema  # type: ignore[attr-defined]
        db = f"{store.db.dsn}?options=-csearch_path%3D{schema}"  # type: ignore[attr-defined]
        backend = "postgres"
    if streams is None:
        figures = run_chaos(plan, store, db, tmp_path, backend, faults, settings=LEASE)
        print(figures.line(backend))
        return figures, backend, None
    found: list[StreamFigures] = []

    def inspect(emu: SlackEmulator, acknowledged: list[str], poison_ids: set[str]) -> None:
        found.append(check_streams(store, emu, acknowledged, poison_ids, streams))

    env = {**LEASE, **stream_settings(streams.trace)}
    figures = run_chaos(plan, store, db, tmp_path, backend, streams, env, inspect)
    print(figures.line(backend))
    print(found[0].line(backend))
    for problem in found[0].problems:
        print(f"  {problem}")
    return figures, backend, found[0]


def _assert_guarantees(f: Figures, plan: Plan) -> None:
    assert f.problems == []
    assert f.events == plan.events, "the driver could not deliver every event"
    assert f.kills >= plan.min_kills
    assert f.lost == 0
    assert f.unexpected_dead == 0
    assert f.poisoned == plan.poison
    assert f.done + f.dead >= f.events
    assert f.duplicate_posts == 0
    assert f.overlapping_runs == 0
    assert f.double_answers == 0
    assert f.double_refunds == 0
    assert f.stripe_refunds > 0, "refunds went through Stripe and its gateway"
    assert f.confirmations_doubled == 0
    assert f.undelivered_rows == 0
    assert f.webhooks == plan.webhooks, "the driver could not deliver every webhook"
    assert f.webhooks_lost == 0
    assert f.webhook_lines_missing == 0
    assert f.webhook_lines_doubled == 0


def test_short_crash_chaos(make_store: MakeStore, tmp_path: Path) -> None:
    # The default run's smoke test of the same guarantees; a kill every 0.5 to 2 s (the full
    # run's: 0.2 to 1 s) restarts about half as many processes, each restart a Python start.
    plan = Plan(events=300, inboxes=30, min_kills=6, poison=2, webhooks=60)
    figures, _, _ = _run(make_store, tmp_path, plan, functools.partial(sigkills, every=(0.5, 2.0)))
    _assert_guarantees(figures, plan)


@pytest.mark.chaos
def test_full_crash_chaos(make_store: MakeStore, tmp_path: Path) -> None:
    plan = Plan(events=2000, inboxes=100, min_kills=50, poison=5, webhooks=400)
    figures, _, _ = _run(make_store, tmp_path, plan)
    _assert_guarantees(figures, plan)


def _assert_streams(f: StreamFigures, landed: tuple[str, ...]) -> None:
    """Per person's message one visible reply, whole; no stream left open; kills landed."""
    assert f.problems == []
    assert f.dangling == 0, "streams left open"
    assert f.half_replies == 0
    assert f.duplicate_replies == 0
    assert f.unanswered == 0
    assert f.misplaced == 0
    assert f.thread_posts == 0, "other posts in a person's message's thread"
    assert f.replies > 0 and f.answered > 0
    assert f.taken_back > 0, "no kill left a stream for a retry to take back"
    for kind in landed:
        assert f.kinds[kind] > 0, f"no kill landed {kind}"


@pytest.mark.chaos
class StreamCrashChaos:
    """The short run with streamed replies (issue 37), with `-m chaos` (the default run has
    tests/acceptance/test_claude_streams.py's kill at each point of a stream instead, on
    the suite's 4-minute budget). One class per store: each a test process's scope."""

    def test_short_stream_crash_chaos(self, make_store: MakeStore, tmp_path: Path) -> None:
        plan = Plan(events=90, inboxes=10, min_kills=5, poison=2, webhooks=20)
        kills = StreamKills(tmp_path / "streams.trace", every=(0.5, 1.2))
        figures, _, streamed = _run(make_store, tmp_path, plan, kills, kills)
        _assert_guarantees(figures, plan)
        assert streamed is not None
        _assert_streams(streamed, (MID_APPEND,))


@pytest.mark.parametrize("make_store", ["sqlite"], indirect=True)
class TestStreamCrashChaosSqlite(StreamCrashChaos):
    pass


@pytest.mark.parametrize("make_store", ["postgres"], indirect=True)
class TestStreamCrashChaosPostgres(StreamCrashChaos):
    pass


@pytest.mark.chaos
def test_full_stream_crash_chaos(make_store: MakeStore, tmp_path: Path) -> None:
    plan = Plan(events=2000, inboxes=100, min_kills=50, poison=5, webhooks=400)
    kills = StreamKills(tmp_path / "streams.trace")
    figures, _, streamed = _run(make_store, tmp_path, plan, kills, kills)
    _assert_guarantees(figures, plan)
    assert streamed is not None
    _assert_streams(streamed, (BEFORE_START, MID_APPEND, BEFORE_STOP))
