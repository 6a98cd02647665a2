"""Checks over the run log, for tests, chaos runs and operators."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import pairwise

from wakeful.core.records import RunRecord


def overlapping_runs(runs: Iterable[RunRecord]) -> list[tuple[RunRecord, RunRecord]]:
    """Pairs of finished runs of one inbox whose claim-to-finish spans overlap.

    Claims and finishes take numbers from the inbox's lease sequence inside their transactions,
    so within an inbox the spans are totally ordered: a run that was claimed before the previous
    one finished overlapped it. Fencing promises this list is empty.
    """
    by_inbox: dict[str, list[RunRecord]] = {}
    for run in runs:
        by_inbox.setdefault(run.inbox, []).append(run)
    found: list[tuple[RunRecord, RunRecord]] = []
    for records in by_inbox.values():
        records.sort(key=lambda r: r.claim_seq)
        for earlier, later in pairwise(records):
            if later.claim_seq < earlier.finish_seq:
                found.append((earlier, later))
    return found
