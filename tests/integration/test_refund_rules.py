"""Issue 21, item 9, for both built-in agents (refund desk and Claude's tools), on both stores:
one minimum digest period, and an order refunded once however often it is asked for.

The refund desk runs through the engine's loops (tests/support/refund_world.py's Desk);
Claude runs on the local fake of the Messages API, built by its own class behind the runner
`wakeful serve` builds (`ClaudeDesk` below).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import T0
from tests.support import fake_anthropic as api
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.recording_sender import RecordingSender
from tests.support.refund_world import (
    BOSS,
    INBOX,
    TEAM,
    USER,
    Desk,
    desk_config,
    desk_runner,
    utc,
)
from wakeful.agents import Message, Setup
from wakeful.agents.testing import Harness
from wakeful.bot.builtin.claude import ClaudeAgent
from wakeful.bot.builtin.claude_tools import TOOL_SPECS
from wakeful.bot.builtin.common import MIN_DIGEST_SECONDS
from wakeful.bot.builtin.refund_desk import RefundDesk
from wakeful.bot.process.config import Config
from wakeful.bot.process.env_values import ConfigError
from wakeful.bot.process.loading import build_runner, make_setup
from wakeful.core.clock import ManualClock
from wakeful.core.dispatcher import Dispatcher
from wakeful.core.inbox_id import InboxId
from wakeful.core.scheduler import Scheduler
from wakeful.core.store import Store
from wakeful.core.worker import Worker

TOO_OFTEN = (
    "Digest not set: every {n} is too often; the shortest period is 60 seconds "
    "(e.g. `digest every 1 hour`)."
)
_ids = itertools.count(1)


class ClaudeDesk:
    """ClaudeAgent on the fake Messages API, behind production's runner and the three loops."""

    def __init__(self, store: Store, fake: FakeAnthropic) -> None:
        self.store = store
        self.clock = ManualClock(T0)
        self.agent: ClaudeAgent | None = None

        def factory(setup: Setup) -> ClaudeAgent:
            self.agent = ClaudeAgent(
                setup, api_key="test-key", base_url=fake.base_url, model="claude-test", timeout=10
            )
            return self.agent

        runner = build_runner(
            desk_config(store), store, None, factory=factory, env={}, clock=self.clock
        )
        self.worker = Worker(store=store, clock=self.clock, runner=runner)
        self.scheduler = Scheduler(store=store, clock=self.clock)
        self.dispatcher = Dispatcher(store=store, clock=self.clock, sender=RecordingSender())

    def say(self, text: str) -> None:
        n = next(_ids)
        message = Message(
            text=text, user=USER, team=TEAM, channel="D1", ts=f"{self.clock.now}.{n:06d}"
        )
        self.store.ingest(INBOX, "slack", f"Ev-claude-{n}", message.to_wire(), self.clock.now)

    def tick(self, at: int | None = None) -> None:
        if at is not None:
            self.clock.now = at
        self.scheduler.tick(self.clock.now)
        self.worker.tick(self.clock.now)
        self.dispatcher.tick(self.clock.now)

    def close(self) -> None:
        if self.agent is not None:
            self.agent.close()


def tool_results(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool results of the request's last (user) turn: what the model was told."""
    turn = request["messages"][-1]
    return [b for b in turn["content"] if b["type"] == "tool_result"]


@pytest.fixture
def desk(store: Store) -> Desk:
    return Desk(store)


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic()
    yield server
    server.close()
    assert server.unscripted == 0 and server.left == 0


@pytest.fixture
def world(store: Store, fake: FakeAnthropic) -> Iterator[ClaudeDesk]:
    made = ClaudeDesk(store, fake)
    yield made
    made.close()


def digest_timers(store: Store, inbox: str = INBOX) -> list[str]:
    return [t.id for t in store.timers(inbox) if t.id.endswith("/digest")]


# -- one minimum digest period ------------------------------------------------------------------


def test_the_one_minimum_is_a_minute_for_both_agents() -> None:
    assert MIN_DIGEST_SECONDS == 60 == Config.from_env({}).min_digest_period
    every = TOOL_SPECS["set_digest"]["input_schema"]["properties"]["every_seconds"]
    assert every["minimum"] == MIN_DIGEST_SECONDS


def test_wakeful_min_digest_period_sets_the_minimum_of_both_agents(store: Store) -> None:
    """A test environment sets WAKEFUL_MIN_DIGEST_PERIOD=1 to see digests in seconds: the
    refund desk (at 2) sets one every 2 seconds and refuses 1, and Claude is offered the
    setting's floor (the module's spec, the default's, untouched); a bad value stops start-up."""
    with Harness(RefundDesk, env={"WAKEFUL_MIN_DIGEST_PERIOD": "2"}) as h:
        assert (
            h.dm("digest every 2 seconds").text
            == "Handled 1 message.\nDigest set: every 2 seconds."
        )
        [timer] = h.advance(0).timers
        assert timer.id.endswith("/digest") and timer.next_at == h.now + 2
        refused = h.dm("digest every 1 second").text
        assert (
            "Digest not set: every 1 second is too often; the shortest period is 2 seconds"
            in refused
        )
    config = Config.from_env({"WAKEFUL_MIN_DIGEST_PERIOD": "1"})
    setup = make_setup(config, store, lambda _user: "", {})
    agent = ClaudeAgent(setup, api_key="k", base_url="http://127.0.0.1:9", model="claude-test")
    try:
        [spec] = [s for s in agent.tool_specs if s["name"] == "set_digest"]
        assert spec["input_schema"]["properties"]["every_seconds"]["minimum"] == 1
        every = TOOL_SPECS["set_digest"]["input_schema"]["properties"]["every_seconds"]
        assert every["minimum"] == MIN_DIGEST_SECONDS
    finally:
        agent.close()
    for bad in ("0", "2d", "soon"):
        with pytest.raises(ConfigError, match="WAKEFUL_MIN_DIGEST_PERIOD"):
            Config.from_env({"WAKEFUL_MIN_DIGEST_PERIOD": bad})


@pytest.mark.parametrize(
    ("asked", "shown"), [("1 seconds", "1 second"), ("59 seconds", "59 seconds")]
)
def test_the_refund_desk_answers_a_too_short_digest_with_a_clear_line(
    desk: Desk, asked: str, shown: str
) -> None:
    desk.say(f"digest every {asked}")
    desk.tick()
    assert desk.texts() == [f"Handled 1 message.\n{TOO_OFTEN.format(n=shown)}"]
    assert digest_timers(desk.store) == []


def test_the_refund_desk_sets_a_digest_of_a_minute(desk: Desk) -> None:
    desk.say("digest every 1 minute")
    desk.tick()
    assert desk.texts() == ["Handled 1 message.\nDigest set: every 1 minute."]
    assert digest_timers(desk.store) == [f"{INBOX}/digest"]


def test_claudes_set_digest_refuses_a_period_under_the_minimum(
    world: ClaudeDesk, fake: FakeAnthropic
) -> None:
    world.say("digest every second please")
    fake.script(
        api.tool_use("set_digest", {"mode": "every", "every_seconds": 1}, "toolu_d"),
        api.text("I can't do it that often."),
    )
    world.tick()
    [result] = tool_results(fake.requests[1])
    assert result["is_error"] is True
    assert result["content"] == TOO_OFTEN.format(n="1 second")
    assert digest_timers(world.store) == []


# -- one refund per order -----------------------------------------------------------------------


def ask_and_approve(desk: Desk, order: str, at: int) -> str:
    """`refund order <order>`, approved by the boss; returns the request id."""
    desk.say(f"refund order {order}")
    desk.tick(at)
    [approval] = [a for a in desk.store.approvals(INBOX) if a.args["order_id"] == order]
    assert desk.store.answer(approval.id, "yes", BOSS, at + 1).outcome == "yes"
    desk.tick(at + 1)
    assert f"Refunded order {order}." in desk.texts()
    return approval.id


def test_a_refunded_order_is_answered_with_its_refund_not_asked_again(desk: Desk) -> None:
    first = ask_and_approve(desk, "1005", T0)
    desk.say("refund order 1005")
    desk.tick(T0 + 60)
    line = f"Order 1005 was already refunded on {utc(T0 + 1)} (request {first})."
    assert desk.texts()[-1] == f"Handled 1 message.\n{line}"
    assert len(desk.store.approvals(INBOX)) == 1
    assert [c.key for c in desk.store.recorded_steps(name="refund_order")] == [first]


def test_an_order_waiting_for_approval_is_not_asked_again(desk: Desk, store: Store) -> None:
    desk.say("refund order 1006, no wait: refund order 1006")
    desk.tick(T0)
    [approval] = store.approvals(INBOX)
    waiting = (
        f"Order 1006 is already waiting for approval (request {approval.id}); I did not ask again."
    )
    assert f"Handled 1 message.\n{waiting}" in desk.texts()  # the ask itself is its prompt
    other = Desk(store, clock=desk.clock, sender=desk.sender, holder="worker-b")
    other.say("refund order 1006")  # later, in another run
    other.tick(T0 + 5)
    assert desk.texts()[-1] == f"Handled 1 message.\n{waiting}"  # and no second prompt
    assert len(store.approvals(INBOX)) == 1


def test_two_approvals_for_one_order_refund_it_once(store: Store) -> None:
    """Two people ask at the same moment, so both runs ask before either finishes (the race a
    check alone cannot close); both are approved; the order is refunded once."""
    _, runner = desk_runner(store)
    claims = []
    for user in ("U7", "U8"):
        inbox = InboxId.person(TEAM, user)
        message = Message(text="refund order 9", user=user, team=TEAM, channel=f"D{user}", ts="1.1")
        store.ingest(inbox, "slack", f"Ev-{user}", message.to_wire(), T0)
        claim = store.acquire_and_claim(inbox, f"w-{user}", T0)
        assert claim is not None
        claims.append(claim)
    runs = [runner.run(c, lambda: None, T0, lambda: None) for c in claims]
    outcomes = store.finish_and_claim_many(list(zip(claims, runs, strict=True)), T0)
    assert [finished for finished, _ in outcomes] == [True, True]
    approvals = store.open_approvals("refund_order")
    assert len(approvals) == 2
    for n, approval in enumerate(approvals):
        assert store.answer(approval.id, "yes", BOSS, T0 + 10 + n).outcome == "yes"
    worker = Desk(store)
    worker.tick(T0 + 20)
    # Each approved request's tool ran once (a step under its request id); one of them refunded.
    ran = store.recorded_steps(name="refund_order")
    assert sorted(s.key for s in ran) == sorted(a.id for a in approvals)
    [refund] = [s for s in ran if s.result["refunded"]]
    [order] = store.recorded_steps(name="refund_order:once")
    # The record is the workspace's: order numbers are per customer (issue 34).
    assert (order.key, order.result["request"]) == (f"{TEAM}:refund_order:9", refund.key)
    texts = [r.text for inbox in ("T1:U7", "T1:U8") for r in store.outbox(inbox=inbox)]
    assert texts.count("Refunded order 9.") == 1
    line = f"Order 9 was already refunded on {utc(T0 + 20)} (request {refund.key})."
    assert texts.count(f"{line} Not refunded again.") == 1


def test_claude_answers_a_refunded_order_with_its_refund(
    world: ClaudeDesk, fake: FakeAnthropic
) -> None:
    world.say("refund A-7 please")
    fake.script(
        api.tool_use("refund_order", {"order_id": "A-7", "reason": "broken"}, "toolu_1"),
    )
    world.tick()
    [approval] = world.store.approvals(INBOX)

    # While it waits for its answer, asking again is answered, not asked again.
    world.say("and refund A-7 again")
    fake.script(
        api.tool_use("refund_order", {"order_id": "A-7", "reason": "again"}, "toolu_2"),
        api.text("It is already waiting for approval."),
    )
    world.tick(T0 + 5)
    [*_, waiting] = tool_results(fake.requests[-1])
    assert waiting["is_error"] is True
    assert waiting["content"] == (
        f"Order A-7 is already waiting for approval (request {approval.id}); I did not ask again."
    )
    assert len(world.store.approvals(INBOX)) == 1

    world.store.answer(approval.id, "yes", BOSS, T0 + 10)
    fake.script(api.text("Refunded."))
    world.tick(T0 + 10)
    world.say("refund A-7 once more")
    fake.script(
        api.tool_use("refund_order", {"order_id": "A-7", "reason": "more"}, "toolu_3"),
        api.text("It was already refunded."),
    )
    world.tick(T0 + 20)
    [done] = tool_results(fake.requests[-1])
    assert done["is_error"] is True
    assert done["content"] == (
        f"Order A-7 was already refunded on {utc(T0 + 10)} (request {approval.id})."
    )
    assert len(world.store.approvals(INBOX)) == 1
    assert [c.key for c in world.store.recorded_steps(name="refund_order")] == [approval.id]
