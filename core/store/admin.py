"""What an operator does by hand: list dead events and parked outbox rows, and give one of them
another go. Nothing here runs on its own."""

from __future__ import annotations

from wakeful.core.records import DeadLetters
from wakeful.core.store.base import StoreBase
from wakeful.core.store.rows import event_record, outbox_record


class Admin(StoreBase):
    def dead_letters(self, limit: int = 100) -> DeadLetters:
        """Dead events and failed outbox rows with their errors: a quiet agent's first clue."""
        with self._tx(write=False) as tx:
            events = [event_record(r) for r in tx.all("dead_events", {"limit": limit})]
            rows = [outbox_record(r) for r in tx.all("failed_outbox", {"limit": limit})]
        return DeadLetters(events=events, outbox=rows)

    def requeue_event(self, event_id: int, now: int) -> bool:
        """Give a dead event a fresh start (attempts reset)."""
        with self._tx() as tx:
            return tx.run("requeue_event", {"id": event_id, "now": now}) > 0

    def requeue_outbox(self, row_id: int, now: int) -> bool:
        """Send a failed outbox row again (attempts reset)."""
        with self._tx() as tx:
            return tx.run("requeue_outbox", {"id": row_id, "now": now}) > 0
