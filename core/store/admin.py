"""What an operator does by hand: list dead events and parked outbox rows, and give one of them
another go. Nothing here runs on its own."""

from __future__ import annotations

from wakeful.core.records import DeadLetters, SetAsideSession
from wakeful.core.store.base import StoreBase
from wakeful.core.store.codec import event_record, outbox_record


class Admin(StoreBase):
    def dead_letters(self, limit: int = 100) -> DeadLetters:
        """Dead events and failed outbox rows with their errors: a quiet agent's first clue."""
        with self._tx(write=False) as tx:
            events = [event_record(r) for r in tx.all("dead_events", {"limit": limit})]
            rows = [outbox_record(r) for r in tx.all("failed_outbox", {"limit": limit})]
        return DeadLetters(events=events, outbox=rows)

    def set_aside_sessions(
        self, inbox: str | None = None, limit: int = 100
    ) -> list[SetAsideSession]:
        """Sessions runs could not use, newest first: what the agent knew before it started
        over, for an operator to read or restore by hand."""
        with self._tx(write=False) as tx:
            rows = tx.all("set_aside_sessions", {"inbox": inbox, "limit": limit})
        return [
            SetAsideSession(
                id=int(r["id"]),
                inbox=str(r["inbox"]),
                state=str(r["state"]),
                reason=str(r["reason"]),
                set_aside_at=int(r["set_aside_at"]),
            )
            for r in rows
        ]

    def requeue_event(self, event_id: int, now: int) -> bool:
        """Give a dead event a fresh start (attempts reset)."""
        with self._tx() as tx:
            return tx.run("requeue_event", {"id": event_id, "now": now}) > 0

    def requeue_outbox(self, row_id: int, now: int) -> bool:
        """Send a failed outbox row again (attempts reset)."""
        with self._tx() as tx:
            return tx.run("requeue_outbox", {"id": row_id, "now": now}) > 0
