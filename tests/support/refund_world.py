"""RefundDesk, the built-in agent, through the real engine on a simulated clock, for the tests:
a Desk drives a real store with the three loops (Scheduler, Worker, Dispatcher) tick by tick;
the agent is built by its factory and run behind the runner `wakeful serve` builds
(`build_runner`: Slack approval prompts, the surfaces' hooks); events are the typed events the
Slack front stores (`Message(...).to_wire()`); a recording sender keeps what Slack would be
handed. Its `desk` fixture is the refund desk modules' too.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.conftest import T0
from tests.support.recording_sender import RecordingSender
from wakeful.agents import ApprovalAnswer, Message, Run, Setup
from wakeful.bot.builtin.refund_desk import RefundDesk
from wakeful.bot.process.config import Config
from wakeful.bot.process.loading import build_runner, make_setup
from wakeful.bot.slack.zones import ZoneLookup
from wakeful.core.clock import ManualClock
from wakeful.core.dispatcher import Dispatcher
from wakeful.core.inbox_id import InboxId
from wakeful.core.records import OutboxRow
from wakeful.core.runner import Runner
from wakeful.core.scheduler import Scheduler
from wakeful.core.store import Store
from wakeful.core.worker import Worker

TEAM = "T1"
USER = "U1"
BOSS = "UBOSS"
INBOX = InboxId.person(TEAM, USER)
TTL = 600
HOUR = 3600
DAY = 86400
_event_ids = itertools.count(1)


def utc(ts: int) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


class Poisonable:
    """The refund desk, failing every run that holds an event it cannot read (`Unknown`: a
    half-stored Slack message): the way a test makes an event that dies."""

    def __init__(self, inner: RefundDesk) -> None:
        self.inner = inner
        self.tools = inner.tools
        self.greeting = inner.greeting
        self.suggested_prompts = inner.suggested_prompts
        self.home = inner.home

    def run(self, run: Run) -> None:
        unread = [e.id for e in run.events if type(e).__name__ == "Unknown"]
        if unread:
            raise ValueError(f"cannot read events {unread}")
        self.inner.run(run)


def desk_config(store: Store, *, ttl: int = TTL, quiet_digests: bool = False) -> Config:
    """The configuration `wakeful serve` would read: the boss approves, the store's settings
    with the test's approval window."""
    settings = dataclasses.replace(store.settings, approval_ttl=ttl)
    return Config(approvers=(BOSS,), quiet_digests=quiet_digests, settings=settings)


def desk_setup(
    store: Store,
    config: Config,
    clock: Callable[[], int],
    tz_lookup: Callable[[str], str] | None = None,
) -> Setup:
    """The Setup the refund desk's factory is given (a zone look-up without Slack: UTC)."""
    return make_setup(config, store, tz_lookup or ZoneLookup(None), {}, clock)


def desk_runner(
    store: Store,
    *,
    clock: Callable[[], int] = lambda: T0,
    ttl: int = TTL,
    quiet_digests: bool = False,
    tz_lookup: Callable[[str], str] | None = None,
    wrap: Callable[[Any], Any] | None = None,
) -> tuple[RefundDesk, Runner]:
    """The refund desk built by production's loader, and the runner around it."""
    config = desk_config(store, ttl=ttl, quiet_digests=quiet_digests)
    desk = RefundDesk(desk_setup(store, config, clock, tz_lookup))
    agent = Poisonable(desk)
    wrapped = wrap(agent) if wrap else agent
    runner = build_runner(config, store, None, factory=lambda _setup: wrapped, env={}, clock=clock)
    return desk, runner


class Desk:
    """One user's world: RefundDesk, the three loops, a clock and a recording sender."""

    def __init__(
        self,
        store: Store,
        *,
        clock: ManualClock | None = None,
        sender: RecordingSender | None = None,
        holder: str = "worker-a",
        tz_lookup: Callable[[str], str] | None = None,
        wrap: Callable[[Any], Any] | None = None,
        ttl: int = TTL,
        quiet_digests: bool = False,
    ) -> None:
        self.store = store
        self.clock = clock or ManualClock(T0)
        self.sender = sender or RecordingSender()
        self.agent, self.runner = desk_runner(
            store,
            clock=self.clock,
            ttl=ttl,
            quiet_digests=quiet_digests,
            tz_lookup=tz_lookup,
            wrap=wrap,
        )
        self.worker = Worker(store=store, clock=self.clock, runner=self.runner, holder=holder)
        self.scheduler = Scheduler(store=store, clock=self.clock)
        self.dispatcher = Dispatcher(store=store, clock=self.clock, sender=self.sender)

    @property
    def now(self) -> int:
        return self.clock.now

    def say(
        self,
        text: str,
        *,
        channel: str = "D1",
        kind: str = "message",
        ts: str | None = None,
        thread_ts: str | None = None,
        payload: dict[str, Any] | None = None,
    ) -> int:
        """Store a Slack message or mention as the app does; return its event id."""
        n = next(_event_ids)
        message = Message(
            text=text,
            user=USER,
            team=TEAM,
            channel=channel,
            ts=ts or f"{self.now}.{n:06d}",
            thread_ts=thread_ts,
            channel_type="im" if kind == "message" else "channel",
            mention=kind == "mention",
        )
        body = payload or message.to_wire()
        result = self.store.ingest(INBOX, "slack", f"Ev{n:08d}", body, self.now)
        assert result.event_id is not None
        return result.event_id

    def poison(self) -> int:
        """An event the agent cannot handle (a Slack message stored without its conversation):
        every run of it fails."""
        return self.say("", payload={"kind": "message", "text": "?", "user": USER})

    def tick(self, at: int | None = None) -> None:
        if at is not None:
            self.clock.now = at
        now = self.clock.now
        self.scheduler.tick(now)
        self.worker.tick(now)
        self.dispatcher.tick(now)

    def settle(self, at: int) -> None:
        """Tick at `at` until no event of the inbox waits or runs (a bounded number of rounds:
        a retried event runs alone, and a slow round leaves the next for the next tick)."""
        for _ in range(20):
            self.tick(at)
            if not self.store.events(INBOX, "open"):
                return
        raise AssertionError(f"events still open: {self.store.events(INBOX, 'open')}")

    def rows(self, kind: str | None = None) -> list[OutboxRow]:
        return [r for r in self.store.outbox(inbox=INBOX) if kind is None or r.kind == kind]

    def texts(self) -> list[str]:
        return [r.text for r in self.rows("post")]

    def with_prefix(self, prefix: str) -> list[OutboxRow]:
        posts = [r for r in self.rows() if r.kind in ("post", "digest")]
        return [r for r in posts if r.text.startswith(prefix)]

    def kill_poison(self, event_id: int) -> None:
        """Run the poison event until it is dead (max_attempts claims, then one more)."""
        for _ in range(4):
            self.tick(self.now + 100)
        event = self.store.event(event_id)
        assert event is not None and event.status == "dead"


class CrashAfterDelegatingOnce:
    """Runs the real agent, then fails the first run that handled an approval answer: the
    refund tool has run, `finish` has not."""

    def __init__(self, inner: Any, crash: BaseException) -> None:
        self.inner = inner
        self.tools = inner.tools
        self.crash = crash
        self.crashed = False

    def run(self, run: Run) -> None:
        self.inner.run(run)
        if not self.crashed and any(isinstance(e, ApprovalAnswer) for e in run.events):
            self.crashed = True
            raise self.crash


class ProcessDied(BaseException):
    """A crash nothing in the worker catches: no finish, the lease is left to lapse."""


@pytest.fixture
def desk(store: Store) -> Desk:
    return Desk(store)
