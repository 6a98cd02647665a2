"""RefundDesk's boundaries: no token for the agent, its own steps and the tools it offers, asks
that run once per request, the approval caps (refund_desk/conftest.py)."""

from __future__ import annotations

import dataclasses
import inspect
import json
from typing import Any

import pytest

from tests.conftest import T0
from tests.support.recording_sender import RecordingSender
from tests.support.refund_world import (
    BOSS,
    INBOX,
    TEAM,
    USER,
    Desk,
    _event_ids,
    desk_config,
    desk_runner,
    utc,
)
from wakeful.agents import Agent, ApprovalAnswer, InvalidInput, Message, Run, Setup, Tool
from wakeful.bot.builtin.refund_desk import RefundDesk
from wakeful.bot.process.loading import build_runner, make_setup
from wakeful.bot.slack.zones import ZoneLookup
from wakeful.core.clock import ManualClock
from wakeful.core.dispatcher import Dispatcher
from wakeful.core.scheduler import Scheduler
from wakeful.core.store import Store
from wakeful.core.worker import Worker

# -- the agent's boundaries ----------------------------------------------------------------


def test_the_agent_is_never_given_a_token(store: Store) -> None:
    env = {
        "SLACK_BOT_TOKEN": "xoxb-secret",
        "SLACK_APP_TOKEN": "xapp-secret",
        "SLACK_SIGNING_SECRET": "signing-secret",
        "REFUND_LEDGER_URL": "http://127.0.0.1:9/ledger",
    }
    setup = make_setup(desk_config(store), store, ZoneLookup(None), env)
    assert not [f.name for f in dataclasses.fields(Setup) if "token" in f.name.lower()]
    assert dict(setup.env) == {"REFUND_LEDGER_URL": "http://127.0.0.1:9/ledger"}
    assert not [name for name in inspect.signature(Run).parameters if "token" in name.lower()]
    params = inspect.signature(RefundDesk).parameters
    assert not [name for name in params if "token" in name.lower()]
    with pytest.raises(TypeError):
        RefundDesk(setup, token="xoxb-secret")  # type: ignore[call-arg]


class Spy:
    """A tool that counts its calls: (args, idempotency key) each time it acts."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, str]] = []

    def __call__(self, args: Any, key: str) -> dict[str, Any]:
        self.calls.append((args, key))
        return {"done": args, "call": len(self.calls)}


class Asker(Agent):
    """`ask <what>` asks for `tool` with {"what": ...}; `step` runs an own step; an answer is
    told with the tool's result. `fail_once` fails the first run after it acted."""

    def __init__(self, tool: Spy | None = None, *, fail_once: bool = False) -> None:
        self.tools = [Tool("tool", tool)] if tool else []
        self.looked: list[str] = []
        self.fail_once = fail_once

    def run(self, run: Run) -> None:
        for e in run.events:
            if isinstance(e, Message) and e.text.startswith("ask "):
                for what in e.text.split()[1:]:
                    try:
                        asked = run.ask("tool", {"what": what}, summary=f"do {what}", to=e)
                    except InvalidInput as exc:
                        asked = f"refused: {exc}"
                    run.reply(f"asked: {asked}", to=e)
            elif isinstance(e, Message) and e.text == "step":
                found = run.step("look_up", self._look)
                run.reply(f"looked up: {found}", to=e)
            elif isinstance(e, ApprovalAnswer):
                run.reply(f"{e.answer}: {json.dumps(e.result)} {e.error or ''}".strip(), to=e)
        if self.fail_once:
            self.fail_once = False
            raise RuntimeError("the run fails after acting")

    def _look(self, key: str) -> str:
        self.looked.append(key)
        return f"order 1 is late ({len(self.looked)})"


class World:
    """A custom agent behind production's runner, the loops, a clock and a sender."""

    def __init__(self, store: Store, agent: Any, clock: ManualClock | None = None) -> None:
        self.store = store
        self.clock = clock or ManualClock(T0)
        config = desk_config(store)
        runner = build_runner(
            config, store, None, factory=lambda _s: agent, env={}, clock=self.clock
        )
        self.worker = Worker(store=store, clock=self.clock, runner=runner)
        self.scheduler = Scheduler(store=store, clock=self.clock)
        self.dispatcher = Dispatcher(store=store, clock=self.clock, sender=RecordingSender())

    def say(self, text: str) -> None:
        n = next(_event_ids)
        message = Message(text=text, user=USER, team=TEAM, channel="D1", ts=f"{T0}.{n:06d}")
        self.store.ingest(INBOX, "slack", f"Ev{n:08d}", message.to_wire(), self.clock.now)

    def tick(self, at: int) -> None:
        self.clock.now = at
        self.scheduler.tick(at)
        self.worker.tick(at)
        self.dispatcher.tick(at)

    def texts(self) -> list[str]:
        return [r.text for r in self.store.outbox(inbox=INBOX) if r.kind == "post"]


def test_an_own_step_runs_at_once_with_its_key_and_a_retry_gets_its_result(store: Store) -> None:
    """What a tool allowed without asking was: it runs in the run, with a stable key; a retried
    run gets its recorded result back instead of calling it again."""
    agent = Asker(fail_once=True)
    world = World(store, agent)
    world.say("step")
    world.tick(T0)
    assert len(agent.looked) == 1 and world.texts() == []  # it acted; the run failed after
    world.tick(T0 + 100)  # past the backoff: the retry
    assert len(agent.looked) == 1
    assert world.texts() == ["looked up: order 1 is late (1)"]
    [step] = store.recorded_steps(inbox=INBOX, name="look_up")
    assert (step.key, step.result) == (agent.looked[0], "order 1 is late (1)")


def test_a_tool_the_agent_does_not_offer_is_neither_asked_for_nor_run(store: Store) -> None:
    """What a denied tool was: refused without running, whether asked for or answered."""
    spy = Spy()
    world = World(store, Asker(spy))
    world.say("ask wipe")
    world.tick(T0)
    [approval] = store.approvals(INBOX)
    # The agent no longer offers the tool (a new version) when the yes arrives: nothing runs.
    later = World(store, Asker(None), clock=world.clock)
    assert store.answer(approval.id, "yes", BOSS, T0 + 5).outcome == "yes"
    later.tick(T0 + 5)
    assert spy.calls == []
    assert store.recorded_steps(inbox=INBOX) == []
    assert world.texts()[-1] == "yes: null the agent has no tool 'tool'; nothing ran"
    # And it cannot ask for a tool it does not offer.
    later.say("ask wipe")
    later.tick(T0 + 10)
    assert world.texts()[-1] == (
        "asked: refused: no tool 'tool' to ask about (the agent's tools: none)"
    )
    assert len(store.approvals(INBOX)) == 1


def test_asking_runs_nothing_and_a_yes_runs_the_tool_once_per_request(store: Store) -> None:
    """What an `ask` tool was: nothing runs before a yes; after it the tool runs once per
    request id (its idempotency key), also when the answer's run fails and is retried."""
    spy = Spy()
    agent = Asker(spy)
    world = World(store, agent)
    world.say("ask one two")
    world.tick(T0)
    first, second = store.approvals(INBOX)
    assert spy.calls == []
    assert world.texts()[:2] == [f"asked: {first.id}", f"asked: {second.id}"]
    prompts = [r for r in store.outbox(inbox=INBOX) if r.ref in (first.id, second.id)]
    assert [r.text for r in prompts] == [
        f"Approval needed: do one for <@{USER}>",
        f"Approval needed: do two for <@{USER}>",
    ]
    agent.fail_once = True
    for approval in (first, second):
        assert store.answer(approval.id, "yes", BOSS, T0 + 5).outcome == "yes"
    world.tick(T0 + 5)  # both tools run; the run fails after
    for at in (T0 + 200, T0 + 400):  # the retries (each answer alone) get their results back
        world.tick(at)
    assert spy.calls == [({"what": "one"}, first.id), ({"what": "two"}, second.id)]
    assert sorted(t for t in world.texts() if t.startswith("yes")) == [
        'yes: {"done": {"what": "one"}, "call": 1}',
        'yes: {"done": {"what": "two"}, "call": 2}',
    ]
    assert sorted(s.key for s in store.recorded_steps(name="tool")) == sorted([first.id, second.id])


def test_the_refund_tool_refunds_once_per_request_and_once_per_order(store: Store) -> None:
    desk, _ = desk_runner(store)
    [refund] = desk.tools
    assert refund.name == "refund_order"
    results = [refund.fn({"order_id": "5"}, key) for key in ("refund-x", "refund-x", "refund-y")]
    assert results[:2] == [{"refunded": True, "order_id": "5"}] * 2
    assert results[2]["refunded"] is False
    assert results[2]["already"] == (
        f"Order 5 was already refunded on {utc(T0)} (request refund-x)."
    )
    [record] = store.recorded_steps(name="refund_order:once")
    assert (record.key, record.result) == (
        "refund_order:5",
        {"order_id": "5", "request": "refund-x"},
    )


# -- the approval caps ---------------------------------------------------------------------

CAPS = "(WAKEFUL_MAX_APPROVALS_PER_RUN, WAKEFUL_MAX_OPEN_APPROVALS)"


def test_a_message_naming_2222_orders_asks_for_5_and_says_once_how_many_were_not(
    desk: Desk,
) -> None:
    text = " ".join(f"refund order {n:04d}" for n in range(2222))
    assert len(text) > 39_000
    desk.say(text)
    desk.tick()
    assert [a.args["order_id"] for a in desk.store.approvals(INBOX)] == [
        "0000",
        "0001",
        "0002",
        "0003",
        "0004",
    ]
    assert sum(r.text.startswith("Approval needed") for r in desk.rows()) == 5
    [reply] = desk.with_prefix("Handled 1 message.")
    assert reply.text.splitlines()[1:] == [  # the five asks are their prompts, said once
        "I asked for 5 approvals; 2217 more were not asked: at most 5 per message and 20 open "
        f"at once {CAPS}.",
    ]
    assert sum(CAPS in r.text for r in desk.rows()) == 1  # told once: the engine had nothing to add


def test_past_20_open_approvals_a_refund_is_not_asked_and_the_person_is_told(
    desk: Desk,
) -> None:
    for n in range(4):
        desk.say(" ".join(f"refund order {n}{k}" for k in range(5)))
        desk.tick(T0 + n)
    assert len([a for a in desk.store.approvals(INBOX) if a.answer is None]) == 20
    desk.say("refund order 77")
    desk.tick(T0 + 10)
    assert len(desk.store.approvals(INBOX)) == 20
    assert desk.texts()[-1] == (
        "Handled 1 message.\n1 approval was not asked: at most 5 per message and 20 open at "
        f"once {CAPS}."
    )
