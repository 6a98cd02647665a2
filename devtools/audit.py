"""Audits of what the store holds (the run log, the event count), for tests, chaos runs and
the benchmarks: reads the engine itself never needs."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import pairwise

from wakeful.core.records import RunRecord
from wakeful.core.store import Store
from wakeful.core.store.codec import run_record


def runs(store: Store, inbox: str | None = None) -> list[RunRecord]:
    """The run log: every finished run (of one inbox, or all), ordered by its claim within
    each inbox. The engine writes it and never reads it back; tests, chaos runs and the
    benchmarks audit it."""
    with store.db.transaction(write=False) as tx:
        rows = tx.all("all_runs") if inbox is None else tx.all("inbox_runs", {"inbox": inbox})
    return [run_record(r) for r in rows]


def count_events(store: Store, status: str | None = None) -> int:
    """How many events the store holds (in one status, or all): the audits' total."""
    with store.db.transaction(write=False) as tx:
        row = tx.one("count_events", {"status": status})
    return int(row["n"]) if row else 0


def overlapping_runs(log: Iterable[RunRecord]) -> list[tuple[RunRecord, RunRecord]]:
    """Pairs of finished runs of one inbox whose claim-to-finish spans overlap.

    Claims and finishes take numbers from the inbox's lease sequence inside their transactions,
    so within an inbox the spans are totally ordered: a run that was claimed before the previous
    one finished overlapped it. Fencing promises this list is empty.
    """
    by_inbox: dict[str, list[RunRecord]] = {}
    for run in log:
        by_inbox.setdefault(run.inbox, []).append(run)
    found: list[tuple[RunRecord, RunRecord]] = []
    for records in by_inbox.values():
        records.sort(key=lambda r: r.claim_seq)
        for earlier, later in pairwise(records):
            if later.claim_seq < earlier.finish_seq:
                found.append((earlier, later))
    return found
