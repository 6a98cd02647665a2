"""Crash chaos: real processes SIGKILLed at random while Slack traffic flows (see
tests/support/chaos.py). The default run is short; `pytest -m chaos` runs the full size."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from tests.conftest import MakeStore
from tests.support.chaos import Faults, Figures, Plan, run_chaos, sigkills
from wakeful.core.store.sqlite import SQLiteConnector

LEASE = {"WAKEFUL_LEASE_TTL": "30"}
"""A killed process's leases end at once (its pid is gone, core/heartbeat.py), so none need
lapse; a short lease lapses under live workers on a loaded machine, and each lapse spends an
attempt the kills alone would not have: events died of too many attempts (issue 36)."""


def _run(
    make_store: MakeStore, tmp_path: Path, plan: Plan, faults: Faults = sigkills
) -> tuple[Figures, str]:
    store = make_store()
    if isinstance(store.db, SQLiteConnector):
        db, backend = store.db.path, "sqlite"
    else:
        schema = store.db.schema  # type: ignore[attr-defined]
        db = f"{store.db.dsn}?options=-csearch_path%3D{schema}"  # type: ignore[attr-defined]
        backend = "postgres"
    figures = run_chaos(plan, store, db, tmp_path, backend, faults, settings=LEASE)
    print(figures.line(backend))
    return figures, backend


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
    figures, _ = _run(make_store, tmp_path, plan, functools.partial(sigkills, every=(0.5, 2.0)))
    _assert_guarantees(figures, plan)


@pytest.mark.chaos
def test_full_crash_chaos(make_store: MakeStore, tmp_path: Path) -> None:
    plan = Plan(events=2000, inboxes=100, min_kills=50, poison=5, webhooks=400)
    figures, _ = _run(make_store, tmp_path, plan)
    _assert_guarantees(figures, plan)
