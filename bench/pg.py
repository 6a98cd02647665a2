"""PostgreSQL: run cycles per second with 1, 2 and 4 worker processes on one database."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from .common import Figure

ROOT = Path(__file__).resolve().parents[1]


def run_pg(dsn: str, quick: bool, say: Callable[[str], None] = print) -> list[Figure]:
    from tests.support.procs import worker_cmd
    from wakeful.devtools.stores import fresh_postgres

    figures: list[Figure] = []
    events = 300 if quick else 3000
    base: float | None = None
    for procs in (1, 2, 4):
        store = fresh_postgres(dsn)
        now = int(time.time())
        for i in range(events):
            store.ingest(f"T1:U{i}", "slack", f"E{i}", {"text": "hi"}, now)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        schema = str(store.db.schema)  # type: ignore[attr-defined]
        started = time.perf_counter()
        workers = [
            subprocess.Popen(
                worker_cmd(dsn, schema, f"bench-{w}", "--max-sleep", "0"),
                env=env,
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for w in range(procs)
        ]
        while store.count_events("done") < events:
            time.sleep(0.05)
        elapsed = time.perf_counter() - started
        for w in workers:
            w.terminate()
        for w in workers:
            w.wait(30)
        store.close()
        value = events / elapsed
        base = base or value
        fig = Figure(
            f"PostgreSQL run cycles, {procs} worker process(es)",
            value,
            "cycles/s",
            value / base,
            "1 process",
            note=f"{events} inboxes, one event each; includes process start-up",
        )
        say("  " + fig.row())
        figures.append(fig)
    return figures
