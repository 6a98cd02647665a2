"""Issue 21, item 9, for both built-in agents (refund desk and Claude's tools), on both stores:
one minimum digest period, and an order refunded once however often it is asked for.

The refund desk runs through the engine's loops (tests/integration/test_refund_desk.py's Desk);
Claude runs on the local fake of the Messages API (test_claude_agent.py's World).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import T0
from tests.integration.test_claude_agent import World, tool_results
from tests.integration.test_refund_desk import BOSS, INBOX, Desk, utc
from tests.support import fake_anthropic as api
from tests.support.fake_anthropic import FakeAnthropic
from wakeful.bot.agents.claude_tools import TOOL_SPECS
from wakeful.bot.agents.common import MIN_DIGEST_SECONDS
from wakeful.bot.agents.refund_desk import RefundDesk
from wakeful.core.agent import Run
from wakeful.core.store import Store

TOO_OFTEN = (
    "Digest not set: every {n} is too often; the shortest period is 60 seconds "
    "(e.g. `digest every 1 hour`)."
)


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
def world(store: Store, fake: FakeAnthropic) -> Iterator[World]:
    made = World(store, fake)
    yield made
    made.agent.close()


def digest_timers(store: Store, inbox: str = INBOX) -> list[str]:
    return [t.id for t in store.timers(inbox) if t.id.endswith("/digest")]


# -- one minimum digest period ------------------------------------------------------------------


def test_the_one_minimum_is_a_minute_for_both_agents() -> None:
    assert MIN_DIGEST_SECONDS == 60
    every = TOOL_SPECS["set_digest"]["input_schema"]["properties"]["every_seconds"]
    assert every["minimum"] == MIN_DIGEST_SECONDS


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
    world: World, fake: FakeAnthropic
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
    assert desk.store.answer(approval.id, "yes", BOSS, at + 1) == "yes"
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
    assert [c["key"] for c in desk.store.tool_calls(tool="refund_order")] == [first]


def test_an_order_waiting_for_approval_is_not_asked_again(desk: Desk, store: Store) -> None:
    desk.say("refund order 1006, no wait: refund order 1006")
    desk.tick(T0)
    [approval] = store.approvals(INBOX)
    waiting = (
        f"Order 1006 is already waiting for approval (request {approval.id}); I did not ask again."
    )
    assert f"Handled 1 message.\nAsked for approval to refund order 1006.\n{waiting}" in (
        desk.texts()
    )
    other = Desk(store, clock=desk.clock, sender=desk.sender, holder="worker-b")
    other.say("refund order 1006")  # later, in another run
    other.tick(T0 + 5)
    assert desk.texts()[-1] == f"Handled 1 message.\n{waiting}"  # and no second prompt
    assert len(store.approvals(INBOX)) == 1


def test_two_approvals_for_one_order_refund_it_once(store: Store) -> None:
    """Two people ask at the same moment, so both runs ask before either finishes (the race a
    check alone cannot close); both are approved; the order is refunded once."""
    desk = RefundDesk(store, approvers=(BOSS,))
    claims = []
    for user in ("U7", "U8"):
        inbox = f"T1:{user}"
        payload = {"kind": "message", "text": "refund order 9", "channel": f"D{user}"}
        store.ingest(inbox, "slack", f"Ev-{user}", {**payload, "user": user}, T0)
        claim = store.acquire_and_claim(inbox, f"w-{user}", T0)
        assert claim is not None
        claims.append(claim)
    runs = [desk.run(Run(c.inbox, c.events, None, T0, lambda: None)) for c in claims]
    outcomes = store.finish_and_claim_many(list(zip(claims, runs, strict=True)), T0)
    assert [finished for finished, _ in outcomes] == [True, True]
    approvals = store.open_approvals("refund_order")
    assert len(approvals) == 2
    for n, approval in enumerate(approvals):
        assert store.answer(approval.id, "yes", BOSS, T0 + 10 + n) == "yes"
    worker = Desk(store)
    worker.tick(T0 + 20)
    [refund] = store.tool_calls(tool="refund_order")
    assert refund["key"] in {a.id for a in approvals}
    texts = [r.text for inbox in ("T1:U7", "T1:U8") for r in store.outbox(inbox=inbox)]
    assert texts.count("Refunded order 9.") == 1
    line = f"Order 9 was already refunded on {utc(T0 + 20)} (request {refund['key']})."
    assert texts.count(f"{line} Not refunded again.") == 1


def test_claude_answers_a_refunded_order_with_its_refund(world: World, fake: FakeAnthropic) -> None:
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
    assert [c["key"] for c in world.store.tool_calls(tool="refund_order")] == [approval.id]
