"""Test an agent without Slack: feed it typed events, look at what it asked for.

`Harness` runs a factory on a real SQLite store in a temporary folder, with the same worker,
scheduler, approvals and durable steps as `wakeful serve`, on a clock that moves only when told
to. Nothing is sent anywhere: what the agent's runs queued is read back from the outbox.

    h = Harness(factory, approvers=("U0BOSS",))
    out = h.dm("refund order 7", user="U0ALICE")
    [asked] = out.approvals
    out = h.answer(asked.id, "yes", by="U0BOSS")
    assert out.replies[-1].text == "Refunded order 7."

Every message is built as Slack sends it: a mention's text starts with the bot's own mention
(`<@U0BOT>`, `BOT`), which the agent reads removed from `Message.text` and whole in
`Message.raw_text`, as under `wakeful serve`.
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

from wakeful.bot.front import payloads
from wakeful.bot.process.config import Config
from wakeful.bot.process.loading import build_runner
from wakeful.bot.slack.events import HomeOpened
from wakeful.bot.slack.kinds import SLACK_KINDS
from wakeful.core.clock import ManualClock
from wakeful.core.events import Command, Event, Message, WebhookDelivery
from wakeful.core.inbox_id import InboxId
from wakeful.core.records import TimerState
from wakeful.core.rules.approvals import expiry_timer_id
from wakeful.core.rules.schedule import zone as check_zone
from wakeful.core.scheduler import Scheduler
from wakeful.core.store import Store, open_store
from wakeful.core.worker import Worker

__all__ = ["BOT", "T0", "TEAM", "Asked", "Harness", "Outcome", "Sent"]

T0 = 1_767_261_600
"""The harness clock's start: 2026-01-01 10:00 UTC."""
TEAM = "T0TEST"
"""The workspace every harness person is in."""
BOT = "U0BOT"
"""The agent's own Slack user id: a mention's text starts with `<@U0BOT>`."""


@dataclass(frozen=True, slots=True)
class Sent:
    """One thing the agent's run queued for Slack."""

    text: str
    channel: str
    """The conversation it goes to (a DM's is `D` + the user id without its `U`)."""
    thread_ts: str | None
    """The thread it goes in (a reply to a mention starts one under it), or None."""
    kind: str
    """`post`, `digest`, `ephemeral` / `respond` (private), `update` (a rewritten prompt),
    or a surface (`home`, `status`, `prompts`)."""
    private_to: str | None
    """The one person who sees it (`ephemeral`, `respond`), else None."""
    urgent: bool
    """It skips the outbox's gap (a reply to a person); False: it waits for the gap."""
    blocks: Any = None
    """Its Block Kit blocks, if any."""


@dataclass(frozen=True, slots=True)
class Asked:
    """An approval a run asked for."""

    id: str
    """The request id: `h.answer(id, "yes", by=...)` answers it."""
    tool: str
    args: Any
    summary: str
    """What the prompt says (the tool's name when the run gave no summary)."""
    requester: str


@dataclass(frozen=True)
class Outcome:
    """What the runs that one call of the harness caused asked for."""

    replies: list[Sent] = field(default_factory=list)
    """Posts and private replies, in order (surfaces and prompt rewrites are in `sent`)."""
    sent: list[Sent] = field(default_factory=list)
    """Everything queued, surfaces included."""
    approvals: list[Asked] = field(default_factory=list)
    """The approvals asked for (in any inbox) since the previous call."""
    timers: list[TimerState] = field(default_factory=list)
    """The timers still to fire, soonest first, once the runs are done: the fed inbox's, or
    after `advance`, every inbox the harness has fed. A fired daily or repeating timer shows
    its next occurrence (`next_at`); a fired one-off is gone, and so is an approval's expiry
    once the approval is answered. `id` is `<inbox>/<name>`."""
    memory: dict[str, dict[str, str]] = field(default_factory=dict)
    """What memory keeps once the runs are done (`run.memory`: their writes are in once the
    run finished): the fed inbox's documents (or, after `advance`, every fed inbox's), as
    inbox -> path -> text."""

    @property
    def text(self) -> str:
        """Every reply's text, one after another: handy in an assert."""
        return "\n".join(r.text for r in self.replies)


REPLY_KINDS = frozenset({"post", "digest", "ephemeral", "respond"})


class Harness:
    """A factory (or an agent) behind a real store and worker, on a manual clock.

    `factory`: what `WAKEFUL_AGENT` names, called with the `Setup` (`lambda setup: MyAgent()`
    for an agent that needs none). `approvers`: the user ids who may answer approvals
    (`WAKEFUL_APPROVERS`). `env`: more settings (`WAKEFUL_*`, docs/settings.md) and what the
    agent reads in `setup.env`. `now`: the clock's start (unix seconds, `T0` by default).
    `folder`: where the SQLite file goes (kept after `close`); a temporary folder, removed
    on `close`, by default. `time_zones`: user id -> IANA zone that `setup.time_zone(user)`
    gives (`""`: Slack could not tell, so `known` is False); anyone else is in UTC.

    Use it as a context manager (`with Harness(...) as h:`) or call `close()`.
    """

    def __init__(
        self,
        factory: Callable[[Any], Any],
        *,
        approvers: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        now: int = T0,
        folder: str | Path | None = None,
        time_zones: Mapping[str, str] | None = None,
    ) -> None:
        zones = dict(time_zones or {})
        for name in zones.values():
            if name:
                check_zone(name)  # an unknown name is refused here, not in the agent's run
        self._own = folder is None
        self.folder = Path(folder or tempfile.mkdtemp(prefix="wakeful-harness-"))
        settings = {"WAKEFUL_APPROVERS": ",".join(approvers), "WAKEFUL_BATCH_WINDOW": "0"}
        self.config = Config.from_env({**settings, **(env or {})})
        self.store: Store = open_store(
            self.folder / "harness.db", self.config.settings, kinds=SLACK_KINDS
        )
        self.clock = ManualClock(now)
        self.runner = build_runner(
            self.config,
            self.store,
            None,
            factory=factory,
            env=dict(env or {}),
            clock=self.clock,
            zone=lambda user: zones.get(user, "UTC"),
        )
        self.worker = Worker(store=self.store, clock=self.clock, runner=self.runner)
        self.scheduler = Scheduler(store=self.store, clock=self.clock)
        self._ids = itertools.count(1)
        self._seen = 0
        self._asked_ids: set[str] = set()
        self._inboxes: list[str] = []

    @property
    def now(self) -> int:
        """The harness clock (unix seconds): `T0` or `now=` at the start, moved by `advance`."""
        return self.clock()

    # -- feeding events --------------------------------------------------------------------

    def dm(self, text: str, *, user: str = "U0USER", team: str = TEAM) -> Outcome:
        """A direct message `text` from `user` (in workspace `team`), in their DM with the
        agent (channel `D…`); it goes to `user`'s inbox."""
        return self.send(self.message(text, user=user, team=team), InboxId.person(team, user))

    def mention(
        self,
        text: str,
        *,
        user: str = "U0USER",
        channel: str = "C0TEST",
        thread_ts: str | None = None,
    ) -> Outcome:
        """`user` @mentions the agent in `channel` (in a thread when `thread_ts`): Slack's
        text is `<@U0BOT> text`, the agent reads `text`; its reply starts a thread."""
        message = self.message(text, user=user, channel=channel, mention=True, thread_ts=thread_ts)
        return self.send(message, InboxId.person(TEAM, user))

    def message(
        self,
        text: str,
        *,
        user: str = "U0USER",
        team: str = TEAM,
        channel: str | None = None,
        mention: bool = False,
        thread_ts: str | None = None,
    ) -> Message:
        """The `Message` `dm` (no `channel`) or `mention` (`mention=True`) stores, built as the
        Slack front builds it, for `batch` or `send`. A mention's text gets the bot's
        `<@U0BOT>` in front unless it starts with it."""
        tag = f"<@{BOT}>"
        n = next(self._ids)
        event = {
            "type": "app_mention" if mention else "message",
            "user": user,
            "text": f"{tag} {text}" if mention and not text.startswith(tag) else text,
            "ts": f"{self.now}.{n:06d}",
            "channel": channel or f"D{user[1:]}",
            "channel_type": "channel" if channel else "im",
            "thread_ts": thread_ts,
        }
        body = {"type": "event_callback", "team_id": team, "event_id": f"Ev{n}", "event": event}
        return payloads.said(body, event, mention, BOT)[1]

    def batch(self, items: Sequence[str | Message], *, user: str = "U0USER") -> Outcome:
        """Several messages from `user` stored before anything runs, so they reach the agent
        together, in order, in one run's `run.events` (as messages sent within
        `WAKEFUL_BATCH_WINDOW` do): each item is a DM's text or a `Message` (`h.message`)."""
        if not items:
            raise ValueError("batch needs at least one message")
        inbox = InboxId.person(TEAM, user)
        for item in items:
            message = self.message(item, user=user) if isinstance(item, str) else item
            if not isinstance(message, Message) or message.user != user:
                raise ValueError(f"batch takes texts and Messages from {user}, one inbox")
            self._store(message, InboxId.person(message.team, user))
        return self._settle(inbox)

    def command(self, text: str, *, user: str = "U0USER", channel: str = "C0TEST") -> Outcome:
        """`/wakeful <text>` run by `user` in `channel`; the agent's reply goes to them alone."""
        command = Command(command="/wakeful", text=text, user=user, team=TEAM, channel=channel)
        return self.send(command, InboxId.person(TEAM, user))

    def webhook(
        self, source: str, body: Any, *, type: str | None = None, channel: str = "C0HOOKS"
    ) -> Outcome:
        """A verified delivery from `source` (`github`, `stripe`, ...) of event `type`
        (`issues`, ...; None for a generic source) with JSON `body`, stored in the inbox of
        `channel`, the conversation the source reports to."""
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
        """Store any typed event in `inbox` (a name from `InboxId`: `T0TEST:U0ALICE`,
        `channel:C0…`) from `source`, under `key` (its key within the source; a fresh one by
        default: the same key twice is stored once), and run everything it wakes."""
        self._store(event, inbox, source, key)
        return self._settle(inbox)

    def _store(
        self, event: Event, inbox: str, source: str = "slack", key: str | None = None
    ) -> None:
        key = key or f"harness-{next(self._ids)}"
        if inbox not in self._inboxes:
            self._inboxes.append(inbox)
        self.store.ingest(inbox, source, key, event.to_wire(), self.now)

    def answer(self, request_id: str, answer: str, *, by: str) -> Outcome:
        """`by` taps Approve (`yes`) or Deny (`no`) on the prompt of `request_id`, with the
        same checks as the buttons (`by` must be an approver)."""
        state = self.store.approval(request_id)
        if state is None:
            raise KeyError(f"no approval {request_id!r}")
        self.store.answer(request_id, answer, by, self.now, approvers=self.config.approvers)
        return self._settle(state.inbox)

    def advance(self, seconds: int, *, inbox: str | None = None) -> Outcome:
        """Move the clock `seconds` ahead: due timers fire (approvals expire) and their runs
        run. `Outcome.timers` is then `inbox`'s, or every fed inbox's when None."""
        self.clock.now += seconds
        return self._settle(inbox)

    # -- reading ---------------------------------------------------------------------------

    def session(self, inbox: str) -> Any:
        """What the last finished run of `inbox` saved (`run.save`), or None."""
        return self.store.session(inbox)

    def memory(self, inbox: str) -> dict[str, str]:
        """The memory documents `inbox` keeps now: path -> text."""
        kept = {
            d.path: self.store.memory_read(inbox, d.path) for d in self.store.memory_docs(inbox)
        }
        return {path: text for path, text in kept.items() if text is not None}

    def close(self) -> None:
        """Close the store; remove the temporary folder (not one given as `folder`)."""
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
        return Outcome(
            replies=[s for s in sent if s.kind in REPLY_KINDS and not _is_prompt(s)],
            sent=sent,
            approvals=asked,
            timers=self._timers([inbox] if inbox else self._inboxes),
            memory={known: self.memory(known) for known in ([inbox] if inbox else self._inboxes)},
        )

    def _timers(self, inboxes: Sequence[str]) -> list[TimerState]:
        """Timers still to fire: an answered approval's expiry is left in the store until its
        deadline (it then does nothing), so it is not one."""
        answered = {
            expiry_timer_id(inbox, a.id)
            for inbox in inboxes
            for a in self.store.approvals(inbox)
            if a.answer is not None
        }
        found = [t for inbox in inboxes for t in self.store.timers(inbox) if t.id not in answered]
        return sorted(found, key=lambda t: (t.next_at, t.id))


def _is_prompt(sent: Sent) -> bool:
    return (
        sent.kind == "post" and bool(sent.blocks) and "Approval needed" in json.dumps(sent.blocks)
    )
