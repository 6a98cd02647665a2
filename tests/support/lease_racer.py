"""A process racing others for one lease, round after round (tests/integration/
test_process_races.py). A module of its own, importing no more than the store: each racer is
a process started from it, and importing the test module (pytest, the suite's conftest) was
most of what a racer cost."""

from __future__ import annotations

from typing import Any

from wakeful.core.store import Store, open_store


def open_racer_store(db: str, schema: str | None) -> Store:
    if db.startswith("postgresql://"):
        return open_store(db, schema=schema, pool_size=1)
    return open_store(db)


def race(
    db: str, schema: str | None, me: int, t0: int, rounds: int, barrier: Any, out: Any
) -> None:
    """Each round starts after the previous lease expired: everyone asks at the same instant.
    Puts (me, the generation granted or None, per round) on `out`."""
    store = open_racer_store(db, schema)
    results = []
    for r in range(rounds):
        barrier.wait()
        results.append(store.acquire("T1:race", f"P{me}", t0 + r * 1000))
    store.close()
    out.put((me, results))
