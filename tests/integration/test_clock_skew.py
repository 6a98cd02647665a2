"""Leases on one clock. With many hosts on PostgreSQL, each reading its own clock, a host whose
clock runs ahead sees a live lease as expired and takes it over while the holder still runs.
Every wakeful process on PostgreSQL therefore reads the time as the database server's
(core/clock.py ServerClock). Workers with host clocks 30 s behind, on time and 30 s ahead run
side by side; every run they make, finished or fenced, is logged with real start and end times
and no two runs of one inbox may overlap. The control run reads the skewed host clocks as they
are and shows the overlaps this check catches."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

from tests.conftest import need_pg
from tests.support.procs import worker_cmd
from wakeful.core.clock import ServerClock
from wakeful.core.settings import Settings
from wakeful.devtools.audit import count_events
from wakeful.devtools.stores import fresh_postgres

ROOT = Path(__file__).resolve().parents[2]
SKEWS = (-30.0, 0.0, 30.0)
INBOXES = 24
ENOUGH_RUNS = 50
"""Runs the fleet makes under traffic before the check (the sample no overlap may be in)."""
TRAFFIC_SECONDS = 30
"""Traffic stops once there are enough runs (the control: once an overlap shows), or then."""


def overlaps(runs_log: Path) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Pairs of runs of one inbox that were in flight at the same real moment."""
    by_inbox: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for run in logged_runs(runs_log):
        by_inbox[run["inbox"]].append(run)
    found = []
    for runs in by_inbox.values():
        runs.sort(key=lambda r: r["start"])
        for earlier, later in pairwise(runs):
            if later["start"] < earlier["end"]:
                found.append((earlier, later))
    return found


def logged_runs(runs_log: Path) -> list[dict[str, Any]]:
    """The runs logged so far (a line a worker is still writing is left for later)."""
    if not runs_log.exists():
        return []
    text = runs_log.read_text()
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]


def skewed_fleet(
    tmp_path: Path, clock: str, enough: Callable[[Path], bool], drain: bool = True
) -> tuple[Path, int, int]:
    """Three workers with skewed host clocks against one PostgreSQL store under steady traffic
    until `enough(runs_log)` (at most TRAFFIC_SECONDS); returns the runs log, the events sent
    and the events done (`drain`: once the fleet has done them all, or 30 s passed)."""
    dsn = need_pg("clock skew (it only matters across hosts)")
    store = fresh_postgres(dsn, Settings(lease_ttl=4))
    schema = str(store.db.schema)  # type: ignore[attr-defined]
    runs_log = tmp_path / f"runs-{clock}.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    options = ["--lease-ttl", "4", "--max-sleep", "0.6", "--runs-log", str(runs_log)]
    procs = [
        subprocess.Popen(
            worker_cmd(
                dsn, schema, f"skew{skew:+.0f}", *options, "--clock", clock, "--skew", str(skew)
            ),
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for skew in SKEWS
    ]
    sent = 0
    stop = threading.Event()

    def traffic() -> None:
        nonlocal sent
        while not stop.is_set():
            now = int(time.time())
            for u in range(INBOXES):
                store.ingest(f"T1:U{u}", "slack", f"E{sent}-{u}", {"n": sent}, now)
            sent += 1
            stop.wait(0.1)

    feeder = threading.Thread(target=traffic)
    try:
        feeder.start()
        deadline = time.monotonic() + TRAFFIC_SECONDS
        while not enough(runs_log) and time.monotonic() < deadline:
            time.sleep(0.2)
        stop.set()
        feeder.join()
        deadline = time.monotonic() + (30 if drain else 0)
        while count_events(store, "done") < sent * INBOXES and time.monotonic() < deadline:
            time.sleep(0.2)
        done = count_events(store, "done")
    finally:
        stop.set()
        for p in procs:
            p.terminate()
        errors = [p.communicate(timeout=30)[1] for p in procs]
        store.close()
    assert all(p.returncode == 0 for p in procs), [e[-800:] for e in errors]
    return runs_log, sent * INBOXES, done


def test_workers_with_skewed_clocks_never_run_one_inbox_at_once_on_the_server_clock(
    tmp_path: Path,
) -> None:
    runs_log, sent, done = skewed_fleet(
        tmp_path, "server", lambda log: len(logged_runs(log)) >= ENOUGH_RUNS
    )
    assert done == sent
    runs = len(runs_log.read_text().splitlines())
    print(
        f"clock skew, server clock: {runs} runs, {sent} events, {len(overlaps(runs_log))} overlaps"
    )
    assert runs >= ENOUGH_RUNS
    assert overlaps(runs_log) == []


def test_the_same_fleet_on_its_own_skewed_clocks_does_overlap(tmp_path: Path) -> None:
    # The control: without the server clock, the host 30 s ahead takes over live leases, and
    # the runs log shows it. If this ever finds nothing, the check above proves nothing.
    # What it leaves undone does not matter here: the overlap is the finding.
    runs_log, _, _ = skewed_fleet(tmp_path, "host", lambda log: bool(overlaps(log)), drain=False)
    runs = len(runs_log.read_text().splitlines())
    print(f"clock skew, host clocks: {runs} runs, {len(overlaps(runs_log))} overlaps")
    assert overlaps(runs_log), "skewed host clocks produced no overlapping runs"


def test_the_server_clock_follows_the_database_not_the_host() -> None:
    store = fresh_postgres(need_pg())
    try:
        ahead = ServerClock(store, host=lambda: time.time() + 3600)
        behind = ServerClock(store, host=lambda: time.time() - 3600)
        assert abs(ahead() - behind()) <= 1
        assert abs(ahead() - time.time()) <= 2  # this machine's clock is the server's
        assert abs(ahead.offset + 3600) < 1
    finally:
        store.close()
