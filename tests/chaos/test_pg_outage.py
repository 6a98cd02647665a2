"""PostgreSQL goes away under load. The front, three workers, the scheduler and the dispatcher
run as processes on one PostgreSQL store, reached through a loopback proxy, while Slack
traffic flows. The server terminates every wakeful connection (pg_terminate_backend) at random
moments, at least 30 times, and once the proxy refuses connections for 10 s, as a server that
is down does. No process is restarted: each must recover on its own (LISTEN too). The front
answers 503 while it cannot write, never 200 unstored; 0 lost, 0 duplicate posts, 0 overlapping
runs (tests/support/chaos.py checks them all)."""

from __future__ import annotations

import random
import threading
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from tests.chaos.test_crash_chaos import _assert_guarantees
from tests.conftest import PG_DSN
from tests.support.chaos import Figures, Fleet, Plan, run_chaos
from tests.support.tcp_proxy import TcpProxy
from wakeful.devtools.stores import fresh_postgres

pytestmark = pytest.mark.usefixtures("pg_required")
POOL = {"WAKEFUL_PG_POOL": "3"}
"""Three connections a process, not eight: the fleet's seven processes share the suite's
PostgreSQL (100 connections) with the tests running beside it."""


def outages(proxy: TcpProxy, application_name: str, outage: float) -> object:
    """The fault plan: terminate every wakeful connection every 0.3-1 s (each round that ended
    at least one counts), and once, a little way in, refuse connections for `outage` seconds."""

    def plan(fleet: Fleet, rng: random.Random, figures: Figures, stop: threading.Event) -> None:
        down_at = time.monotonic() + 4.0
        with psycopg.connect(PG_DSN, autocommit=True) as admin:
            while not stop.is_set():
                if down_at and time.monotonic() >= down_at:
                    proxy.refuse()
                    stop.wait(outage)
                    proxy.accept()
                    down_at = 0.0
                    print(f"  outage of {outage:.0f} s over, terminations so far {figures.kills}")
                    continue
                if stop.wait(rng.uniform(0.3, 1.0)):
                    return
                ended = admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = %s",
                    (application_name,),
                ).fetchall()
                if ended:
                    figures.kills += 1

    return plan


def _run(tmp_path: Path, plan: Plan, outage: float) -> Figures:
    store = fresh_postgres(PG_DSN)
    schema = store.db.schema  # type: ignore[attr-defined]
    name = f"wakeful-outage-{uuid.uuid4().hex[:8]}"
    try:
        with TcpProxy(("127.0.0.1", 5432)) as proxy:
            host, port = proxy.address
            dsn = PG_DSN.replace("127.0.0.1:5432", f"{host}:{port}")
            db = f"{dsn}?options=-csearch_path%3D{schema}&application_name={name}"
            figures = run_chaos(
                plan,
                store,
                db,
                tmp_path,
                "postgres",
                faults=outages(proxy, name, outage),  # type: ignore[arg-type]
                settings=POOL,
            )
    finally:
        store.close()
    print(figures.line("postgres outage") + f"  refused deliveries {figures.refused}")
    return figures


def test_short_postgres_outage(tmp_path: Path) -> None:
    plan = Plan(events=200, inboxes=20, min_kills=10, poison=1)
    figures = _run(tmp_path, plan, outage=4.0)
    _assert_guarantees(figures, plan)
    assert figures.refused > 0, "the front never had to refuse a delivery: no outage reached it"


@pytest.mark.chaos
def test_postgres_going_away_loses_nothing_and_every_process_recovers(tmp_path: Path) -> None:
    plan = Plan(events=600, inboxes=40, min_kills=30, poison=2, fork=False)
    figures = _run(tmp_path, plan, outage=10.0)
    _assert_guarantees(figures, plan)
    assert figures.refused > 0, "the front never had to refuse a delivery: no outage reached it"
