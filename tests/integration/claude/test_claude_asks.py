"""ClaudeAgent's tools that need a yes: the ask ends the run, the answer resumes the call once,
deny policies, one ask a turn, the cap on open approvals (claude/conftest.py)."""

from __future__ import annotations

import pytest

from tests.conftest import T0, MakeStore
from tests.support import fake_anthropic as api
from tests.support.claude_world import (
    BOSS,
    INBOX,
    TTL,
    USER,
    World,
    assert_valid_history,
    tool_results,
)
from tests.support.fake_anthropic import FakeAnthropic
from wakeful.core.store import Store

# -- tools that need a yes -------------------------------------------------------------------


def _ask_for_refund(world: World) -> tuple[int, str]:
    event = world.say("please refund order 42, it arrived broken")
    world.fake.script(
        api.tool_use(
            "refund_order",
            {"order_id": "42", "reason": "arrived broken"},
            "toolu_a1",
            say="I'll ask for approval.",
        )
    )
    world.tick()
    [approval] = world.store.approvals(INBOX)
    return event, approval.id


def test_an_ask_tool_ends_the_run_with_an_approval_prompt_and_a_saved_open_call(
    world: World,
) -> None:
    _, request_id = _ask_for_refund(world)
    [approval] = world.store.approvals(INBOX)
    assert (approval.tool, approval.args) == (
        "refund_order",
        {"order_id": "42", "reason": "arrived broken"},
    )
    assert (approval.requester, approval.approvers, approval.deadline) == (USER, (BOSS,), T0 + TTL)
    assert world.store.recorded_steps(name="refund_order") == []  # nothing runs before a yes
    assert len(world.fake.requests) == 1  # the run ended at the ask
    [prompt] = [r for r in world.rows() if r.ref == request_id]
    assert (prompt.kind, prompt.channel, prompt.priority, prompt.status) == (
        "post",
        "D1",
        "urgent",
        "sent",
    )
    buttons = [el for b in prompt.blocks if b["type"] == "actions" for el in b["elements"]]
    assert sorted((b["action_id"], b["value"]) for b in buttons) == [
        ("approve", request_id),
        ("deny", request_id),
    ]
    assert [r.text for r in world.replies()] == ["I'll ask for approval."]
    state = world.session()
    assert state["messages"][-1]["role"] == "assistant"
    assert state["messages"][-1]["content"][-1]["id"] == "toolu_a1"
    assert state["pending"][request_id]["tool_use_id"] == "toolu_a1"


def test_a_retried_run_asks_under_the_same_request_id_and_one_prompt_is_posted(
    store: Store, fake: FakeAnthropic
) -> None:
    world = World(store, fake, holder="worker-b")
    world.say("please refund order 42, it arrived broken")
    claim = store.acquire_and_claim(INBOX, "worker-a", T0)
    assert claim is not None
    ask = api.tool_use("refund_order", {"order_id": "42", "reason": "broken"}, "toolu_a1")
    fake.script(ask)
    stale = world.runner.run(claim, lambda: store.session(INBOX), T0, lambda: None)
    [asked] = stale.approvals
    # Worker A stalls past its lease; worker B runs the same event again: it replays A's
    # recorded answer (no second call) and asks under the same id.
    world.tick(T0 + store.settings.lease_ttl + 1)
    assert len(fake.requests) == 1
    [approval] = store.approvals(INBOX)
    assert approval.id == asked.id
    assert store.finish(claim, stale, world.now) is False
    assert [r.ref for r in world.rows() if r.ref is not None] == [approval.id]


def test_yes_resumes_the_call_and_refunds_once_even_when_the_resumed_run_is_retried(
    world: World,
) -> None:
    _, request_id = _ask_for_refund(world)
    fake = world.fake
    assert world.store.answer(request_id, "yes", BOSS, T0 + 60).outcome == "yes"

    # Another process picks the answer up; the model is overloaded on the way back.
    second = world.restart("worker-b")
    fake.script(api.error(529))
    second.tick(T0 + 60)
    calls = world.store.recorded_steps(name="refund_order")
    assert [c.key for c in calls] == [request_id]  # the refund ran before the call failed
    [answer_event] = [e for e in world.store.events(INBOX) if e.source == "approval"]
    assert (answer_event.status, answer_event.attempts) == ("pending", 1)
    assert "529" in (answer_event.error or "")

    third = world.restart("worker-c")
    fake.script(api.text("Refunded order 42."))
    third.tick(T0 + 60 + 10)
    assert len(world.store.recorded_steps(name="refund_order")) == 1
    resumed = fake.requests[2]
    # The retry resumes the same saved call; its tool result says the refund was not repeated.
    assert api.plain(fake.requests[1]["messages"][:-1]) == api.plain(resumed["messages"][:-1])
    assert resumed["messages"][-2]["content"][-1]["id"] == "toolu_a1"
    # The retry resumes with the refund's recorded result: the same tool result both times.
    [result] = tool_results(resumed)
    assert result["tool_use_id"] == "toolu_a1" and not result.get("is_error")
    [failed_try] = tool_results(fake.requests[1])
    assert result == failed_try
    assert result["content"] == f"Approved by <@{BOSS}>. Refunded order 42."
    assert world.replies()[-1].text == "Refunded order 42."
    assert world.replies()[-1].priority == "urgent"
    [update] = world.rows("update")
    assert (update.ref, update.status) == (request_id, "sent")
    assert not [b for b in update.blocks if b["type"] == "actions"]
    assert_valid_history(world.session()["messages"])
    assert world.session()["pending"] == {}


@pytest.mark.parametrize("outcome", ["no", "expired"])
def test_no_or_expiry_resumes_with_a_result_that_says_so_and_runs_nothing(
    world: World, outcome: str
) -> None:
    _, request_id = _ask_for_refund(world)
    fake = world.fake
    fake.script(api.text("The refund did not happen."))
    if outcome == "no":
        assert world.store.answer(request_id, "no", BOSS, T0 + 30).outcome == "no"
        world.tick(T0 + 30)
    else:
        world.tick(T0 + TTL - 1)
        assert len(fake.requests) == 1  # not a second early
        world.tick(T0 + TTL)
    [result] = tool_results(fake.requests[1])
    assert result["tool_use_id"] == "toolu_a1" and result["is_error"] is True
    assert ("Denied" if outcome == "no" else "expired") in result["content"]
    assert world.store.recorded_steps(name="refund_order") == []
    assert world.replies()[-1].text == "The refund did not happen."
    [update] = world.rows("update")
    assert (update.ref, update.status) == (request_id, "sent")
    state = world.store.approval(request_id)
    assert state is not None and state.answer == outcome


def test_an_approval_answered_once_the_tool_is_denied_runs_nothing(
    store: Store, fake: FakeAnthropic
) -> None:
    world = World(store, fake)
    _, request_id = _ask_for_refund(world)
    # The operator denies refunds and restarts while the approval is open; then it is approved.
    denied = World(
        store,
        fake,
        clock=world.clock,
        sender=world.sender,
        holder="worker-b",
        policies={"refund_order": "deny"},
    )
    assert store.answer(request_id, "yes", BOSS, T0 + 30).outcome == "yes"
    fake.script(api.text("Refunds are not allowed here; nothing was refunded."))
    denied.tick(T0 + 30)
    [result] = tool_results(fake.requests[1])
    assert result["tool_use_id"] == "toolu_a1" and result["is_error"] is True
    assert result["content"] == (
        f"Approved by <@{BOSS}>, but refused: tool 'refund_order' is not permitted; "
        "nothing was done."
    )
    assert store.recorded_steps(name="refund_order") == []
    assert world.replies()[-1].text == "Refunds are not allowed here; nothing was refunded."


def test_a_deny_policy_refuses_the_tool_without_running_it(
    store: Store, fake: FakeAnthropic
) -> None:
    world = World(store, fake, policies={"refund_order": "deny"})
    world.say("refund order 42")
    fake.script(
        api.tool_use("refund_order", {"order_id": "42", "reason": "asked"}, "toolu_x"),
        api.text("I'm not allowed to refund orders here."),
    )
    world.tick()
    assert store.approvals(INBOX) == [] and store.recorded_steps(name="refund_order") == []
    [result] = tool_results(fake.requests[1])
    assert result["is_error"] is True and "not permitted" in result["content"]
    assert "nothing was done" in result["content"]
    [spec] = [t for t in fake.requests[0]["tools"] if t["name"] == "refund_order"]
    assert "Disabled here" in spec["description"]
    assert [r.text for r in world.replies()] == ["I'm not allowed to refund orders here."]


def test_only_one_approval_is_asked_per_turn_and_allowed_tools_beside_it_run(
    world: World,
) -> None:
    world.say("refund 1 and 2 and remind me in a minute")
    world.fake.script(
        api.tool_uses(
            ("refund_order", {"order_id": "1", "reason": "r"}, "toolu_1"),
            ("refund_order", {"order_id": "2", "reason": "r"}, "toolu_2"),
            ("remind_me", {"text": "check", "in_seconds": 60}, "toolu_3"),
        )
    )
    world.tick()
    [approval] = world.store.approvals(INBOX)
    assert approval.args["order_id"] == "1"
    assert len(world.store.timers(INBOX)) == 2  # the reminder and the approval's expiry
    world.store.answer(approval.id, "yes", BOSS, T0 + 5)
    world.fake.script(api.text("Refunded 1; ask me again for 2."))
    world.tick(T0 + 5)
    results = {r["tool_use_id"]: r for r in tool_results(world.fake.requests[1])}
    assert set(results) == {"toolu_1", "toolu_2", "toolu_3"}
    assert (
        results["toolu_2"]["is_error"] is True
        and "one approval at a time" in (results["toolu_2"]["content"])
    )
    assert "Refunded order 1." in results["toolu_1"]["content"]
    assert_valid_history(world.fake.requests[1]["messages"])


def test_past_the_open_approvals_cap_the_model_is_told_and_nothing_is_asked(
    make_store: MakeStore, fake: FakeAnthropic
) -> None:
    world = World(make_store(max_open_approvals=2), fake)
    for n, order in enumerate(("41", "42", "43")):
        world.say(f"please refund order {order}")
        args = {"order_id": order, "reason": "broken"}
        world.fake.script(api.tool_use("refund_order", args, f"toolu_{n}"))
        if n == 2:  # the third ask is refused: the model hears why and tells the person
            world.fake.script(api.text("I can't ask for more approvals until one is answered."))
        world.tick(T0 + n)
    assert [a.args["order_id"] for a in world.store.approvals(INBOX)] == ["41", "42"]
    [refused] = [r for r in tool_results(world.fake.requests[-1]) if r["tool_use_id"] == "toolu_2"]
    assert refused["is_error"] is True
    assert refused["content"] == (
        "1 approval was not asked: at most 5 per message and 2 open at once "
        "(WAKEFUL_MAX_APPROVALS_PER_RUN, WAKEFUL_MAX_OPEN_APPROVALS). Nothing was done; "
        "tell the person."
    )
    assert world.replies()[-1].text == "I can't ask for more approvals until one is answered."
