"""Test an agent without Slack: feed it typed events, look at what it asked for.

`Harness` runs a factory on a real SQLite store in a temporary folder, with the same worker,
scheduler, approvals and durable steps as `wakeful serve`, on a clock that moves only when told
to. Nothing is sent anywhere: what the agent's runs queued is read back from the outbox.

    h = Harness(factory, approvers=("U0BOSS",))
    out = h.dm("refund order 7", user="U0ALICE")
    [asked] = out.approvals
    out = h.answer(asked.id, "yes", by="U0BOSS")
    assert out.replies[-1].text == "Refunded order 7."
"""

from __future__ import annotations

import itertools
import json
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wakeful.bot.config import Config
from wakeful.bot.events import HomeOpened
from wakeful.bot.loading import build_runner
from wakeful.core.clock import ManualClock
from wakeful.core.events import Command, Event, Message, WebhookDelivery
from wakeful.core.inbox_id import InboxId
from wakeful.core.records import TimerState
from wakeful.core.scheduler import Scheduler
from wakeful.core.store import Store, open_store
from wakeful.core.worker import Worker

T0 = 1_767_261_600
"""The harness clock's start: 2026-01-01 10:00 UTC."""
TEAM = "T0TEST"


@dataclass(frozen=True, slots=True)
class Sent:
    """One thing the agent's run queued for Slack."""

    text: str
    channel: str
    thread_ts: str | None
    kind: str
    """`post`, `digest`, `ephemeral` / `respond` (private), `update` (a rewritten prompt),
    or a surface (`home`, `status`, `prompts`)."""
    private_to: str | None
    urgent: bool
    blocks: Any = None


@dataclass(frozen=True, slots=True)
class Asked:
    """An approval a run asked for."""

    id: str
    tool: str
    args: Any
    summary: str
    requester: str


@dataclass(frozen=True)
class Outcome:
    """What the runs that one call of the harness caused asked for."""

    replies: list[Sent] = field(default_factory=list)
    """Posts and private replies, in order (surfaces and prompt rewrites are in `sent`)."""
    sent: list[Sent] = field(default_factory=list)
    """Everything queued, surfaces included."""
    approvals: list[Asked] = field(default_factory=list)
    timers: list[TimerState] = field(default_factory=list)
    """The inbox's timers after the runs."""

    @property
    def text(self) -> str:
        """Every reply's text, one after another: handy in an assert."""
        return "\n".join(r.text for r in self.replies)


REPLY_KINDS = frozenset({"post", "digest", "ephemeral", "respond"})


class Harness:
    """A factory (or an agent) behind a real store and worker, on a manual clock."""

    def __init__(
        self,
        factory: Callable[[Any], Any],
        *,
        approvers: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        now: int = T0,
        folder: str | Path | None = None,
    ) -> None:
        self._own = folder is None
        self.folder = Path(folder or tempfile.mkdtemp(prefix="wakeful-harness-"))
        settings = {"WAKEFUL_APPROVERS": ",".join(approvers), "WAKEFUL_BATCH_WINDOW": "0"}
        self.config = Config.from_env({**settings, **(env or {})})
        self.store: Store = open_store(self.folder / "harness.db", self.config.settings)
        self.clock = ManualClock(now)
        self.runner = build_runner(
            self.config, self.store, None, factory=factory, env=dict(env or {}), clock=self.clock
        )
        self.worker = Worker(store=self.store, clock=self.clock, runner=self.runner)
        self.scheduler = Scheduler(store=self.store, clock=self.clock)
        self._ids = itertools.count(1)
        self._seen = 0
        self._asked_ids: set[str] = set()
        self._inboxes: list[str] = []

    @property
    def now(self) -> int:
        return self.clock()

    # -- feeding events --------------------------------------------------------------------

    def dm(self, text: str, *, user: str = "U0USER", team: str = TEAM) -> Outcome:
        """A direct message from `user`."""
        n = next(self._ids)
        message = Message(
            text=text, user=user, team=team, channel=f"D{user[1:]}", ts=f"{self.now}.{n:06d}"
        )
        return self.send(message, InboxId.person(team, user))

    def mention(self, text: str, *, user: str = "U0USER", channel: str = "C0TEST") -> Outcome:
        """An @mention of the agent in a channel (its reply starts a thread)."""
        n = next(self._ids)
        message = Message(
            text=text,
            user=user,
            team=TEAM,
            channel=channel,
            ts=f"{self.now}.{n:06d}",
            channel_type="channel",
            mention=True,
        )
        return self.send(message, InboxId.person(TEAM, user))

    def command(self, text: str, *, user: str = "U0USER", channel: str = "C0TEST") -> Outcome:
        """`/wakeful <text>` run by `user`."""
        command = Command(command="/wakeful", text=text, user=user, team=TEAM, channel=channel)
        return self.send(command, InboxId.person(TEAM, user))

    def webhook(
        self, source: str, body: Any, *, type: str | None = None, channel: str = "C0HOOKS"
    ) -> Outcome:
        """A verified delivery from `source` (github, stripe, ...) reporting to `channel`."""
        n = next(self._ids)
        delivery = WebhookDelivery(type=type, delivery_id=f"d-{n}", body=body, channel=channel)
        key = delivery.delivery_id  # as the webhook front stores it
        return self.send(delivery, InboxId.conversation(channel), source=source, key=key)

    def open_home(self, *, user: str = "U0USER") -> Outcome:
        """The person opens the Home tab (the agent's `home` view is published after)."""
        inbox = InboxId.person(TEAM, user)
        self.store.note_home_opened(inbox, self.now)
        return self.send(HomeOpened(user=user, team=TEAM), inbox)

    def send(
        self, event: Event, inbox: str, *, source: str = "slack", key: str | None = None
    ) -> Outcome:
        """Store any typed event in `inbox` (under `key`, or a fresh one) and run everything
        it wakes."""
        key = key or f"harness-{next(self._ids)}"
        if inbox not in self._inboxes:
            self._inboxes.append(inbox)
        self.store.ingest(inbox, source, key, event.to_wire(), self.now)
        return self._settle(inbox)

    def answer(self, request_id: str, answer: str, *, by: str) -> Outcome:
        """`by` taps Approve (`yes`) or Deny (`no`) on the prompt of `request_id`."""
        state = self.store.approval(request_id)
        if state is None:
            raise KeyError(f"no approval {request_id!r}")
        self.store.answer(request_id, answer, by, self.now, approvers=self.config.approvers)
        return self._settle(state.inbox)

    def advance(self, seconds: int, *, inbox: str | None = None) -> Outcome:
        """Move the clock: due timers fire (approvals expire) and their runs run."""
        self.clock.now += seconds
        return self._settle(inbox)

    # -- reading ---------------------------------------------------------------------------

    def session(self, inbox: str) -> Any:
        return self.store.session(inbox)

    def close(self) -> None:
        self.store.close()
        if self._own:
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> Harness:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _settle(self, inbox: str | None) -> Outcome:
        """Fire what is due and run every ready inbox until nothing is left."""
        for _ in range(100):
            fired = self.scheduler.tick(self.now)
            ran = self.worker.tick(self.now)
            if not fired and not ran:
                break
        rows = [r for r in self.store.outbox() if r.id > self._seen]
        self._seen = max([self._seen, *(r.id for r in rows)])
        sent = [
            Sent(
                text=r.text,
                channel=r.channel,
                thread_ts=r.thread_ts or None,
                kind=r.kind,
                private_to=r.user if r.kind in ("ephemeral", "respond") else None,
                urgent=r.priority == "urgent",
                blocks=r.blocks,
            )
            for r in rows
        ]
        asked = [
            Asked(a.id, a.tool, a.args, a.summary or a.tool, a.requester)
            for known in self._inboxes
            for a in self.store.approvals(known)
            if a.id not in self._asked_ids
        ]
        self._asked_ids.update(a.id for a in asked)
        timers = self.store.timers(inbox) if inbox else []
        return Outcome(
            replies=[s for s in sent if s.kind in REPLY_KINDS and not _is_prompt(s)],
            sent=sent,
            approvals=asked,
            timers=timers,
        )


def _is_prompt(sent: Sent) -> bool:
    return (
        sent.kind == "post" and bool(sent.blocks) and "Approval needed" in json.dumps(sent.blocks)
    )
