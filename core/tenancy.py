"""Whose workspace: what a run's queries see, what an agent's own step keys are scoped by, and
who approves where.

Order numbers, approvals and dead letters belong to one customer. A person's inbox names its
workspace (`<team>:<user>`); a team under an org-wide (Enterprise Grid) install belongs to that
installation (its enterprise id): one customer across the org's workspaces. The runner says
which inbox the run it serves is for (`serving`, around everything it calls on the agent); the
agent's `Query` and `Steps` read it (`current`), so its reads and its `once` keys stay in that
workspace unless it asks for every one (`everywhere=True`). A run of an inbox that names no
workspace (a conversation's `channel:<id>`, where webhook reports go; an engine test's `i1`)
and code outside any run are not scoped: they see every workspace, as before. In
single-workspace mode the one workspace also holds the inboxes that name none (`Workspace.only`).

Approvers are per workspace too: a `WAKEFUL_APPROVERS` entry `T…:U…` is that person in that
workspace; a bare `U…` (single-workspace mode only) is that person wherever they are.
`is_approver` is the one rule, used by every edge (clicks, the Home tab, `/wakeful`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from wakeful.core.inbox_id import CONVERSATION_PREFIX, OPS_PREFIX, InboxId
from wakeful.core.records import StepRecord


@dataclass(frozen=True, slots=True)
class Workspace:
    """One customer's part of the store: `key` is the team, or the enterprise id of the
    org-wide install the team is under; `teams` are the teams whose people's inboxes it holds.

    `unowned`: it also holds the inboxes that name no workspace (a conversation's, where
    webhooks report; the operators' `ops`): single-workspace mode, where there is one
    workspace for them to be in. In distribution mode they are the operators' alone."""

    key: str
    teams: tuple[str, ...]
    unowned: bool = False

    @classmethod
    def of_team(cls, team: str) -> Workspace:
        """A team on its own (a workspace's own install, in distribution mode)."""
        return cls(team, (team,))

    @classmethod
    def only(cls, team: str) -> Workspace:
        """The one workspace of single-workspace mode: the team, and every inbox that names
        no workspace."""
        return cls(team, (team,), unowned=True)

    def holds(self, inbox: str | None) -> bool:
        """Whether `inbox` is this workspace's: a person's inbox of one of its teams, or
        (`unowned`) an inbox that names no workspace."""
        key = InboxId(inbox or "")
        if key.user is not None:
            return key.team in self.teams
        return self.unowned and (key.channel is not None or key.is_ops)

    @property
    def prefixes(self) -> tuple[str, ...]:
        """What the store matches this workspace's inboxes by: each team's `<team>:`, and
        (`unowned`) `channel:` and `ops` (the only inboxes that are no person's)."""
        unowned = (f"{CONVERSATION_PREFIX}:", OPS_PREFIX) if self.unowned else ()
        return (*(InboxId.team_prefix(t) for t in self.teams), *unowned)

    def scoped(self, key: str) -> str:
        """The key an agent's `once` step `key` is stored under in this workspace: the
        workspace's prefix, as its inboxes have (`T1:refund_order:1001`)."""
        return InboxId.team_prefix(self.key) + key


class _Serving:
    """The run in progress on this thread: its inbox, and its workspace once asked (resolved
    at most once per run, and only by a run that reads or keys a step)."""

    __slots__ = ("_resolve", "_workspace", "inbox", "team")

    def __init__(self, inbox: str, team: str, resolve: Callable[[str], Workspace]) -> None:
        self.inbox = inbox
        self.team = team
        self._resolve = resolve
        self._workspace: Workspace | None = None

    @property
    def workspace(self) -> Workspace:
        if self._workspace is None:
            self._workspace = self._resolve(self.team)
        return self._workspace


_SERVING: ContextVar[_Serving | None] = ContextVar("wakeful_serving", default=None)


@contextmanager
def serving(inbox: str, resolve: Callable[[str], Workspace] = Workspace.of_team) -> Iterator[None]:
    """Scope the agent's queries and `once` keys to `inbox`'s workspace inside the block
    (`resolve`: a team's workspace; the store's `workspace_of` knows org-wide installs). An
    inbox that names no team scopes nothing."""
    team = InboxId(inbox).team
    token = _SERVING.set(None if team is None else _Serving(inbox, team, resolve))
    try:
        yield
    finally:
        _SERVING.reset(token)


def current() -> Workspace | None:
    """The workspace of the run in progress, or None (no run, or an inbox of no workspace)."""
    found = _SERVING.get()
    return None if found is None else found.workspace


def serving_inbox() -> str | None:
    """The inbox of the run in progress when it names a workspace (what a scoped `once`
    step is recorded with), else None."""
    found = _SERVING.get()
    return None if found is None else found.inbox


def recorded_in(
    workspace: Workspace, key: str, lookup: Callable[[str], StepRecord | None]
) -> StepRecord | None:
    """The step an agent's `key` names in `workspace`: the one recorded under the workspace's
    key, else one recorded under `key` itself that is this workspace's (an approved call's
    step, keyed by its request id in one of its inboxes) or no workspace's (a record made for
    every workspace, `everywhere=True`, or before step keys were scoped: it counts in each,
    so an upgrade never does again what such a record says was done)."""
    found = lookup(workspace.scoped(key))
    if found is not None:
        return found
    shared = lookup(key)
    if shared is not None and (shared.inbox is None or workspace.holds(shared.inbox)):
        return shared
    return None


def is_approver(approvers: Sequence[str], user: str, team: str | None) -> bool:
    """Whether `user` of workspace `team` may answer others' approvals there, see its dead
    letters and requeue them: `WAKEFUL_APPROVERS` names them as `<team>:<user>`, or (single-
    workspace mode) as `<user>` alone. `team` None (an approval of a conversation's inbox)
    matches only a bare `<user>`."""
    if not user:
        return False
    return user in approvers or (bool(team) and f"{team}:{user}" in approvers)


__all__ = ["Workspace", "current", "is_approver", "recorded_in", "serving", "serving_inbox"]
