"""What an operator does by hand: list dead events and parked outbox rows, and give one of them
another go. Nothing here runs on its own."""

from __future__ import annotations

from collections.abc import Sequence

from wakeful.core.records import DeadLetters, SetAsideSession
from wakeful.core.store.base import StoreBase, team_match
from wakeful.core.store.codec import event_record, outbox_record


class Admin(StoreBase):
    def dead_letters(self, limit: int = 100, teams: Sequence[str] | None = None) -> DeadLetters:
        """Dead events and failed outbox rows with their errors: a quiet agent's first clue.
        Of every inbox, or (`teams`) of those workspaces' inboxes only, oldest first."""
        with self._tx(write=False) as tx:
            if teams is None:
                events = [event_record(r) for r in tx.all("dead_events", {"limit": limit})]
                rows = [outbox_record(r) for r in tx.all("failed_outbox", {"limit": limit})]
                return DeadLetters(events=events, outbox=rows)
            events, rows = [], []
            for team in teams:
                params = {"limit": limit, **team_match(team)}
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

    def requeue_event(self, event_id: int, now: int, team: str | None = None) -> bool:
        """Give a dead event a fresh start (attempts reset); `team`: only one of that
        workspace's inboxes (an approver's Requeue, which covers their workspace alone)."""
        params = {"id": event_id, "now": now}
        with self._tx() as tx:
            if team is None:
                return tx.run("requeue_event", params) > 0
            return tx.run("team_requeue_event", {**params, **team_match(team)}) > 0

    def requeue_outbox(self, row_id: int, now: int, team: str | None = None) -> bool:
        """Send a failed outbox row again (attempts reset); `team`: only one of that
        workspace's inboxes."""
        params = {"id": row_id, "now": now}
        with self._tx() as tx:
            if team is None:
                return tx.run("requeue_outbox", params) > 0
            return tx.run("team_requeue_outbox", {**params, **team_match(team)}) > 0
