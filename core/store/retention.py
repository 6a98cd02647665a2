"""Retention: history does not grow forever.

Done events, sent outbox rows, run-log rows, the recorded attempts of done events, replay-only
steps (a model's recorded answer, kept for a retry), answered (or expired) approvals, and
threads the bot has not posted or been mentioned in since, and memory versions a newer one
followed (a document's newest stays), are deleted once older than
`settings.retention` (a reply in a forgotten thread needs a new @mention, as before the bot
took part), a batch at a time, each batch its own short transaction, oldest first through an
index on its age. What stays: everything open (pending and running events, unsent rows, open
approvals, timers, leases, sessions), dead and discarded events with their attempts, parked
rows (they wait for a person), sessions set aside, and the durable steps that record a side
effect (`steps`, the record that a refund happened). A done event is kept at least
`REDELIVERY_WINDOW` (4 days) whatever the setting, because its row is its dedupe key: a
redelivery inside that window is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from wakeful.core.store.base import StoreBase

PRUNE_BATCH = 500
"""Rows one pruning transaction deletes at most: short enough that an HTTP ingest waiting for
SQLite's write lock behind it waits a few milliseconds, not a second."""
PRUNES = {
    "events": "prune_events",
    "outbox": "prune_outbox",
    "runs": "prune_runs",
    "steps": "prune_steps",
    "approvals": "prune_approvals",
    "threads": "prune_threads",
    "memories": "prune_memories",
}
"""Each pruned table and the named statement that deletes one batch of it."""


@dataclass(frozen=True, slots=True)
class Pruned:
    """Rows one pass deleted, per table; `more` when some table had a full batch left."""

    counts: dict[str, int]

    @property
    def more(self) -> bool:
        return any(n >= PRUNE_BATCH for n in self.counts.values())

    @property
    def total(self) -> int:
        return sum(self.counts.values())


class Retention(StoreBase):
    def prune(self, now: int, batch: int = PRUNE_BATCH) -> Pruned:
        """Delete one batch of aged-out rows from each pruned table, a transaction each.

        A read-only look at each table's oldest row comes first: a pass with nothing old
        enough takes no write lock at all (it runs every minute on an idle store)."""
        cutoff = now - self.settings.retention
        with self._tx(write=False) as tx:
            row = tx.one("oldest_history")
        oldest = {} if row is None else {table: row[table] for table in PRUNES}
        counts = dict.fromkeys(PRUNES, 0)
        for table, statement in PRUNES.items():
            age = oldest.get(table)
            if age is None or int(age) >= cutoff:
                continue
            with self._tx() as tx:
                counts[table] = tx.run(statement, {"cutoff": cutoff, "batch": batch})
        counts["attempts"] = self._prune_attempts(cutoff, batch)
        return Pruned(counts)

    def _prune_attempts(self, cutoff: int, batch: int) -> int:
        """Attempts go with their event: once it is done (or pruned) and they are older than
        the retention; a dead or discarded event keeps every one, as it keeps itself."""
        with self._tx(write=False) as tx:
            row = tx.one("oldest_prunable_attempt")
        if row is None or int(row["at"]) >= cutoff * 1000:
            return 0
        with self._tx() as tx:
            return tx.run("prune_attempts", {"cutoff_ms": cutoff * 1000, "batch": batch})
