"""ClaudeAgent through the real engine, for the tests: a World of a real store running the
three loops (Scheduler, Worker, Dispatcher) tick by tick on a simulated clock, the real
`anthropic` SDK talking HTTP to a local fake of the Messages API (tests/support/fake_anthropic.py)
that answers from a script, and a recording sender for what Slack would be handed. Nothing leaves
127.0.0.1. Its fixtures (`fake`, `world`, `_close_agents`) are the claude modules' too.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import T0
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.recording_sender import RecordingSender
from wakeful.agents import (
    InboxId,
    Message,
    Setup,
)
from wakeful.bot.builtin.claude import (
    ClaudeAgent,
)
from wakeful.bot.builtin.claude_tools import Policy
from wakeful.bot.builtin.conversation import (
    is_clean_user_turn,
)
from wakeful.bot.process.config import Config
from wakeful.bot.process.loading import build_runner, make_setup
from wakeful.core.clock import ManualClock
from wakeful.core.dispatcher import Dispatcher
from wakeful.core.records import OutboxRow
from wakeful.core.scheduler import Scheduler
from wakeful.core.store import Store
from wakeful.core.worker import Worker

TEAM = "T1"
USER = "U1"
BOSS = "UBOSS"
INBOX = InboxId.person(TEAM, USER)
TTL = 600
OPS = "C0OPS"
HOUR = 3600
ROOT = Path(__file__).resolve().parents[2]
_event_ids = itertools.count(1)
_agents: list[ClaudeAgent] = []


class World:
    """One user's world: a ClaudeAgent on the fake API behind the runner `wakeful serve`
    builds (its Slack approval prompts and surface hooks), the three loops, a clock, a sender.
    `zones` is what Slack's users.info says of each person ("" or missing: it could not be
    read), turned into the setup's `time_zone` as production does (bot/process/loading.py)."""

    def __init__(
        self,
        store: Store,
        fake: FakeAnthropic,
        *,
        clock: ManualClock | None = None,
        sender: RecordingSender | None = None,
        holder: str = "worker-a",
        policies: dict[str, Policy] | None = None,
        token_budget: int = 12_000,
        timeout: float = 10.0,
        max_steps: int = 8,
        zones: dict[str, str] | None = None,
        model: str = "claude-test",
        **options: Any,
    ) -> None:
        self.store = store
        self.fake = fake
        self.options: dict[str, Any] = {"model": model, **options}
        self.clock = clock or ManualClock(T0)
        self.sender = sender or RecordingSender(statuses=False)
        self.config = Config(approvers=(BOSS,), settings=replace(store.settings, approval_ttl=TTL))

        known = make_setup(
            self.config, store, lambda user: (zones or {}).get(user, ""), {}, self.clock
        )

        def factory(setup: Setup) -> ClaudeAgent:
            agent = ClaudeAgent(
                replace(setup, time_zone=known.time_zone),
                api_key="test-key",
                base_url=fake.base_url,
                model=model,
                policies=policies,
                token_budget=token_budget,
                timeout=timeout,
                max_steps=max_steps,
                **options,
            )
            _agents.append(agent)
            return agent

        self.runner = build_runner(
            self.config, store, None, factory=factory, env={}, clock=self.clock
        )
        assert isinstance(self.runner.agent, ClaudeAgent)
        self.agent: ClaudeAgent = self.runner.agent
        self.worker = Worker(store=store, clock=self.clock, runner=self.runner, holder=holder)
        self.scheduler = Scheduler(store=store, clock=self.clock)
        self.dispatcher = Dispatcher(store=store, clock=self.clock, sender=self.sender)

    def restart(self, holder: str) -> World:
        """A new process: a fresh agent and loops on the same store, clock and sender."""
        return World(
            self.store,
            self.fake,
            clock=self.clock,
            sender=self.sender,
            holder=holder,
            **self.options,
        )

    @property
    def now(self) -> int:
        return self.clock.now

    def say(self, text: str, *, channel: str = "D1", kind: str = "message") -> int:
        n = next(_event_ids)
        message = Message(
            text=text,
            user=USER,
            team=TEAM,
            channel=channel,
            ts=f"{self.now}.{n:06d}",
            channel_type="im" if kind == "message" else "channel",
            mention=kind == "mention",
        )
        result = self.store.ingest(INBOX, "slack", f"Ev{n:08d}", message.to_wire(), self.now)
        assert result.event_id is not None
        return result.event_id

    def tick(self, at: int | None = None) -> None:
        if at is not None:
            self.clock.now = at
        now = self.clock.now
        self.scheduler.tick(now)
        self.worker.tick(now)
        self.dispatcher.tick(now)

    def rows(self, kind: str | None = None) -> list[OutboxRow]:
        """The inbox's outbox rows of `kind`; by default all but the "is thinking…" status
        (a surface around every run, tested through the HTTP front)."""
        return [
            r
            for r in self.store.outbox(inbox=INBOX)
            if (r.kind == kind if kind is not None else r.kind != "status")
        ]

    def replies(self) -> list[OutboxRow]:
        return [r for r in self.rows("post") if r.ref is None]

    def session(self) -> dict[str, Any]:
        state = self.store.session(INBOX)
        assert isinstance(state, dict)
        return state


def user_text(request: dict[str, Any]) -> str:
    """All text of the request's last user turn."""
    turn = request["messages"][-1]
    assert turn["role"] == "user"
    return "\n".join(b["text"] for b in turn["content"] if b["type"] == "text")


def tool_results(request: dict[str, Any]) -> list[dict[str, Any]]:
    turn = request["messages"][-1]
    return [b for b in turn["content"] if b["type"] == "tool_result"]


def assert_valid_history(turns: list[dict[str, Any]]) -> None:
    """What the Messages API insists on: a user turn first, roles alternating, and every
    tool_use answered by a tool_result in the very next (user) turn."""
    assert turns and turns[0]["role"] == "user" and is_clean_user_turn(turns[0])
    for before, after in itertools.pairwise(turns):
        assert before["role"] != after["role"]
    for i, turn in enumerate(turns):
        if turn["role"] != "assistant":
            continue
        uses = {b["id"] for b in turn["content"] if b["type"] == "tool_use"}
        if not uses:
            continue
        assert i + 1 < len(turns), "a tool_use with no turn after it"
        answered = {b["tool_use_id"] for b in turns[i + 1]["content"] if b["type"] == "tool_result"}
        assert uses <= answered


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic()
    yield server
    server.close()
    assert server.unscripted == 0, "the agent made a request nothing was scripted for"
    assert server.left == 0, "a scripted reply was never asked for"


@pytest.fixture(autouse=True)
def _close_agents() -> Iterator[None]:
    """Every agent a test made closes its HTTP client, so no socket is left to the GC."""
    yield
    while _agents:
        _agents.pop().close()


@pytest.fixture
def world(store: Store, fake: FakeAnthropic) -> World:
    return World(store, fake)
