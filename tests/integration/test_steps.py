"""Durable steps and approvals as one call, through the real worker on both stores.

A step's result is recorded as soon as it returns; a retried run gets it back without calling
again (at least once, never again once recorded). An approved tool runs once, keyed by the
request id, before the agent sees the answer with its result.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import T0, MakeStore
from wakeful.agents import (
    Agent,
    ApprovalAnswer,
    InvalidInput,
    Message,
    Run,
    Setup,
    Tool,
    step_key,
)
from wakeful.bot.process.config import Config
from wakeful.bot.process.loading import build_runner
from wakeful.core.clock import ManualClock
from wakeful.core.inbox_id import InboxId
from wakeful.core.store import Store
from wakeful.core.worker import Worker

INBOX = InboxId.person("T1", "U1")


def said(store: Store, text: str, key: str, at: int = T0) -> int:
    event = Message(text=text, user="U1", team="T1", channel="D1", ts=f"{at}.000100")
    stored = store.ingest(INBOX, "slack", key, event.to_wire(), at)
    assert stored.event_id is not None
    return stored.event_id


def worker(store: Store, agent: Any, clock: ManualClock) -> Worker:
    config = Config.from_env({"WAKEFUL_APPROVERS": "U0BOSS"})
    runner = build_runner(config, store, None, factory=lambda _setup: agent, env={}, clock=clock)
    return Worker(store=store, clock=clock, runner=runner)


class FlakyAfterStep(Agent):
    """Calls one step, then fails the first run: the retry must get the recorded result."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.results: list[Any] = []
        self.runs = 0

    def run(self, run: Run) -> None:
        self.runs += 1
        result = run.step("charge", self._charge)
        self.results.append(result)
        if self.runs == 1:
            raise RuntimeError("crashed after the step")
        run.reply(f"charged {result['n']}", to=run.events[0])

    def _charge(self, key: str) -> dict[str, Any]:
        self.calls.append(key)
        return {"n": len(self.calls), "key": key}


def test_a_retried_run_gets_the_recorded_step_back_without_calling_again(
    make_store: MakeStore,
) -> None:
    store = make_store(backoff_base=1)
    clock = ManualClock(T0)
    agent = FlakyAfterStep()
    loop = worker(store, agent, clock)
    said(store, "charge me", "Ev1")
    loop.tick(clock())
    clock.now += 5
    loop.tick(clock())
    [event] = store.events(INBOX)
    assert event.status == "done" and event.attempts == 2
    assert len(agent.calls) == 1, "the retry called the step again"
    assert agent.results == [{"n": 1, "key": agent.calls[0]}] * 2
    assert agent.calls[0] == step_key(INBOX, _typed(store, event.id), "charge")
    assert [r.text for r in store.outbox(inbox=INBOX)] == ["charged 1"]


def _typed(store: Store, event_id: int) -> Any:
    from wakeful.core.runner import typed

    record = store.event(event_id)
    assert record is not None
    return typed(record)


def test_a_step_key_is_the_same_in_every_copy_of_the_store(make_store: MakeStore) -> None:
    """Keyed by the event's source key, not its row id: a restored or rebuilt store sends the
    system it calls the same key for the same delivery."""
    first, second = make_store(), make_store()
    keys = []
    for store in (first, second):
        said(store, "padding", "Ev0") if store is second else None
        event_id = said(store, "charge me", "Ev1")
        keys.append(step_key(INBOX, _typed(store, event_id), "charge"))
    assert keys[0] == keys[1]


class Refunds(Agent):
    """An approval-gated tool: asked in one call, run once after a yes."""

    def __init__(self) -> None:
        self.done: list[tuple[Any, str]] = []
        self.answers: list[ApprovalAnswer] = []
        self.tools = [Tool("refund", self._refund)]

    def _refund(self, args: Any, key: str) -> dict[str, Any]:
        self.done.append((args, key))
        return {"refunded": args["order"]}

    def run(self, run: Run) -> None:
        for e in run.events:
            if isinstance(e, Message):
                run.ask("refund", {"order": e.text}, summary=f"refund {e.text}", to=e)
            elif isinstance(e, ApprovalAnswer):
                self.answers.append(e)
                run.reply(f"{e.answer}: {e.result}", to=e)


def test_an_approved_tool_runs_once_before_the_agent_sees_its_answer(make_store: MakeStore) -> None:
    store = make_store()
    clock = ManualClock(T0)
    agent = Refunds()
    loop = worker(store, agent, clock)
    said(store, "1005", "Ev1")
    loop.tick(clock())
    [approval] = store.approvals(INBOX)
    assert (approval.summary, approval.channel) == ("refund 1005", "D1")
    prompts = [r for r in store.outbox(inbox=INBOX) if r.ref == approval.id]
    assert len(prompts) == 1 and "refund 1005" in prompts[0].text, "a prompt is always shown"
    assert agent.done == []
    assert store.answer(approval.id, "yes", "U0BOSS", clock() + 1).outcome == "yes"
    loop.tick(clock() + 1)
    assert agent.done == [({"order": "1005"}, approval.id)]
    [answer] = agent.answers
    assert (answer.answer, answer.by, answer.result) == ("yes", "U0BOSS", {"refunded": "1005"})
    rows = store.outbox(inbox=INBOX)
    update = [r for r in rows if r.kind == "update"]
    assert len(update) == 1 and update[0].ref == approval.id, "the prompt shows its outcome"
    assert rows[-1].text == "yes: {'refunded': '1005'}"


@pytest.mark.parametrize("tool", ["nope", ""])
def test_asking_about_a_tool_the_agent_does_not_declare_is_refused(
    make_store: MakeStore, tool: str
) -> None:
    store = make_store()
    clock = ManualClock(T0)
    errors: list[str] = []

    class Asks(Agent):
        tools = (Tool("refund", lambda args, key: None),)

        def run(self, run: Run) -> None:
            try:
                run.ask(tool, {}, summary="x", to=run.events[0])
            except InvalidInput as exc:
                errors.append(str(exc))

    loop = worker(store, Asks(), clock)
    said(store, "hi", "Ev1")
    loop.tick(clock())
    assert errors == [f"no tool {tool!r} to ask about (the agent's tools: refund)"]
    assert store.approvals(INBOX) == []


def test_a_factory_gets_a_setup_with_no_way_to_write(make_store: MakeStore) -> None:
    store = make_store()
    seen: list[Setup] = []

    def factory(setup: Setup) -> Agent:
        seen.append(setup)
        return Refunds()

    config = Config.from_env({"WAKEFUL_APPROVERS": "U0BOSS"})
    env = {
        "OWN": "1",
        "SLACK_BOT_TOKEN": "xoxb-1",
        "SLACK_SIGNING_SECRET": "s",
        "WAKEFUL_DB": "postgresql://u:pw@db/x",
        "WAKEFUL_GITHUB_WEBHOOK_SECRET": "gh",
        "WAKEFUL_WEBHOOKS": "ci=secret",
        "WAKEFUL_TOKEN_KEY": "k",
        "ANTHROPIC_API_KEY": "sk-ant-1",
    }
    build_runner(config, store, None, factory=factory, env=env)
    [setup] = seen
    assert setup.approvers == ("U0BOSS",)
    assert setup.env == {"OWN": "1", "ANTHROPIC_API_KEY": "sk-ant-1"}, "no secret of wakeful's"
    public = {n for n in dir(setup.query) if not n.startswith("_")}
    assert public == {
        "approval",
        "approvals_to_answer",
        "approvers",
        "dead_events",
        "dead_letters",
        "deliveries",
        "is_approver",
        "model_spend",
        "open_approvals",
        "pending_events",
        "step",
        "steps",
        "timers",
    }
