"""What a run asks for. An agent returns these; `finish` writes them in one fenced transaction."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from wakeful.core.errors import InvalidInput
from wakeful.core.memory import MemoryChange
from wakeful.core.storable import check_name, needs_cleaning, storable_value
from wakeful.core.usage import ModelUsage

Priority = Literal["normal", "urgent"]
MissedPolicy = Literal["coalesce", "catch_up"]
_HHMM = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")


@dataclass(frozen=True, slots=True)
class Post:
    """One outbound message.

    Its `kind` (core/kinds.py) says how it is held and sent: `post` rows are paced per
    (channel, thread) and merged; `update` rewrites the prompt of the approval named in `ref`;
    `ephemeral` shows only to `user` (`ref`, when set, is where a command's answer goes).
    Updates and ephemerals answer a person at once, so they are never held by the gap. A
    `digest` is a paced post whose `facts` (core/rules/digest.py) let held digests merge into
    one. The edge that sends adds kinds of its own (surfaces), which the engine carries
    without naming them; the registry in force (core/kinds.py `Kinds`) checks what each kind
    asks of a post when a run or the store takes it.
    """

    channel: str
    text: str
    thread_ts: str | None = None
    blocks: list[dict[str, Any]] | None = None
    priority: Priority = "normal"
    kind: str = "post"
    """A kind of the registry in force (core/kinds.py: the engine's, or a Slack surface)."""
    ref: str | None = None
    user: str | None = None
    facts: Any = None
    """Structured content a kind merges on (a digest's counts), JSON."""

    def __post_init__(self) -> None:
        # What the kind asks of the post (a user, a ref, ...) and the destination's limits are
        # checked by the registry in force, where one is (core/kinds.py `Kinds.check`).
        if not self.channel:
            raise InvalidInput("message channel must not be empty")
        if not isinstance(self.text, str):
            raise InvalidInput("message text must be a string")
        if self.priority not in ("normal", "urgent"):
            raise InvalidInput(f"priority must be 'normal' or 'urgent', got {self.priority!r}")
        check_json(self.facts, "message facts")
        names = {"channel": self.channel, "thread_ts": self.thread_ts, "ref": self.ref}
        for what, name in {**names, "user": self.user}.items():
            check_name(f"message {what}", name)


@dataclass(frozen=True, slots=True)
class Timer:
    """A timer owned by one inbox. Build with `once`, `every` or `daily`.

    `name` is unique within the inbox; the stored id is `<inbox>/<name>` and each occurrence's
    event key is `<id>@<scheduled time>`.
    """

    name: str
    kind: Literal["once", "every", "daily"]
    first_at: int | None = None
    every_seconds: int | None = None
    daily_at: str | None = None
    tz: str = "UTC"
    policy: MissedPolicy = "coalesce"
    payload: Any = None

    def __post_init__(self) -> None:
        if not self.name or "@" in self.name or "/" in self.name:
            raise InvalidInput("timer name must be non-empty and must not contain '@' or '/'")
        if self.name.startswith("approval:"):
            raise InvalidInput("timer names starting with 'approval:' are reserved for expiries")
        if self.policy not in ("coalesce", "catch_up"):
            raise InvalidInput(f"policy must be 'coalesce' or 'catch_up', got {self.policy!r}")
        if self.kind == "once" and not isinstance(self.first_at, int):
            raise InvalidInput("a one-off timer needs an integer time")
        if self.kind == "every":
            if not isinstance(self.every_seconds, int) or self.every_seconds < 1:
                raise InvalidInput("an 'every' timer needs a positive number of seconds")
            if not isinstance(self.first_at, int):
                raise InvalidInput("an 'every' timer needs the time of its first occurrence")
        if self.kind == "daily":
            if not self.daily_at or not _HHMM.match(self.daily_at):
                raise InvalidInput(f"daily time must be HH:MM (24h), got {self.daily_at!r}")
            from wakeful.core.rules.schedule import zone  # validates the zone name

            zone(self.tz)
        if self.kind not in ("once", "every", "daily"):
            raise InvalidInput(f"unknown timer kind {self.kind!r}")
        check_name("timer name", self.name)
        check_json(self.payload, "timer payload")

    @classmethod
    def once(cls, name: str, at: int, payload: Any = None) -> Timer:
        return cls(name=name, kind="once", first_at=at, payload=payload)

    @classmethod
    def every(
        cls,
        name: str,
        seconds: int,
        first_at: int,
        payload: Any = None,
        policy: MissedPolicy = "coalesce",
    ) -> Timer:
        return cls(
            name=name,
            kind="every",
            every_seconds=seconds,
            first_at=first_at,
            payload=payload,
            policy=policy,
        )

    @classmethod
    def daily(
        cls,
        name: str,
        at: str,
        tz: str = "UTC",
        payload: Any = None,
        policy: MissedPolicy = "coalesce",
    ) -> Timer:
        return cls(name=name, kind="daily", daily_at=at, tz=tz, payload=payload, policy=policy)


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A deferred tool call: the run ends here; the answer or the expiry wakes the inbox later."""

    id: str
    tool: str
    args: Any
    requester: str
    deadline: int
    approvers: tuple[str, ...] = ()
    prompt: Post | None = None
    """Where the question is shown (an agent asks with `run.ask`, which renders it)."""
    summary: str = ""
    """One line saying what the call does (`refund order 1005`), shown with its answer."""
    channel: str | None = None
    thread_ts: str | None = None
    """The conversation it was asked in: where its answer is told."""

    def __post_init__(self) -> None:
        if not self.id or not self.tool or not self.requester:
            raise InvalidInput("an approval request needs an id, a tool and a requester")
        if not isinstance(self.deadline, int):
            raise InvalidInput("an approval deadline is integer seconds")
        for what, name in (("id", self.id), ("tool", self.tool), ("requester", self.requester)):
            check_name(f"approval {what}", name)
        for approver in self.approvers:
            check_name("approver", approver)
        check_json(self.args, "approval args")

    @property
    def allowed(self) -> tuple[str, ...]:
        return (self.requester, *[a for a in self.approvers if a != self.requester])


@dataclass(frozen=True, slots=True)
class RunTiming:
    """Which run this was and when it ran, in epoch milliseconds: the worker sets it when the
    run ends (not an agent), so the run log's row carries the run_id its log lines carry."""

    run_id: str
    started_ms: int
    finished_ms: int


@dataclass(frozen=True, slots=True)
class ToolWait:
    """An approved call a transient failure holds: its event goes back to pending until
    `retry_at`, the attempt its claim counted given back (a wait is the destination's, not the
    event's), and its approval records the wait (core/approved.py)."""

    event_id: int
    request_id: str
    reason: str
    first_failed_at: int
    tries: int
    retry_at: int
    told: int


@dataclass(slots=True)
class Effects:
    """Everything a run wants done; written atomically by `finish` or not at all."""

    messages: list[Post] = field(default_factory=list)
    approvals: list[ApprovalRequest] = field(default_factory=list)
    timers: list[Timer] = field(default_factory=list)
    cancel_timers: list[str] = field(default_factory=list)
    session: Any = None
    save_session: bool = False
    failed: dict[int, str] = field(default_factory=dict)
    """Event id -> error, for events this run could not handle (retried with backoff)."""
    dead: dict[int, str] = field(default_factory=dict)
    """Event id -> error, for events to dead-letter now, without another try."""
    traceback: str | None = None
    """The traceback of the failure behind `failed` / `dead` (`wakeful inspect` shows it)."""
    usage: list[ModelUsage] = field(default_factory=list)
    """The run's model calls (tokens and estimated cost, per model): logged with the run."""
    set_aside_session: str | None = None
    """A reason: move the inbox's saved session aside (kept for the operator), so the next
    run starts fresh, and give the inbox's other events that failed only on that session
    their attempts back. The worker sets it when a SessionUnusable failure used up the
    attempts."""
    timing: RunTiming | None = None
    """The run's id and times (the worker's, see RunTiming); None: the finish's own `now`."""
    tool_waits: list[ToolWait] = field(default_factory=list)
    """Approved calls held by a transient failure (their events are not the agent's yet)."""
    tool_outcomes: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    """Request id -> (`done` | `failed` | `given_up`, the error): each approved call's fate,
    recorded on its approval with the finish."""
    memory: list[MemoryChange] = field(default_factory=list)
    """The run's memory writes (core/memory.py), each a new version, written with the finish."""
    released: list[int] = field(default_factory=list)
    """Events the run gives back untouched (it was interrupted: the person wrote again): back
    to pending at once, their attempt given back, to run again with the newer message."""
    forget: str | None = None
    """Who asked (a user id, `cli`): the finish erases what the inbox keeps about its person
    (core/store/forget.py) before it writes the rest; no session or memory is written."""
    ops: list[str] = field(default_factory=list)
    """Lines for the operators' channel (WAKEFUL_OPS_CHANNEL): a tool given up or failed for
    good, a destination unreachable for long. Written with the finish; none when unset."""

    def set_session(self, state: Any) -> None:
        check_json(state, "session state")
        self.session = state
        self.save_session = True


_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
"""Built once: json.dumps with these options builds a new encoder on every call (every ingest)."""


def check_json(value: Any, what: str) -> str:
    """Serialise `value` or raise InvalidInput; payloads must round-trip through JSON. A NUL
    or a lone surrogate in any of its strings is stored as U+FFFD (core/storable.py), so what
    one store holds the other holds too."""
    try:
        encoded = _JSON.encode(value)
        return _JSON.encode(storable_value(value)) if needs_cleaning(encoded) else encoded
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{what} is not JSON-serialisable: {exc}") from exc
