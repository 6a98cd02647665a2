"""PostgreSQL figures, side by side with procrastinate on the same server in the same run.

- ingest with 16 concurrent callers: group commit (one multi-row INSERT and one commit per
  batch) against the same store committing each event alone;
- events ingested and run to finish per second by 1 and 2 wakeful worker processes (runs that
  return no effects), against jobs deferred and completed per second by 1 and 2 procrastinate
  worker processes (a task that does nothing): one producer in this process, the workers
  already waiting, the clock running from the first insert to the last completion.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from wakeful.devtools.audit import count_events

from .common import Figure

ROOT = Path(__file__).resolve().parents[1]


def run_pg(dsn: str, quick: bool, say: Callable[[str], None] = print) -> list[Figure]:
    figures = [ingest_batching(dsn, quick, say)]
    try:
        import procrastinate  # noqa: F401
    except ImportError:
        say("  procrastinate not installed: peer skipped (pip install 'wakeful[bench]')")
        return figures
    n = 1000 if quick else 5000
    rounds = 1 if quick else 3
    ours: dict[int, float] = {}
    theirs: dict[int, float] = {}
    for procs in (1, 2):
        a, b = [], []
        for _ in range(rounds):  # alternate, so both see the same machine
            a.append(wakeful_throughput(dsn, procs, n))
            b.append(procrastinate_throughput(dsn, procs, n))
        ours[procs], theirs[procs] = statistics.median(a), statistics.median(b)
        ratio = ours[procs] / theirs[procs]
        fig = Figure(
            f"PostgreSQL ingest + run to finish, {procs} worker process(es)",
            ours[procs],
            "events/s",
            ratio,
            f"procrastinate ({theirs[procs]:,.0f} jobs/s)",
            ">= 1.0x",
            ratio >= 1.0,
            f"{n:,} events over {n:,} inboxes, one producer; median of {rounds}",
        )
        say("  " + fig.row())
        figures.append(fig)
    scale = ours[2] / ours[1]
    fig = Figure(
        "PostgreSQL, 2 worker processes against 1",
        ours[2],
        "events/s",
        scale,
        "1 process",
        ">= 1.7x",
        scale >= 1.7,
        f"procrastinate: {theirs[2] / theirs[1]:.2f}x; 2 cores shared with the server",
    )
    say("  " + fig.row())
    figures.append(fig)
    return figures


def ingest_batching(dsn: str, quick: bool, say: Callable[[str], None]) -> Figure:
    from wakeful.core.store.base import Connector
    from wakeful.devtools.stores import fresh_postgres

    callers, per = 16, (50 if quick else 300)
    store = fresh_postgres(dsn, pool_size=16)
    now = int(time.time())

    def run(insert: Callable[[tuple[str, str, str, str, int]], object], tag: str) -> float:
        barrier = threading.Barrier(callers)

        def caller(c: int) -> None:
            barrier.wait()
            for i in range(per):
                insert((f"T1:U{c}", "bench", f"{tag}-{c}-{i}", '{"n":1}', now))

        threads = [threading.Thread(target=caller, args=(c,)) for c in range(callers)]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return callers * per / (time.perf_counter() - started)

    batched, single = [], []
    for r in range(1 if quick else 3):
        batched.append(run(store.db.store_event, f"b{r}"))
        single.append(run(lambda ev: Connector.store_event(store.db, ev), f"s{r}"))
    store.close()
    value, base = statistics.median(batched), statistics.median(single)
    fig = Figure(
        "PostgreSQL ingest, 16 concurrent callers, group commit",
        value,
        "events/s",
        value / base,
        "one transaction per event",
        "> 1.0x",
        value > base,
        f"single-row transactions: {base:,.0f}/s",
    )
    say("  " + fig.row())
    return fig


def wakeful_throughput(dsn: str, procs: int, n: int) -> float:
    from tests.support.procs import worker_cmd
    from wakeful.devtools.stores import fresh_postgres

    store = fresh_postgres(dsn)
    schema = str(store.db.schema)  # type: ignore[attr-defined]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    workers = [
        subprocess.Popen(
            worker_cmd(dsn, schema, f"bench-{w}", "--noop"),
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for w in range(procs)
    ]
    try:
        for w in workers:
            assert w.stdout is not None and w.stdout.readline().strip() == "ready"
        now = int(time.time())
        started = time.perf_counter()
        for i in range(n):
            store.ingest(f"T1:U{i}", "bench", f"E{i}", {"n": i}, now)
        while count_events(store, "done") < n:
            time.sleep(0.01)
        return n / (time.perf_counter() - started)
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            w.wait(30)
        store.close()


def procrastinate_throughput(dsn: str, procs: int, n: int) -> float:
    import psycopg

    schema = f"procr_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PROCRASTINATE_DSN": dsn,
        "PROCRASTINATE_SCHEMA": schema,
    }
    from .peer_procrastinate import make_app

    app = make_app(dsn, schema)
    cmd = [sys.executable, "-m", "procrastinate", "--app=bench.peer_procrastinate.app"]
    workers: list[subprocess.Popen[bytes]] = []
    try:
        with app.open():
            app.schema_manager.apply_schema()
            workers = [
                subprocess.Popen(
                    [*cmd, "worker", "--concurrency", "1"],
                    env=env,
                    cwd=ROOT,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                for _ in range(procs)
            ]
            time.sleep(2.0)  # the workers are up and listening
            started = time.perf_counter()
            task = app.configure_task("noop")
            for i in range(n):
                task.defer(n=i)
            with psycopg.connect(dsn, autocommit=True) as conn:
                count = (
                    f"SELECT count(*) FROM {schema}.procrastinate_jobs WHERE status = 'succeeded'"
                )
                while conn.execute(count).fetchone()[0] < n:  # type: ignore[index]
                    time.sleep(0.01)
            return n / (time.perf_counter() - started)
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            w.wait(30)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
