"""What an agent may read of the store, and nothing it may write.

Agents never post, finish, requeue or write: everything they do is returned through their
run and written by the fenced finish. `Query` is the narrow window they get instead of the
store: the reads the built-in agents and the default Home tab need, each one indexed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from wakeful.core.inbox_id import InboxId
from wakeful.core.records import ApprovalState, DeadLetters, Event, StepRecord, TimerState

if TYPE_CHECKING:
    from wakeful.core.store import Store


@dataclass(frozen=True, slots=True)
class Query:
    """Read-only questions about the inboxes. Each call is one short read transaction."""

    _store: Store
    approvers: tuple[str, ...] = ()
    """WAKEFUL_APPROVERS: who may answer anyone's approvals."""

    def open_approvals(
        self, inbox: str | None = None, *, tool: str | None = None
    ) -> list[ApprovalState]:
        """Approvals nobody has answered yet: of one inbox (oldest first), or of every inbox
        (soonest deadline first), of one tool or all."""
        if inbox is None:
            return self._store.open_approvals(tool)
        return [
            a
            for a in self._store.approvals(inbox)
            if a.answer is None and (tool is None or a.tool == tool)
        ]

    def approvals_to_answer(self, user: str, limit: int = 20) -> list[ApprovalState]:
        """Open approvals `user` may answer, in any inbox: their own requests, or, for an
        approver, everyone's (soonest deadline first)."""
        return self._store.open_approvals_for(user, user in self.approvers, limit)

    def timers(self, inbox: str) -> list[TimerState]:
        """The inbox's timers with their next time (approval expiries included, named
        `approval:<id>`)."""
        return self._store.timers(inbox)

    def pending_events(self, inbox: str) -> list[Event]:
        """Events waiting for a run (pending or running), oldest first."""
        return self._store.events(inbox, "open")

    def dead_events(self, inbox: str) -> list[Event]:
        """Events of this inbox that were set aside after their attempts ran out."""
        return self._store.events(inbox, "dead")

    def dead_letters(self, limit: int = 10) -> DeadLetters:
        """Dead events and parked posts of every inbox (for an approver's eyes)."""
        return self._store.dead_letters(limit=limit)

    def deliveries(self, channel: str, since: int) -> dict[str, int]:
        """Webhook deliveries reported to `channel` since `since`, by source."""
        own = {"slack", "timer", "approval"}
        counts = self._store.source_counts(InboxId.conversation(channel), since)
        return {source: n for source, n in counts.items() if source not in own}

    def steps(
        self, inbox: str | None = None, name: str | None = None, limit: int = 20
    ) -> list[StepRecord]:
        """The latest recorded steps (newest first) of an inbox and/or a name: what the tools
        did."""
        return self._store.recorded_steps(inbox, name, limit)

    def approval(self, request_id: str) -> ApprovalState | None:
        """One approval by its request id, answered or not (None: no such request)."""
        return self._store.approval(request_id)

    def step(self, key: str) -> StepRecord | None:
        """The step recorded under `key` (an approval's request id, a `once` key), or None."""
        return self._store.recorded_step(key)
