"""What the engine lends a run (the step ledger, queries, approval caps and view, the agent's
tools, where streams show, memory's documents, the interrupt flag) and the Tool an agent
offers for approval: built once per worker, shared by its runs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wakeful.core.memory import Lister, MemoryLimits, Reader
from wakeful.core.rules.approvals import ApprovalBudget
from wakeful.core.rules.timers import TimerBudget
from wakeful.core.settings import DEFAULTS
from wakeful.core.steps import StepLedger
from wakeful.core.stream_edge import StreamSurface
from wakeful.core.tenancy import Workspace
from wakeful.core.views import ApprovalView, PlainApprovals, PlainPrivacy, PrivacyView

if TYPE_CHECKING:
    from wakeful.core.query import Query
    from wakeful.core.records import ApprovalState


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool an agent offers for approval-gated calls (`run.ask`).

    `fn(args, key)` does the work; `key` is the approval's request id, stable across retries:
    pass it to the system you call as its idempotency key. It runs at least once after a yes
    (a crash between the call and the recording of its result calls it again, with the same
    key) and its result is recorded, so a retried run does not call it again."""

    name: str
    fn: Callable[[Any, str], Any]
    description: str = ""


@dataclass
class RunServices:
    """What the engine lends a run: the step ledger, the read-only queries, the approval
    policy and view, and the agent's tools. Built once per worker."""

    ledger: StepLedger
    query: Query
    budget: Callable[[str], ApprovalBudget]
    """What a run of an inbox may still ask under the approval caps (store.approval_budget)."""
    timers: Callable[[str], TimerBudget]
    """What a run of an inbox may still set under the timer cap (store.timer_budget)."""
    approvers: tuple[str, ...] = ()
    approval_ttl: int = DEFAULTS.approval_ttl
    view: ApprovalView = field(default_factory=PlainApprovals)
    tools: Mapping[str, Tool] = field(default_factory=dict)
    approval: Callable[[str], ApprovalState | None] = field(default=lambda _id: None)
    """An approval's stored state (store.approval): what its approved call went through."""
    workspace_of: Callable[[str], Workspace] = Workspace.of_team
    """A team's workspace (store.workspace_of: an org-wide install's teams share one), what
    the run's queries and `once` keys are scoped by (core/tenancy.py)."""
    streams: StreamSurface | None = None
    """Where a streamed reply shows as it is written (the Slack edge); None: a stream only
    collects its text and posts it when closed (core/streams.py)."""
    stream_segment: int = DEFAULTS.stream_segment
    memory_read: Reader = field(default=lambda _owner, _path: None)
    """(owner, path) -> a memory document's current text (store.memory_read)."""
    memory_paths: Lister = field(default=lambda _owner, _folder: [])
    """(owner, folder) -> the paths an owner keeps (store.memory_paths)."""
    memory_limits: MemoryLimits = field(default_factory=MemoryLimits)
    shared_memory_writes: bool = False
    """The agent's `shared_memory = "write"`: runs write the workspace's shared memory."""
    memory_docs: Callable[[str], Sequence[tuple[str, int]]] = field(default=lambda _owner: [])
    """owner -> (path, bytes) of each current document (store.memory_docs)."""
    privacy: PrivacyView = field(default_factory=PlainPrivacy)
    """How `/wakeful memory` and `/wakeful forget` answer (core/privacy.py)."""
    waiting_after: Callable[[str, int], Sequence[Any]] | None = None
    """The inbox's events stored after an id that wait (store.waiting_after): set when the
    agent answers the newest words (`on_new_message = "interrupt"`), None when it queues."""
