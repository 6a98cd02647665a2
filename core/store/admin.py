"""What an operator does by hand: list dead events and parked outbox rows, and give one of them
another go. Nothing here runs on its own."""

from __future__ import annotations

from wakeful.core.records import DeadLetters, SetAsideSession
from wakeful.core.store.base import StoreBase, prefix_match
from wakeful.core.store.codec import event_record, outbox_record
from wakeful.core.tenancy import Workspace


class Admin(StoreBase):
    def dead_letters(self, limit: int = 100, scope: Workspace | None = None) -> DeadLetters:
        """Dead events and failed outbox rows with their errors: a quiet agent's first clue.
        Of every inbox, or of the inboxes of one workspace (`scope`), oldest first."""
        with self._tx(write=False) as tx:
            if scope is None:
                events = [event_record(r) for r in tx.all("dead_events", {"limit": limit})]
                rows = [outbox_record(r) for r in tx.all("failed_outbox", {"limit": limit})]
                return DeadLetters(events=events, outbox=rows)
            events, rows = [], []
            for prefix in scope.prefixes:
                params = {"limit": limit, **prefix_match(prefix)}
                events += [event_record(r) for r in tx.all("team_dead_events", params)]
                rows += [outbox_record(r) for r in tx.all("team_failed_outbox", params)]
        events.sort(key=lambda e: e.id)
        rows.sort(key=lambda r: r.id)
        return DeadLetters(events=events[:limit], outbox=rows[:limit])

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

    def requeue_event(self, event_id: int, now: int, scope: Workspace | None = None) -> bool:
        """Give a dead event a fresh start (attempts reset); `scope`: only one of that
        workspace's inboxes (an approver's Requeue, which covers their workspace alone)."""
        return self._requeue(("requeue_event", "team_requeue_event"), event_id, now, scope)

    def requeue_outbox(self, row_id: int, now: int, scope: Workspace | None = None) -> bool:
        """Send a failed outbox row again (attempts reset); `scope`: only one of that
        workspace's inboxes."""
        return self._requeue(("requeue_outbox", "team_requeue_outbox"), row_id, now, scope)

    def _requeue(
        self, names: tuple[str, str], row_id: int, now: int, scope: Workspace | None
    ) -> bool:
        """`names`: the statement for any row, and the one for a row of one workspace."""
        params = {"id": row_id, "now": now}
        anywhere, within = names
        with self._tx() as tx:
            if scope is None:
                return tx.run(anywhere, params) > 0
            return any(tx.run(within, {**params, **prefix_match(p)}) > 0 for p in scope.prefixes)
