"""What one model turn, and one day, of the Claude agent may do (issue 34, item 5): at most
WAKEFUL_CLAUDE_MAX_TOOL_CALLS_PER_TURN tool calls of a turn run (the rest are answered to the
model as errors), `remind_me` sets no timer past WAKEFUL_MAX_TIMERS_PER_INBOX, and no model call
is made once a person's (WAKEFUL_CLAUDE_BUDGET_PER_PERSON_DAY) or a workspace's
(WAKEFUL_CLAUDE_BUDGET_PER_WORKSPACE_DAY) model spend of the last 24 hours, as the run log
recorded it, reaches its budget: one line to the person instead, and a metric.

The real engine and store (both backends), the real `anthropic` SDK against the local fake of
the Messages API, which bills each request as the real API does."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tests.conftest import T0, MakeStore
from tests.support import fake_anthropic as api
from tests.support.claude_world import (
    INBOX,
    World,
    assert_valid_history,
    fake,
    tool_results,
)
from tests.support.fake_anthropic import FakeAnthropic
from wakeful.agents import InboxId, InvalidInput, Message, SpendBudget
from wakeful.bot.builtin.claude import factory
from wakeful.bot.builtin.claude_prices import DEFAULT_BUDGET, Price
from wakeful.bot.process.config import Config
from wakeful.bot.process.loading import make_setup
from wakeful.core import metrics
from wakeful.core.store import Store
from wakeful.devtools.audit import runs

__all__ = ["fake"]  # the fixture of tests/support/claude_world.py, used here too

DAY = 86_400
MODEL = "claude-test"
DEAR = {MODEL: Price.of(1000, 1000)}
"""A price at which every call of these tests costs a dollar or more ($0.001 a token)."""
PERSON = "WAKEFUL_CLAUDE_BUDGET_PER_PERSON_DAY"
WORKSPACE = "WAKEFUL_CLAUDE_BUDGET_PER_WORKSPACE_DAY"
TOOL_CAP = (
    "Not run: at most 10 tool calls per turn (WAKEFUL_CLAUDE_MAX_TOOL_CALLS_PER_TURN); nothing "
    "was done for this one. Tell the person what was not done."
)
TIMER_CAP = (
    "1 timer was not set: at most 50 reminders and timers at once "
    "(WAKEFUL_MAX_TIMERS_PER_INBOX). Nothing was done; tell the person."
)

_ids = itertools.count(1)


def reminders(n: int, turn: int) -> api.Scripted:
    """One assistant turn calling remind_me `n` times."""
    return api.tool_uses(
        *(
            ("remind_me", {"text": f"water {turn}.{i}", "in_seconds": 600 + i}, f"toolu_{turn}_{i}")
            for i in range(n)
        )
    )


def refusals(scope: str) -> float:
    labels = {"scope": scope}
    value = metrics.REGISTRY.get_sample_value("wakeful_model_budget_refusals_total", labels)
    return value or 0.0


def spent(store: Store, inbox: str = INBOX) -> float:
    """What the run log recorded of the inbox's model calls."""
    return sum(u.cost or 0.0 for r in runs(store, inbox) for u in r.usage.values())


def line(scope: str, cost: float, budget: float) -> str:
    whose = "for you" if scope == "person" else "in this workspace"
    setting = PERSON if scope == "person" else WORKSPACE
    return (
        f"I can't answer right now: my model calls {whose} cost ${cost:.2f} in the last 24 "
        f"hours, and the budget is ${budget:.2f} ({setting}). It frees up as those calls pass "
        "a day old."
    )


def say_as(world: World, team: str, user: str, text: str) -> InboxId:
    """A DM from someone else than the world's own person."""
    inbox = InboxId.person(team, user)
    n = next(_ids)
    body = Message(text=text, user=user, team=team, channel=f"D{user}", ts=f"{world.now}.{n}")
    assert world.store.ingest(inbox, "slack", f"Other{n:06d}", body.to_wire(), world.now).event_id
    return inbox


def posts(store: Store, inbox: str) -> list[str]:
    return [r.text for r in store.outbox(inbox=inbox) if r.kind == "post" and r.ref is None]


# -- tool calls per turn ---------------------------------------------------------------------


def test_a_turn_of_60_calls_runs_10_and_the_model_hears_the_rest_did_not(
    store: Store, fake: FakeAnthropic
) -> None:
    world = World(store, fake)
    world.say("remind me to drink water every ten minutes today")
    fake.script(reminders(60, 0), api.text("I set 10 reminders; ask again for more."))
    world.tick()
    assert len(store.timers(INBOX)) == 10
    results = tool_results(fake.requests[1])
    assert len(results) == 60  # every tool_use has its result
    assert all(not r.get("is_error") for r in results[:10])
    assert [(r["is_error"], r["content"]) for r in results[10:]] == [(True, TOOL_CAP)] * 50
    assert_valid_history(fake.requests[1]["messages"])
    assert [r.text for r in world.replies()] == ["I set 10 reminders; ask again for more."]


def test_six_turns_of_60_reminders_leave_50_timers_and_the_model_hears_why(
    store: Store, fake: FakeAnthropic
) -> None:
    """The issue's figure: 6 turns of 60 remind_me calls made 360 timers, each a paid model
    call when it fires. Now 10 run per turn, and the timer cap stops the sixth turn's."""
    world = World(store, fake)
    for turn in range(6):
        world.say(f"remind me 60 times ({turn})")
        fake.script(reminders(60, turn), api.text(f"Turn {turn}."))
        world.tick(T0 + turn)
    assert len(store.timers(INBOX)) == 50
    last = tool_results(fake.requests[-1])
    assert [r["content"] for r in last[:10]] == [TIMER_CAP] * 10
    assert [r["content"] for r in last[10:]] == [TOOL_CAP] * 50


def test_past_the_timer_cap_remind_me_is_refused_and_the_model_says_so(
    store: Store, fake: FakeAnthropic
) -> None:
    world = World(store, fake, max_tool_calls=100)
    world.say("remind me 60 times")
    fake.script(reminders(60, 0), api.text("I could set only 50 reminders."))
    world.tick()
    assert len(store.timers(INBOX)) == 50
    results = tool_results(fake.requests[1])
    assert [r["content"] for r in results[50:]] == [TIMER_CAP] * 10
    # The model said it: wakeful does not say it a second time.
    assert [r.text for r in world.replies()] == ["I could set only 50 reminders."]


# -- the spend budget ------------------------------------------------------------------------


def test_past_a_persons_budget_no_call_is_made_and_the_person_is_told_once_a_run(
    store: Store, fake: FakeAnthropic
) -> None:
    world = World(store, fake, price_table=DEAR, budget=SpendBudget(per_person=1.0))
    world.say("hi")
    fake.script(api.text("Hello."))
    world.tick()
    first = spent(store)
    assert first >= 1.0  # one call crossed the budget: it was made (the cost is known after)
    before = refusals("person")
    for text in ("are you there?", "hello?", "anyone?"):  # one run, one line
        world.say(text)
    world.tick(T0 + 60)
    assert fake.calls == 1  # no call
    assert [r.text for r in world.replies()] == ["Hello.", line("person", first, 1.0)]
    assert world.replies()[-1].priority == "urgent"
    assert refusals("person") - before == 1
    world.say("still nothing?")  # a later message is a later run: it is answered too
    world.tick(T0 + 120)
    assert fake.calls == 1 and refusals("person") - before == 2
    assert world.replies()[-1].text == line("person", first, 1.0)
    # What the model was told stays a valid conversation, with the line as its answer.
    state = world.session()
    assert_valid_history(state["messages"])
    assert state["messages"][-1]["content"][0]["text"] == line("person", first, 1.0)
    # Someone else of the same workspace has a budget of their own.
    other = say_as(world, "T1", "U2", "hi")
    fake.script(api.text("Hi U2."))
    world.tick(T0 + 180)
    assert posts(store, other) == ["Hi U2."]
    # A day after the call, its cost no longer counts.
    [logged] = runs(store, INBOX)[:1]
    world.say("and now?")
    fake.script(api.text("Here again."))
    world.tick(logged.finished_at + DAY + 1)
    assert world.replies()[-1].text == "Here again."


def test_the_calls_of_the_run_itself_count_before_its_next_call(
    store: Store, fake: FakeAnthropic
) -> None:
    """A tool loop stops at the budget: the call after a dear one is not made."""
    world = World(store, fake, price_table=DEAR, budget=SpendBudget(per_person=1.0))
    world.say("remind me in 10 minutes to stretch")
    fake.script(reminders(1, 0))  # the second call, with the tool's result, is never made
    world.tick()
    assert fake.calls == 1
    assert len(store.timers(INBOX)) == 1  # the tool the first call asked for did run
    [reply] = world.replies()
    assert reply.text == line("person", spent(store), 1.0)
    assert_valid_history(world.session()["messages"])


def test_a_reminder_due_over_budget_is_still_said(store: Store, fake: FakeAnthropic) -> None:
    world = World(store, fake, price_table=DEAR, budget=SpendBudget(per_person=1.0))
    world.say("remind me in 2 minutes to call the courier")
    fake.script(
        api.tool_use("remind_me", {"text": "call the courier", "in_seconds": 120}, "toolu_r1")
    )
    world.tick()  # the first call crossed the budget: the second was not made
    world.tick(T0 + 120)
    assert fake.calls == 1
    assert world.replies()[-1].text == (
        line("person", spent(store), 1.0) + "\nReminder: call the courier"
    )


def test_past_a_workspaces_budget_its_people_get_no_call_and_other_workspaces_do(
    store: Store, fake: FakeAnthropic
) -> None:
    budget = SpendBudget(per_person=1000.0, per_workspace=1.0)
    world = World(store, fake, price_table=DEAR, budget=budget)
    world.say("hi")
    fake.script(api.text("Hello."))
    world.tick()
    before = refusals("workspace")
    colleague = say_as(world, "T1", "U2", "hi")
    world.tick(T0 + 10)
    assert posts(store, colleague) == [line("workspace", spent(store), 1.0)]
    assert refusals("workspace") - before == 1
    elsewhere = say_as(world, "T2", "U3", "hi")
    fake.script(api.text("Hello, T2."))
    world.tick(T0 + 20)
    assert posts(store, elsewhere) == ["Hello, T2."]
    assert fake.calls == 2


def test_a_model_with_no_price_is_not_held_by_a_budget(store: Store, fake: FakeAnthropic) -> None:
    world = World(store, fake, budget=SpendBudget(per_person=0.000001))
    for n in range(3):
        world.say(f"hi {n}")
        fake.script(api.text(f"Hello {n}."))
        world.tick(T0 + n)
    assert [r.text for r in world.replies()] == ["Hello 0.", "Hello 1.", "Hello 2."]


# -- the settings ------------------------------------------------------------------------------


def test_the_limits_are_read_from_the_environment_and_checked(make_store: MakeStore) -> None:
    store = make_store()

    def made(**env: str) -> Any:
        setup = make_setup(Config(), store, lambda _u: "", {"ANTHROPIC_API_KEY": "k", **env})
        agent = factory(setup)
        agent.close()
        return agent

    plain = made()
    assert (plain.max_tool_calls, plain.caller.budget) == (10, DEFAULT_BUDGET)
    assert SpendBudget(per_person=5.0, per_workspace=None) == DEFAULT_BUDGET
    set_ = made(
        WAKEFUL_CLAUDE_MAX_TOOL_CALLS_PER_TURN="3",
        WAKEFUL_CLAUDE_BUDGET_PER_PERSON_DAY="off",
        WAKEFUL_CLAUDE_BUDGET_PER_WORKSPACE_DAY="$120.50",
    )
    assert set_.max_tool_calls == 3
    assert set_.caller.budget == SpendBudget(per_person=None, per_workspace=120.5)
    for name, value in (
        ("WAKEFUL_CLAUDE_MAX_TOOL_CALLS_PER_TURN", "0"),
        ("WAKEFUL_CLAUDE_MAX_TOOL_CALLS_PER_TURN", "ten"),
        (PERSON, "0"),
        (PERSON, "-5"),
        (PERSON, "five"),
        (WORKSPACE, "nan"),
    ):
        with pytest.raises(InvalidInput, match=name):
            made(**{name: value})


def test_the_spend_read_is_the_run_logs_and_a_team_apart(store: Store) -> None:
    """`Query.model_spend`: the run log's costs of an inbox and its workspace since a time."""
    from wakeful.core import tenancy
    from wakeful.core.effects import Effects
    from wakeful.core.query import Query
    from wakeful.core.usage import ModelSpend, ModelUsage

    def run(inbox: str, cost: float | None, at: int) -> None:
        n = next(_ids)
        store.ingest(inbox, "slack", f"spend-{n}", {"text": "x"}, at)
        claim = store.acquire_and_claim(inbox, "W", at)
        assert claim is not None
        usage = [ModelUsage("m", input=1, cost=cost), ModelUsage("n", input=1, cost=None)]
        assert store.finish(claim, Effects(usage=usage), at, release=True)

    run("T1:U1", 1.25, T0)
    run("T1:U1", 0.5, T0 + 10)
    run("T1:U2", 2.0, T0 + 20)
    run("T2:U1", 4.0, T0 + 30)
    run("T1:U1", None, T0 + 40)  # no priced call: nothing
    run("channel:C1", 8.0, T0 + 50)
    spend = store.model_spend("T1:U1", T0)
    assert (spend.inbox, spend.workspace) == (pytest.approx(1.75), pytest.approx(3.75))
    later = store.model_spend("T1:U1", T0 + 5)
    assert (later.inbox, later.workspace) == (pytest.approx(0.5), pytest.approx(2.5))
    conversation = store.model_spend("channel:C1", T0)
    assert (conversation.inbox, conversation.workspace) == (pytest.approx(8.0), None)
    assert store.model_spend("T9:U9", T0).inbox == 0.0
    # An agent's query, in a run of workspace T2, sees nothing of T1's unless it asks for all.
    query = Query(store)
    with tenancy.serving("T2:U1"):
        assert query.model_spend("T1:U1", T0) == ModelSpend(0.0, None)
        assert query.model_spend("T2:U1", T0) == ModelSpend(4.0, 4.0)
        assert query.model_spend("T1:U1", T0, everywhere=True).workspace == pytest.approx(3.75)


def test_the_pages_show_the_lines_as_they_are() -> None:
    from pathlib import Path

    from wakeful.agents import OverBudget
    from wakeful.bot.builtin.claude_prompt import over_budget_line

    page = (Path(__file__).resolve().parents[2] / "docs" / "claude.md").read_text()
    assert over_budget_line(OverBudget("person", 5.02, 5.0)) in page
    assert line("person", 5.02, 5.0) == over_budget_line(OverBudget("person", 5.02, 5.0))
    for name in ("WAKEFUL_CLAUDE_MAX_TOOL_CALLS_PER_TURN", PERSON, WORKSPACE):
        assert name in page
