"""What an agent may read of the store, and nothing it may write.

Agents never post, finish, requeue or write: everything they do is returned through their
run and written by the fenced finish. `Query` is the narrow window they get instead of the
store: the reads the built-in agents and the default Home tab need, each one indexed, each
in the workspace of the run that asks unless it says `everywhere=True` (core/tenancy.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from wakeful.core import tenancy
from wakeful.core.inbox_id import InboxId
from wakeful.core.records import ApprovalState, DeadLetters, StepRecord, StoredEvent, TimerState
from wakeful.core.tenancy import Workspace
from wakeful.core.usage import ModelSpend

if TYPE_CHECKING:
    from wakeful.core.store import Store


@dataclass(frozen=True, slots=True)
class Query:
    """Read-only questions about the inboxes. Each call is one short read transaction.

    Inside a run every answer is of the run's workspace (core/tenancy.py): another
    workspace's inbox has no approvals, timers or events here, and another workspace's
    approval or step is not found. `everywhere=True` asks across every workspace. Outside a
    run, and in a run of an inbox of no workspace (a conversation's, where webhooks report),
    the answers cover every workspace."""

    _store: Store
    approvers: tuple[str, ...] = ()
    """WAKEFUL_APPROVERS: `T…:U…` (that person in that workspace) or `U…` (single-workspace
    mode: that person)."""

    def _scope(self, everywhere: bool) -> Workspace | None:
        return None if everywhere else tenancy.current()

    def _hidden(self, inbox: str, everywhere: bool) -> bool:
        """Whether `inbox` is outside the workspace these answers are scoped to."""
        workspace = self._scope(everywhere)
        return workspace is not None and not workspace.holds(inbox)

    def is_approver(self, user: str, team: str | None) -> bool:
        """Whether `user` of workspace `team` is an approver there (core/tenancy.py
        `is_approver`: the one rule every edge uses)."""
        return tenancy.is_approver(self.approvers, user, team)

    def open_approvals(
        self, inbox: str | None = None, *, tool: str | None = None, everywhere: bool = False
    ) -> list[ApprovalState]:
        """Approvals nobody has answered yet: of one inbox (oldest first), or of every inbox
        of the workspace (soonest deadline first), of one tool or all."""
        workspace = self._scope(everywhere)
        if inbox is None:
            return self._store.open_approvals(tool, workspace)
        if workspace is not None and not workspace.holds(inbox):
            return []
        return [
            a
            for a in self._store.approvals(inbox)
            if a.answer is None and (tool is None or a.tool == tool)
        ]

    def approvals_to_answer(
        self, user: str, limit: int = 20, *, everywhere: bool = False
    ) -> list[ApprovalState]:
        """Open approvals `user` may answer, soonest deadline first: their own requests, and
        everyone's in each workspace where they are an approver."""
        workspace = self._scope(everywhere)
        if workspace is None:
            if user in self.approvers:
                return self._store.open_approvals_for(user, True, limit)
            teams = [e.partition(":")[0] for e in self.approvers if e.endswith(f":{user}")]
            found = self._store.open_approvals_for(user, False, limit)
            for team in teams:
                found += self._store.open_approvals_for(user, True, limit, Workspace.of_team(team))
        else:
            # An approver approves in the teams that name them: one read per team (and one for
            # the inboxes of no workspace, in single-workspace mode).
            parts: list[tuple[Workspace, str | None]] = [
                (Workspace.of_team(t), t) for t in workspace.teams
            ]
            if workspace.unowned:
                parts.append((Workspace(workspace.key, (), unowned=True), None))
            found = [
                a
                for part, team in parts
                for a in self._store.open_approvals_for(
                    user, self.is_approver(user, team), limit, part
                )
            ]
        unique = {a.id: a for a in found}.values()
        return sorted(unique, key=lambda a: (a.deadline, a.id))[:limit]

    def timers(self, inbox: str, *, everywhere: bool = False) -> list[TimerState]:
        """The inbox's timers with their next time (approval expiries included, named
        `approval:<id>`)."""
        return [] if self._hidden(inbox, everywhere) else self._store.timers(inbox)

    def pending_events(self, inbox: str, *, everywhere: bool = False) -> list[StoredEvent]:
        """Events waiting for a run (pending or running), oldest first."""
        return [] if self._hidden(inbox, everywhere) else self._store.events(inbox, "open")

    def dead_events(self, inbox: str, *, everywhere: bool = False) -> list[StoredEvent]:
        """Events of this inbox that were set aside after their attempts ran out."""
        return [] if self._hidden(inbox, everywhere) else self._store.events(inbox, "dead")

    def dead_letters(self, limit: int = 10, *, everywhere: bool = False) -> DeadLetters:
        """Dead events and parked posts of the workspace's inboxes (for an approver's eyes)."""
        return self._store.dead_letters(limit=limit, scope=self._scope(everywhere))

    def deliveries(self, channel: str, since: int) -> dict[str, int]:
        """Webhook deliveries reported to `channel` since `since`, by source (a
        conversation's inbox names no workspace: its channel is the scope)."""
        own = {"slack", "timer", "approval"}
        counts = self._store.source_counts(InboxId.conversation(channel), since)
        return {source: n for source, n in counts.items() if source not in own}

    def steps(
        self,
        inbox: str | None = None,
        name: str | None = None,
        limit: int = 20,
        *,
        everywhere: bool = False,
    ) -> list[StepRecord]:
        """The latest recorded steps (newest first) of an inbox and/or a name: what the tools
        did (of no inbox: in the workspace's inboxes)."""
        workspace = self._scope(everywhere)
        if workspace is None:
            return self._store.recorded_steps(inbox, name, limit)
        if inbox is not None and not workspace.holds(inbox):
            return []
        return self._store.recorded_steps(inbox, name, limit, workspace)

    def approval(self, request_id: str, *, everywhere: bool = False) -> ApprovalState | None:
        """One approval by its request id, answered or not (None: no such request, or one of
        another workspace)."""
        found = self._store.approval(request_id)
        return None if found is None or self._hidden(found.inbox, everywhere) else found

    def step(self, key: str, *, everywhere: bool = False) -> StepRecord | None:
        """The step recorded under `key` (an approval's request id, a `once` key), or None:
        in the workspace, what `steps.once(key, ...)` there would return (its own record, or
        one made for every workspace); `everywhere=True`, the record under `key` itself."""
        workspace = self._scope(everywhere)
        if workspace is None:
            return self._store.recorded_step(key)
        return tenancy.recorded_in(workspace, key, self._store.recorded_step)

    def model_spend(self, inbox: str, since: int, *, everywhere: bool = False) -> ModelSpend:
        """What the model calls of `inbox`, and of every inbox of its team, cost from `since`
        on, in US dollars, as the run log recorded them (finished runs only); nothing for an
        inbox of another workspace."""
        if self._hidden(inbox, everywhere):
            return ModelSpend(0.0, None)
        return self._store.model_spend(inbox, since)
