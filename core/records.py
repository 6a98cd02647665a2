"""What the store hands back: plain frozen values, independent of the backend."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from wakeful.core.usage import ModelUsage

EventStatus = Literal["pending", "running", "done", "dead", "discarded"]
OutboxStatus = Literal["pending", "sending", "sent", "failed"]
Answer = Literal["yes", "no", "expired"]
AnswerOutcome = Literal["yes", "no", "expired", "unknown", "forbidden"]


@dataclass(frozen=True, slots=True)
class StoredEvent:
    id: int
    inbox: str
    source: str
    source_id: str
    payload: Any
    status: EventStatus
    attempts: int
    created_at: int
    error: str | None = None
    traceback: str | None = None
    """The traceback of the last failed attempt, when the agent raised."""
    trace: str | None = None
    """The W3C traceparent of the span that stored it (core/tracing.py); None: untraced."""


@dataclass(frozen=True, slots=True)
class Answered:
    """The result of one answer to an approval: the outcome that stands, and whether this
    answer is the one that stored it (False for a second tap, a forbidden user, an unknown
    or expired request), so only the deciding click wakes the agent."""

    outcome: AnswerOutcome
    stored: bool


@dataclass(frozen=True, slots=True)
class Ingested:
    """The result of one ingest: `stored` is False for a repeated delivery."""

    stored: bool
    event_id: int | None

    @property
    def duplicate(self) -> bool:
        return not self.stored


@dataclass(frozen=True, slots=True)
class ReadyList:
    """Inboxes a worker could claim now, oldest work first, each with its oldest claimable
    event's id; `top` is the newest event id stored when the list was read."""

    inboxes: list[tuple[str, int]]
    top: int


@dataclass(frozen=True, slots=True)
class Claim:
    """A batch of events one holder may work on under one lease generation."""

    inbox: str
    holder: str
    gen: int
    events: tuple[StoredEvent, ...] = field(default_factory=tuple)
    seq: int = 0
    """The lease's sequence number taken by this claim (orders claims and finishes)."""
    claimed_at: int = 0
    dead: tuple[StoredEvent, ...] = ()
    """Events this claim found out of attempts and made dead (told, not run): what their
    killed attempts streamed is taken back by the worker (core/runner.py)."""
    retry_next: bool = False
    """Nothing claimed, because a retried event is next: a claim of many inboxes, or a
    finish's claim of what follows, leaves it (the lease lapsed) for a claim of its own,
    which the worker runs holding no other claim. A run that kills its process (the poison a
    retried event may be) then spends no other event's attempt: each claim a worker holds
    when it dies loses one."""

    @property
    def ids(self) -> list[int]:
        return [e.id for e in self.events]


@dataclass(frozen=True, slots=True)
class Lease:
    inbox: str
    holder: str
    gen: int
    expires_at: int


@dataclass(frozen=True, slots=True)
class TimerFired:
    """What one scheduler pass did: timers found due, events newly stored."""

    due: int
    fired: int
    expired_approvals: int = 0


@dataclass(frozen=True, slots=True)
class ApprovalState:
    id: str
    inbox: str
    tool: str
    args: Any
    requester: str
    approvers: tuple[str, ...]
    deadline: int
    created_at: int
    answer: Answer | None
    answered_by: str | None
    answered_at: int | None
    prompt_channel: str | None
    prompt_ts: str | None
    summary: str | None = None
    channel: str | None = None
    thread_ts: str | None = None
    tool_state: str | None = None
    """The approved call's fate: None (not run yet), `waiting` (a transient failure holds it
    until `tool_retry_at`), `done`, `failed` (a permanent error) or `given_up`."""
    tool_error: str | None = None
    """The latest failure's reason, as the person is told it."""
    tool_first_failed_at: int | None = None
    tool_tries: int = 0
    """Attempts that failed transiently so far (the backoff's exponent)."""
    tool_retry_at: int | None = None
    tool_told: int = 0
    """Who was told of the wait: 1 the requester ("not done yet"), 2 the operators."""
    trace: str | None = None
    """The W3C traceparent of the run that asked (core/tracing.py); None: untraced."""


@dataclass(frozen=True, slots=True)
class OutboxRow:
    id: int
    inbox: str
    kind: str
    channel: str
    thread_ts: str
    text: str
    blocks: Any
    priority: str
    status: OutboxStatus
    ref: str | None
    user: str | None
    attempts: int
    error: str | None
    created_at: int
    dispatch_id: str | None = None
    facts: Any = None
    answers: tuple[str, ...] = ()
    """The events it answers, by key (`<source>:<source_id>`): its post's metadata names them."""
    look_first: bool = False
    """It may already be in Slack (a restore): look for its events' post before posting."""


@dataclass(frozen=True, slots=True)
class TimerState:
    id: str
    inbox: str
    kind: str
    next_at: int
    policy: str
    payload: Any


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A finished run, from the run log written by finish."""

    inbox: str
    holder: str
    gen: int
    claim_seq: int
    finish_seq: int
    events: tuple[int, ...]
    claimed_at: int
    finished_at: int
    usage: dict[str, ModelUsage] = field(default_factory=dict)
    """The run's model calls per model (tokens, estimated cost), as its agent reported them."""
    outcome: str | None = None
    """`ok`, `failed` (events retried) or `dead` (events dead-lettered); None before schema 14."""
    run_id: str | None = None
    """The id the run's log lines carry (`run_id=`)."""
    started_ms: int | None = None
    finished_ms: int | None = None
    """When the run started and ended, epoch milliseconds (the worker's clock)."""


@dataclass(frozen=True, slots=True)
class SetAsideSession:
    """An inbox's session moved aside after runs could not use it; kept for the operator."""

    id: int
    inbox: str
    state: str
    """The saved state as stored (JSON text), whatever made it unusable."""
    reason: str
    set_aside_at: int


@dataclass(frozen=True, slots=True)
class DeadLetters:
    """What needs a person: dead events and parked (failed) outbox rows."""

    events: list[StoredEvent]
    outbox: list[OutboxRow]


@dataclass(frozen=True, slots=True)
class StepRecord:
    """A durable step's recorded result (core/store/steps.py)."""

    key: str
    inbox: str | None
    name: str
    args: Any
    result: Any
    created_at: int
    error: str | None = None
    """Why the call was not done, when it ended in a failure that stands (a permanent error, a
    tool given up): then `result` is None and nothing calls it again."""


@dataclass(frozen=True, slots=True)
class Revocation:
    """A gateway destination cut off by an operator (`wakeful gateway revoke <name>`)."""

    destination: str
    revoked_at: int
    revoked_by: str = ""
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ProcessRecord:
    """A running wakeful process, as it recorded itself (table `processes`): where its pid
    means something (`host`, `boot`), which process it is (`pid` and its start time, so a
    reused pid is told apart) and when it last said it was alive (`seen_at`)."""

    id: str
    host: str
    boot: str
    """The host's boot id and the pid namespace the pid is in ('' when unknown): a pid is
    checked only where both are this process's own."""
    pid: int
    pid_start: str
    """The kernel's start time of `pid` (field 22 of /proc/<pid>/stat; '' when unknown)."""
    role: str
    started_at: int
    seen_at: int

    @property
    def name(self) -> str:
        """How a log line names it to an operator."""
        return f"pid {self.pid} on {self.host} ({self.role})"
