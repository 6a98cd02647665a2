"""Real concurrency on each backend: threads racing at a barrier, and worker processes."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import T0, MakeStore
from tests.support.procs import worker_cmd
from wakeful.core.effects import Post, Timer
from wakeful.core.store import Store
from wakeful.core.store.sqlite import SQLiteConnector
from wakeful.devtools.audit import count_events, overlapping_runs, runs

ROOT = Path(__file__).resolve().parents[2]


def race(n: int, fn: Callable[[int], Any]) -> list[Any]:
    """Run fn(i) on n threads released together by a barrier; return the results in order."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            barrier.wait()
            results[i] = fn(i)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    return results


def test_one_holder_per_generation_when_workers_race_for_a_lease(store: Store) -> None:
    for round_ in range(30):
        now = T0 + round_ * 1000  # every round starts with the previous lease expired
        gens = race(4, lambda i, now=now: store.acquire("T1:race", f"W{i}", now))
        winners = [g for g in gens if g is not None]
        assert len(winners) == 1, gens
        assert winners[0] == round_ + 1


def test_a_batch_is_claimed_by_exactly_one_racing_worker(store: Store) -> None:
    for i in range(5):
        store.ingest("T1:claim", "slack", f"E{i}", {"i": i}, T0)
    claims = race(4, lambda i: store.acquire_and_claim("T1:claim", f"W{i}", T0 + 1))
    claimed = [c for c in claims if c is not None and c.events]
    assert len(claimed) == 1
    assert sorted(e.source_id for e in claimed[0].events) == [f"E{i}" for i in range(5)]


def test_racing_schedulers_store_each_occurrence_once(store: Store) -> None:
    for u in range(20):
        store.add_timer(f"T1:U{u}", Timer.every("tick", 60, T0, {"u": u}), T0)
    results = race(4, lambda i: store.fire_due_timers(T0 + 3600))
    assert sum(r.fired for r in results) == 20
    assert count_events(store) == 20
    for u in range(20):
        (event,) = store.events(f"T1:U{u}")
        assert event.payload["skipped"] == 60  # 61 occurrences due, coalesced


def test_racing_dispatchers_never_claim_a_row_twice(store: Store) -> None:
    for d in range(30):
        store.post(f"T1:U{d}", [Post(f"C{d}", f"row {d}", priority="urgent")], T0)
    batches = race(4, lambda i: store.claim_batches(T0))
    rows = [rid for bs in batches for b in bs for p in b.parts for rid in p.row_ids]
    assert sorted(rows) == sorted(set(rows))
    assert len(rows) == 30


def test_worker_processes_finish_every_event_with_no_overlapping_runs(
    make_store: MakeStore,
) -> None:
    """4 worker processes, 200 inboxes: every event done, no two finished runs overlap."""
    store = make_store(lease_ttl=5)
    inboxes, per_inbox = 200, 3
    now = int(time.time())
    for u in range(inboxes):
        for i in range(per_inbox):
            store.ingest(f"T1:U{u}", "slack", f"E{u}-{i}", {"i": i}, now)
    if isinstance(store.db, SQLiteConnector):
        db, schema = store.db.path, None
    else:
        db, schema = store.db.dsn, store.db.schema  # type: ignore[attr-defined]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = []
    for w in range(4):
        cmd = worker_cmd(db, schema, f"proc-{w}")
        procs.append(
            subprocess.Popen(
                cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    try:
        deadline = time.monotonic() + 90
        total = inboxes * per_inbox
        while count_events(store, "done") < total and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        for p in procs:
            p.terminate()
        outputs = [p.communicate(timeout=30) for p in procs]
    assert count_events(store, "done") == inboxes * per_inbox, outputs[0][1][-2000:]
    assert all(p.returncode == 0 for p in procs), [o[1][-500:] for o in outputs]
    runs_by_inbox: dict[str, list[dict[str, Any]]] = {}
    for row in store.outbox():
        runs_by_inbox.setdefault(row.inbox, []).append(json.loads(row.text))

    log = runs(store)
    assert overlapping_runs(log) == []
    assert sorted(e for r in log for e in r.events) == list(range(1, inboxes * per_inbox + 1))
    holders = {r["holder"] for spans in runs_by_inbox.values() for r in spans}
    assert len(holders) >= 2, "the processes did not share the work"
    for inbox, spans in runs_by_inbox.items():
        spans.sort(key=lambda r: r["start"])
        seen: set[int] = set()
        for earlier, later in itertools.pairwise(spans):
            assert later["start"] >= earlier["end"], f"{inbox}: overlapping finished runs"
        for r in spans:
            assert not seen & set(r["events"]), f"{inbox}: an event finished twice"
            seen |= set(r["events"])
        assert len(seen) == per_inbox
