"""Typed inbox events: what an agent receives, and the one place their stored form is written.

Every wake-up is stored as an inbox event whose payload is JSON. Each type here converts to
that JSON (`to_wire`) and back (`decode`), with a version (`"v": 2`) and its type (`"event"`); rows
stored before the version existed (no `"v"`) decode by their source and shape, so an upgrade
never strands a pending event. Whatever cannot be decoded (a shape this code does not know, a
type nobody registered) arrives as `Unknown` with the raw payload instead of failing the run.

The engine's own types live here (a person's message, a command, an approval's answer, a timer
tick, a webhook delivery); the Slack edge registers its surface events (bot/slack/events.py) with
`register`, so the engine never names a Slack surface.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar, Literal, TypeVar

WIRE_VERSION = 2
Answer = Literal["yes", "no", "expired"]


@dataclass(frozen=True, slots=True)
class Conversation:
    """Where a reply goes: a conversation (channel id) and, when it is in one, a thread."""

    channel: str
    thread_ts: str | None = None


@dataclass(frozen=True, kw_only=True)
class Event:
    """What every event carries once stored. The front, the scheduler and the approvals build
    the content fields; the worker fills these from the stored row."""

    TYPE: ClassVar[str] = ""
    WIRE: ClassVar[Mapping[str, str]] = {}
    """Attribute name -> its name in the stored JSON, where the two differ."""

    id: int = 0
    """The inbox event's id (0 before it is stored)."""
    source: str = ""
    """Who stored it: `slack`, `timer`, `approval`, or a webhook's name (`github`, ...)."""
    key: str = ""
    """Its key within the source (Slack's event id, a timer's `<id>@<time>`, ...): with
    `source`, unique; durable steps are keyed by it."""
    received_at: int = 0
    attempt: int = 0
    """Which attempt at handling it this run is (1 the first time)."""

    @property
    def reply_to(self) -> Conversation | None:
        """Where an answer to this event goes, when it came from a conversation."""
        return None

    @property
    def urgent(self) -> bool:
        """Whether a person is waiting on an answer to this event (replies skip the gap)."""
        return False

    @property
    def people(self) -> tuple[str, ...]:
        """The people who caused this event, first the one it is about: each is told when it
        cannot be handled (a dead event's notice)."""
        return ()

    @property
    def awaited(self) -> bool:
        """Whether a person who caused it waits for a first word back (a reply, a notice, a
        rewritten prompt): the time until then is `wakeful_unanswered_seconds`."""
        return False

    def to_wire(self) -> dict[str, Any]:
        """The stored JSON of this event's content (not its id, source or key)."""
        out: dict[str, Any] = {"v": WIRE_VERSION, "event": self.TYPE}
        for f in _content(type(self)):
            out[self.WIRE.get(f.name, f.name)] = getattr(self, f.name)
        return out


@dataclass(frozen=True, kw_only=True)
class Message(Event):
    """A person wrote to the agent: a DM, a mention, a reply in a thread the agent takes part
    in, or a group DM."""

    TYPE: ClassVar[str] = "message"

    text: str
    """What the person wrote to the agent: a leading mention of the agent (`<@BOT> `, which
    every @mention starts with) removed, the rest as typed (Slack's escaping kept)."""
    user: str
    team: str
    channel: str
    ts: str
    thread_ts: str | None = None
    channel_type: str = "im"
    """Slack's conversation type: `im` (a DM), `channel`, `group` (private channel), `mpim`."""
    mention: bool = False
    """The agent was @-mentioned (its reply then starts a thread under the message)."""
    raw_text: str = ""
    """The message's whole text as Slack sent it, the agent's mention included (`text` when
    there was none to remove, and in rows stored before this field existed)."""

    def __post_init__(self) -> None:
        if not self.raw_text:
            object.__setattr__(self, "raw_text", self.text)

    @property
    def kind(self) -> Literal["dm", "mention", "thread", "group_dm"]:
        if self.mention:
            return "mention"
        if self.channel_type == "im":
            return "dm"
        if self.channel_type == "mpim" and not self.thread_ts:
            return "group_dm"
        return "thread"

    @property
    def reply_to(self) -> Conversation:
        thread = self.thread_ts or (self.ts if self.mention else None)
        return Conversation(self.channel, thread or None)

    @property
    def urgent(self) -> bool:
        return True

    @property
    def people(self) -> tuple[str, ...]:
        return (self.user,)

    @property
    def awaited(self) -> bool:
        return True

    def to_wire(self) -> dict[str, Any]:
        out = super().to_wire()
        out["kind"] = "mention" if self.mention else "message"  # the shape rows had before v2
        del out["mention"]
        # The whole text is the person's words after what was removed (the agent's mention):
        # only that prefix is stored, so a long message is not stored twice (the cap).
        raw = out.pop("raw_text")
        if raw != self.text:
            if raw.endswith(self.text):
                out["raw_prefix"] = raw[: len(raw) - len(self.text)]
            else:
                out["raw_text"] = raw
        return out


class _ToTheCaller:
    """What an event one person caused, to be answered to them alone where they acted, says of
    itself (a slash command, an answer to the forget prompt): a mixin over their fields."""

    user: str
    channel: str

    @property
    def reply_to(self) -> Conversation:
        return Conversation(self.channel)

    @property
    def urgent(self) -> bool:
        return True

    @property
    def people(self) -> tuple[str, ...]:
        return (self.user,)

    @property
    def awaited(self) -> bool:
        return True


@dataclass(frozen=True, kw_only=True)
class Command(_ToTheCaller, Event):
    """A person ran the app's slash command; the answer goes to them alone."""

    TYPE: ClassVar[str] = "command"

    command: str
    text: str
    user: str
    team: str
    channel: str
    response_url: str | None = field(default=None, repr=False)
    """Where the answer is posted (a credential for 30 minutes): `run.reply` uses it."""


@dataclass(frozen=True, kw_only=True)
class ForgetAnswer(_ToTheCaller, Event):
    """A person answered the forget prompt of `/wakeful forget` (core/privacy.py): `forget`
    erases what is kept about them, `cancel` nothing. The engine answers it, never the agent."""

    TYPE: ClassVar[str] = "forget_answer"

    user: str
    team: str
    channel: str
    answer: Literal["forget", "cancel"]
    response_url: str | None = field(default=None, repr=False)
    """The prompt's response_url: the answer replaces the prompt through it."""


@dataclass(frozen=True, kw_only=True)
class ApprovalAnswer(Event):
    """The answer to an approval this agent asked for (`run.ask`): yes, no, or expired.

    On `yes` the tool has already run, as a durable step keyed by the request id, before the
    agent sees this event: `result` is what it returned (`error` says why it did not run)."""

    TYPE: ClassVar[str] = "approval_answer"
    WIRE: ClassVar[Mapping[str, str]] = {"request_id": "approval", "by": "user"}

    request_id: str
    answer: Answer
    tool: str
    args: Any = None
    by: str | None = None
    """Who answered; None when it expired."""
    answered_at: int = 0
    summary: str = ""
    channel: str | None = None
    thread_ts: str | None = None
    requester: str | None = None
    result: Any = None
    error: str | None = None

    @property
    def reply_to(self) -> Conversation | None:
        return Conversation(self.channel, self.thread_ts) if self.channel else None

    @property
    def urgent(self) -> bool:
        return True

    @property
    def people(self) -> tuple[str, ...]:
        """The requester, then whoever answered if another person."""
        found = [p for p in (self.requester, self.by) if p]
        return tuple(dict.fromkeys(found))

    @property
    def awaited(self) -> bool:
        return self.by is not None  # a click; an expiry has no one waiting on it


@dataclass(frozen=True, kw_only=True)
class TimerTick(Event):
    """A timer of this inbox fired (`run.set_timer`). After an outage a `coalesce` timer fires
    once for the latest occurrence: `skipped` says how many were missed."""

    TYPE: ClassVar[str] = "timer"
    WIRE: ClassVar[Mapping[str, str]] = {"name": "timer", "data": "payload"}

    name: str
    scheduled_for: int
    late_by: int = 0
    skipped: int = 0
    data: Any = None
    """The timer's own data, as given to `Timer.once / every / daily`."""
    channel: str | None = None
    thread_ts: str | None = None

    @property
    def reply_to(self) -> Conversation | None:
        return Conversation(self.channel, self.thread_ts) if self.channel else None


@dataclass(frozen=True, kw_only=True)
class WebhookDelivery(Event):
    """A signed delivery from GitHub, Stripe or another configured source. Deliveries go to
    the inbox of the conversation their source reports to (`channel:<id>`), not a person's."""

    TYPE: ClassVar[str] = "webhook"
    WIRE: ClassVar[Mapping[str, str]] = {"delivery_id": "delivery"}

    type: str | None
    """The source's event type (`issues`, `charge.refunded`, ...); None for generic sources."""
    delivery_id: str
    body: Any
    channel: str
    """The conversation this source reports to."""
    body_cut: bool = False
    """The body was too big to store whole and was pruned."""

    @property
    def reply_to(self) -> Conversation:
        return Conversation(self.channel)

    def to_wire(self) -> dict[str, Any]:
        out = super().to_wire()
        out["kind"] = "webhook"
        return out


@dataclass(frozen=True, kw_only=True)
class Unknown(Event):
    """An event this code cannot read as a type (a newer version's, a shape nobody
    registered): its raw payload, so an agent may still look and nothing fails."""

    TYPE: ClassVar[str] = "unknown"

    payload: Any = None


E = TypeVar("E", bound=Event)
_TYPES: dict[str, type[Event]] = {}
Legacy = Callable[[str, Mapping[str, Any]], str | None]
_LEGACY: list[Legacy] = []


def register(cls: type[E]) -> type[E]:
    """Make `cls` decodable by its TYPE (a class decorator; the Slack edge registers its
    surface events so)."""
    if not cls.TYPE or cls.TYPE in ("unknown",):
        raise ValueError(f"{cls.__name__} needs a TYPE of its own")
    _TYPES[cls.TYPE] = cls
    return cls


def register_legacy(infer: Legacy) -> None:
    """A rule naming the type of a row stored before `"v"` existed (None: not its shape)."""
    _LEGACY.append(infer)


for _cls in (Message, Command, ForgetAnswer, ApprovalAnswer, TimerTick, WebhookDelivery):
    register(_cls)


def _infer_core(source: str, payload: Mapping[str, Any]) -> str | None:
    kind = payload.get("kind")
    if source == "approval":
        return ApprovalAnswer.TYPE
    if source == "timer":
        return TimerTick.TYPE
    if kind == "webhook":
        return WebhookDelivery.TYPE
    if source == "slack" and kind in ("message", "mention"):
        return Message.TYPE
    if source == "slack" and kind == "command":
        return Command.TYPE
    return None


register_legacy(_infer_core)


def decode(
    payload: Any,
    *,
    id: int = 0,
    source: str = "",
    key: str = "",
    received_at: int = 0,
    attempt: int = 0,
) -> Event:
    """The typed event of a stored payload; `Unknown` for anything that does not decode."""
    meta: dict[str, Any] = {
        "id": id,
        "source": source,
        "key": key,
        "received_at": received_at,
        "attempt": attempt,
    }
    if not isinstance(payload, Mapping):
        return Unknown(payload=payload, **meta)
    name = payload.get("event") if payload.get("v") == WIRE_VERSION else None
    if name is None:
        name = next((t for infer in _LEGACY if (t := infer(source, payload))), None)
    cls = _TYPES.get(str(name)) if name is not None else None
    if cls is None:
        return Unknown(payload=payload, **meta)
    try:
        return _build(cls, payload, meta)
    except (TypeError, ValueError):
        return Unknown(payload=payload, **meta)


def _build(cls: type[Event], payload: Mapping[str, Any], meta: dict[str, Any]) -> Event:
    values: dict[str, Any] = {}
    for f in _content(cls):
        wire = cls.WIRE.get(f.name, f.name)
        if wire in payload:
            values[f.name] = payload[wire]
        elif f.default is MISSING and f.default_factory is MISSING:
            raise ValueError(f"{cls.TYPE} event lacks {wire!r}")
    if cls is Message:
        values["mention"] = payload.get("kind") == "mention" or bool(payload.get("mention"))
        prefix = payload.get("raw_prefix")
        if isinstance(prefix, str) and isinstance(values.get("text"), str):
            values["raw_text"] = prefix + values["text"]
    if cls is TimerTick:
        values.update(_timer_target(values.get("data")))
    _check_types(cls, values)
    return cls(**values, **meta)


def _timer_target(data: Any) -> dict[str, Any]:
    """A timer's conversation: stored beside its data (v2), or, in rows from before, read
    from the data itself when it names a channel (the built-in agents' reminders did)."""
    if isinstance(data, Mapping) and data.get("v") == WIRE_VERSION and "data" in data:
        raw = data.get("to")
        to: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        return {
            "data": data["data"],
            "channel": to.get("channel"),
            "thread_ts": to.get("thread_ts"),
        }
    if isinstance(data, Mapping) and isinstance(data.get("channel"), str):
        thread = data.get("thread_ts")
        return {
            "channel": data["channel"],
            "thread_ts": thread if isinstance(thread, str) else None,
        }
    return {}


_TEXT = {
    "text",
    "raw_text",
    "user",
    "team",
    "channel",
    "ts",
    "command",
    "request_id",
    "tool",
    "name",
}


def _check_types(cls: type[Event], values: dict[str, Any]) -> None:
    for name, value in values.items():
        if name in _TEXT and not isinstance(value, str):
            if name == "channel" and value is None and cls in (ApprovalAnswer, TimerTick):
                continue
            raise ValueError(f"{cls.TYPE}.{name} must be text")
    if cls is ApprovalAnswer and values.get("answer") not in ("yes", "no", "expired"):
        raise ValueError("an approval answer is yes, no or expired")
    if cls is ForgetAnswer and values.get("answer") not in ("forget", "cancel"):
        raise ValueError("a forget answer is forget or cancel")


def awaited(source: str, payload: Any) -> bool:
    """Whether a stored payload is an event a person waits on (see `Event.awaited`)."""
    if source in ("timer",) or not isinstance(payload, Mapping):
        return False
    if payload.get("event") == WebhookDelivery.TYPE or payload.get("kind") == "webhook":
        return False
    if payload.get("v") == WIRE_VERSION and payload.get("event") in (Message.TYPE, Command.TYPE):
        return True  # the common case (every front delivery), without building the event
    return decode(payload, source=source).awaited


def timer_payload(data: Any, to: Conversation | None) -> Any:
    """What a timer stores as its payload: its data and the conversation a tick answers in."""
    if to is None:
        return data
    return {
        "v": WIRE_VERSION,
        "data": data,
        "to": {"channel": to.channel, "thread_ts": to.thread_ts},
    }


_BASE = {"id", "source", "key", "received_at", "attempt"}


def _content(cls: type[Event]) -> list[Any]:
    return [f for f in fields(cls) if f.name not in _BASE]
