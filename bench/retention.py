"""Pruning against ingest: retention must not move the ingest figures.

The worst case is measured: a store whose whole history has aged past the retention, drained
by a real Scheduler thread (batches of 500, at most a tenth of the time) while one caller
ingests; in alternating rounds against ingest on a store with the same history and no pruner.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from wakeful.core.clock import ManualClock
from wakeful.core.scheduler import Scheduler
from wakeful.core.settings import DAY
from wakeful.core.store import Store
from wakeful.devtools.audit import count_events

from .common import NOW, Figure


class Bench(Protocol):
    """What the pruning figure asks of engine.py's bench: its size, its voice, stores with
    history, and its paired ingest rounds."""

    quick: bool
    say: Callable[[str], None]

    def add(self, fig: Figure) -> Figure: ...
    def history_store(self, done: int, inboxes: int, age: int = 86400) -> Store: ...
    def ingest_round(self, store: Store, prefix: str) -> float: ...
    def paired(
        self, measure: Callable[[], float], baseline: Callable[[], float]
    ) -> tuple[float, float]: ...


AGED = 40 * DAY
"""How old the history is: past the 30-day default retention, so all of it is due."""


def measure_pruning(b: Bench) -> None:
    done, inboxes = (200_000, 1_000) if b.quick else (1_000_000, 10_000)
    b.say(f"  (building two stores with {done:,} done events aged {AGED // DAY} days)")
    pruned = b.history_store(done, inboxes, age=AGED)
    kept = b.history_store(done, inboxes, age=AGED)
    scheduler = Scheduler(store=pruned, clock=ManualClock(NOW), poll=0.05)
    stop = threading.Event()
    thread = threading.Thread(target=scheduler.run, args=(stop,), daemon=True)
    thread.start()
    time.sleep(0.5)  # the pruner is into its stride
    value, ratio = b.paired(lambda: b.ingest_round(pruned, "p"), lambda: b.ingest_round(kept, "k"))
    stop.set()
    thread.join(10)
    left = count_events(pruned, "done")
    pruned.close()
    kept.close()
    b.add(
        Figure(
            "ingest while retention drains an aged history",
            value,
            "events/s",
            ratio,
            "same history, no pruning",
            ">= 0.85x",
            ratio >= 0.85,
            f"{done - left:,} of {done:,} aged events pruned meanwhile",
        )
    )
