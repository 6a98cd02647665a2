"""Refunds through Stripe: the refund desk, built by production's loader with
`WAKEFUL_REFUNDS=stripe`, refunding through Stripe's own SDK pointed at the credential gateway
(the real app on a real server, reading this store's revocations), in front of the fake Stripe
API (a real HTTP server). Both stores. What is asserted is what the person sees (the outbox
rows, the posts a recording sender was handed) and what Stripe holds (the fake's refunds and
the requests it received). How the tool reads each failure on its own is
test_stripe_refund_failures.py; here, what the person is told of it (issue 33): a failure that
stands once, at once; a wait once ("not done yet"), then the outcome.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import T0
from tests.support.gateway import audit_lines, gateway_in_thread, write_config
from tests.support.recording_sender import RecordingSender
from tests.support.refund_world import BOSS, INBOX, TEAM, USER
from wakeful.agents import Message, Tool, WebhookDelivery
from wakeful.bot.builtin.refund_desk import RefundDesk
from wakeful.bot.process.config import Config
from wakeful.bot.process.loading import build_runner, make_setup
from wakeful.bot.slack.zones import ZoneLookup
from wakeful.core.clock import ManualClock
from wakeful.core.dispatcher import Dispatcher
from wakeful.core.inbox_id import InboxId
from wakeful.core.scheduler import Scheduler
from wakeful.core.store import Store
from wakeful.core.worker import Worker
from wakeful.devtools.fake_stripe import FakeStripe

HOOKS = "C0HOOKS"
HOOKS_INBOX = InboxId.conversation(HOOKS)
REFUNDED = re.compile(r"^Refunded order (\S+) through Stripe \((re_\w+), (\d+\.\d\d) USD\)\.$")
NOT_YET = re.compile(r"not (been )?done yet")


class ProcessDied(BaseException):
    """The worker dies: nothing in it catches this, no finish is written."""


class World:
    """The desk behind a worker, a gateway in front of the fake Stripe, one person."""

    def __init__(self, store: Store, fake: FakeStripe, gateway: dict[str, str]) -> None:
        self.store, self.fake = store, fake
        self.clock = ManualClock(T0)
        config = Config(approvers=(BOSS,), settings=store.settings)
        env = {"WAKEFUL_REFUNDS": "stripe", **gateway}
        setup = make_setup(config, store, ZoneLookup(None), env, self.clock)
        self.desk = RefundDesk(setup)
        self.crash_next = False

        def refund(args: Any, key: str) -> Any:
            result = self.desk._refund(args, key)
            if self.crash_next:  # Stripe refunded; the worker dies before the result is kept
                self.crash_next = False
                raise ProcessDied
            return result

        self.desk.tools = [Tool("refund_order", refund)]
        runner = build_runner(config, store, None, factory=lambda _s: self.desk, env=env)
        self.sender = RecordingSender()
        self.worker = Worker(store=store, clock=self.clock, runner=runner, holder="w")
        self.scheduler = Scheduler(store=store, clock=self.clock)
        self.dispatcher = Dispatcher(store=store, clock=self.clock, sender=self.sender)
        self.n = 0

    def say(self, text: str) -> None:
        self.n += 1
        message = Message(text=text, user=USER, team=TEAM, channel="D1", ts=f"{T0}.{self.n:06d}")
        self.store.ingest(INBOX, "slack", f"Ev{self.n}", message.to_wire(), self.clock.now)

    def webhook(self, event: dict[str, Any]) -> None:
        """A Stripe delivery as the front stores it, in the webhook conversation's inbox."""
        payload = WebhookDelivery(
            type=event["type"], delivery_id=event["id"], body=event, channel=HOOKS
        ).to_wire()
        self.store.ingest(HOOKS_INBOX, "stripe", event["id"], payload, self.clock.now)

    def tick(self, dispatch: bool = True) -> None:
        self.scheduler.tick(self.clock.now)
        self.worker.tick(self.clock.now)
        if dispatch:
            self.dispatcher.tick(self.clock.now)

    def ask_and_approve(self, order: str) -> str:
        self.say(f"refund order {order}")
        self.tick()
        [approval] = [a for a in self.store.open_approvals() if a.args["order_id"] == order]
        assert self.store.answer(approval.id, "yes", BOSS, self.clock.now).outcome == "yes"
        return approval.id

    def replies(self, needle: str = "") -> list[str]:
        rows = self.store.outbox(inbox=INBOX) + self.store.outbox(inbox=HOOKS_INBOX)
        return [r.text for r in rows if r.channel == "D1" and needle in r.text]

    def said(self, pattern: re.Pattern[str]) -> list[str]:
        """Every post to the person (any conversation, not a prompt rewritten) matching
        `pattern`."""
        rows = self.store.outbox(inbox=INBOX)
        return [r.text for r in rows if r.kind == "post" and pattern.search(r.text)]

    def prompt(self) -> str:
        """The approval prompt as last rewritten."""
        return [r.text for r in self.store.outbox(inbox=INBOX) if r.kind == "update"][-1]

    def posts(self) -> list[str]:
        return [p.text for p in self.sender.parts if p.channel == "D1"]

    def refund_posts(self) -> int:
        return sum(1 for r in self.fake.requests if r.method == "POST")


@pytest.fixture
def world(store: Store, tmp_path: Path) -> Iterator[World]:
    with FakeStripe() as fake:
        config = write_config(tmp_path, fake.url)
        env = {"STRIPE_SECRET_KEY": fake.api_key}
        with gateway_in_thread(config, env, store) as gateway:
            yield World(store, fake, gateway.worker_env)


def test_an_approved_refund_is_made_in_stripe_once_and_the_reply_names_it(
    world: World, tmp_path: Path
) -> None:
    pi = world.fake.add_payment("1001", amount=2500)
    request_id = world.ask_and_approve("1001")
    world.crash_next = True  # killed between Stripe's answer and the recording of the result
    with pytest.raises(ProcessDied):
        world.tick()
    assert len(world.fake.refunds) == 1 and world.replies("Refunded") == []
    world.clock.now += world.store.settings.lease_ttl + 1  # the retried run: the same key
    world.tick()
    [refund] = world.fake.refunds.values()
    assert refund["payment_intent"] == pi and refund["amount"] == 2500
    assert refund["metadata"] == {"order_id": "1001", "wakeful_request": request_id}
    # The retry asks Stripe first (a key is kept 24 h, as long as a call may wait): the refund
    # the killed attempt made is found under the request id, and nothing is sent again.
    assert world.fake.keys_seen() == [request_id], "one POST, its refund found by the retry"
    assert [(r.method, r.path) for r in world.fake.requests][-1] == ("GET", "/v1/refunds")
    assert world.replies("Refunded") == [
        f"Refunded order 1001 through Stripe ({refund['id']}, 25.00 USD)."
    ]
    assert all(r.authorized for r in world.fake.requests), "the gateway added the key"
    step = world.store.recorded_step(request_id)
    assert step is not None and step.result["refund_id"] == refund["id"]
    audit = [a for a in audit_lines(tmp_path) if a["method"] == "POST"]
    assert [a["idempotency_key"] for a in audit] == [request_id]
    assert {a["claimed_inbox"] for a in audit} == {INBOX}
    world.tick()
    assert world.refund_posts() == 1, "a recorded result is never asked for again"


def _already_refunded(world: World, order: str) -> None:
    pi = world.fake.add_payment(order)
    charge = world.fake.charges[world.fake.payment_intents[pi]["latest_charge"]]
    charge.update(amount_refunded=charge["amount"], refunded=True)


NOT_DONE = "The refund of order 2001 was not done: {}. Nothing was refunded."


@pytest.mark.parametrize(
    ("case", "posts", "reason"),
    [
        ("no payment", 0, "no payment for order 2001 was found in Stripe"),
        ("refunded before", 1, "its payment was already fully refunded in Stripe"),
        ("card declined", 1, "Stripe declined it: Your card was declined (card_declined)"),
        (
            "charge already refunded",
            1,
            "its payment was already fully refunded in Stripe",
        ),
    ],
)
def test_what_stripe_refuses_is_told_at_once_and_never_tried_again(
    world: World, case: str, posts: int, reason: str
) -> None:
    if case == "refunded before":
        _already_refunded(world, "2001")
    elif case != "no payment":
        world.fake.add_payment("2001")
    if case == "card declined":
        world.fake.fail_next(402, "card_error", "Your card was declined.", code="card_declined")
    if case == "charge already refunded":
        world.fake.fail_next(
            400,
            "invalid_request_error",
            "Charge ch_1 has already been refunded.",
            code="charge_already_refunded",
        )
    world.ask_and_approve("2001")
    world.tick()
    assert world.replies("2001 was not done") == [NOT_DONE.format(reason)]
    assert world.said(NOT_YET) == [], "a failure that stands is not a wait"
    assert world.fake.refunds == {}
    for _ in range(3):
        world.clock.now += 600
        world.tick()
    assert world.refund_posts() == posts, "no second attempt"
    assert world.replies("2001 was not done") == [NOT_DONE.format(reason)], "told once"
    assert world.store.events(INBOX, "open") == [] and world.store.events(INBOX, "dead") == []


def test_a_500_stripe_keeps_is_a_wait_then_the_truth_from_stripe(world: World) -> None:
    world.fake.add_payment("2001")
    world.fake.fail_next(500, "api_error", "An unknown error occurred.")
    world.ask_and_approve("2001")
    world.tick()
    [waiting] = world.said(NOT_YET)
    assert "the payment service did not answer" in waiting.lower()
    for _ in range(4):
        world.clock.now += 600  # past any backoff
        world.tick()
    assert world.replies("2001 was not done") == [
        NOT_DONE.format(
            "Stripe failed (500) and kept that answer under this request; no refund was made "
            "under it"
        )
    ]
    assert world.fake.refunds == {} and world.refund_posts() == 2
    assert len(world.said(NOT_YET)) == 1, "told once it waits"
    assert world.store.events(INBOX, "dead") == []


def test_a_rate_limit_is_a_wait_told_once_then_refunded_under_the_same_key(world: World) -> None:
    world.fake.add_payment("3001")
    world.fake.rate_limit(1, retry_after=2, method="POST")
    request_id = world.ask_and_approve("3001")
    world.tick()
    assert world.replies("Refunded") == []
    [waiting] = world.said(NOT_YET)
    assert "the payment service asked to slow down" in waiting.lower()
    assert "not done yet: the payment service asked to slow down" in world.prompt()
    world.clock.now += 3  # Stripe's Retry-After
    world.tick()
    [refund] = world.fake.refunds.values()
    assert world.fake.keys_seen() == [request_id, request_id]
    assert world.replies("Refunded") == [
        f"Refunded order 3001 through Stripe ({refund['id']}, 20.00 USD)."
    ]
    assert len(world.said(NOT_YET)) == 1
    assert world.store.events(INBOX, "dead") == []


def test_a_revoked_destination_fails_the_refund_clearly_and_nothing_is_half_done(
    world: World,
) -> None:
    world.fake.add_payment("4001")
    world.store.revoke_destination("stripe", T0, "ops", "suspected leak")
    time.sleep(0.6)  # longer than the gateway's poll: it has read the revocation
    request_id = world.ask_and_approve("4001")
    world.tick()
    [reply] = world.replies("4001 was not done")
    assert reply == (
        "The refund of order 4001 was not done: the gateway refused the call "
        "(destination_revoked). Nothing was refunded."
    )
    assert world.fake.requests == [], "nothing reached Stripe"
    assert world.store.recorded_step(f"{TEAM}:refund_order:4001") is None, "no order refunded"
    assert world.store.recorded_step(f"{TEAM}:stripe_refund:sent:{request_id}") is None
    assert world.store.restore_destination("stripe")
    time.sleep(0.6)
    again = world.ask_and_approve("4001")
    world.tick()
    [refund] = world.fake.refunds.values()
    assert refund["metadata"]["wakeful_request"] == again
    assert world.replies("Refunded order 4001 through Stripe")
    # The keys read above are the ones a refund records (its workspace's, issue 34).
    for key in ("refund_order:4001", f"stripe_refund:sent:{again}"):
        assert world.store.recorded_step(f"{TEAM}:{key}") is not None, key


def test_stripe_confirms_the_refund_once_in_its_conversation_merged_with_the_reply(
    world: World,
) -> None:
    world.fake.add_payment("5001", amount=1234)
    world.ask_and_approve("5001")
    world.tick(dispatch=False)  # the reply is held (Slack is slow, say)
    [event] = world.fake.events
    assert event["type"] == "charge.refunded"
    world.webhook(event)
    world.webhook(event)  # Stripe's retry of the same event: stored once
    world.tick()
    [refund] = world.fake.refunds.values()
    confirmation = f"Stripe confirmed the refund of order 5001 ({refund['id']}, 12.34 USD)."
    reply = f"Refunded order 5001 through Stripe ({refund['id']}, 12.34 USD)."
    assert world.replies("5001")[-2:] == [reply, confirmation] or world.replies("5001")[-2:] == [
        confirmation,
        reply,
    ]
    merged = [p for p in world.posts() if "5001" in p and "Stripe confirmed" in p]
    assert len(merged) == 1 and reply in merged[0], world.posts()
    hooks = [p.text for p in world.sender.parts if p.channel == HOOKS]
    assert hooks == [f"Stripe charge.refunded {event['data']['object']['id']} 12.34 USD"]
    world.webhook({**event, "id": "evt_again_for_the_same_refund"})
    world.tick()
    assert len(world.replies("Stripe confirmed")) == 1, "one confirmation per refund"


def test_a_pending_refund_is_confirmed_or_reported_failed_by_refund_updated(world: World) -> None:
    world.fake.pending_refunds = True
    for order in ("6001", "6002"):
        world.fake.add_payment(order)
        world.ask_and_approve(order)
        world.tick()
    first, second = world.fake.refunds.values()
    world.fake.settle(first["id"], "succeeded")
    world.fake.settle(second["id"], "failed", "expired_or_canceled_card")
    for event in world.fake.events:
        world.webhook(event)
    world.tick()
    assert world.replies("6001 through Stripe") == [
        f"Refunded order 6001 through Stripe ({first['id']}, 20.00 USD). It is pending at the "
        "bank; Stripe will confirm it."
    ]
    assert world.replies("Stripe confirmed") == [
        f"Stripe confirmed the refund of order 6001 ({first['id']}, 20.00 USD)."
    ]
    assert world.replies("Stripe reports") == [
        f"Stripe reports the refund of order 6002 ({second['id']}) failed: "
        "expired_or_canceled_card."
    ]


def test_a_webhook_naming_no_request_of_ours_confirms_nothing(world: World) -> None:
    world.fake.add_payment("7001")
    world.ask_and_approve("7001")
    world.tick()
    [event] = world.fake.events
    stranger = {**event, "id": "evt_stranger", "request": {"id": None, "idempotency_key": "x"}}
    stranger["data"] = {"object": {**event["data"]["object"], "refunds": {"data": []}}}
    world.webhook(stranger)
    world.tick()
    assert world.replies("Stripe confirmed") == []


def test_a_refund_that_must_wait_does_not_hold_back_the_rest_of_its_batch(world: World) -> None:
    """The approved tool's failure is its answer's alone: the person's message in the same
    batch is answered now, and the refund is retried by itself with the same key."""
    world.fake.add_payment("8001")
    world.fake.rate_limit(1, retry_after=None, method="POST")
    request_id = world.ask_and_approve("8001")
    world.say("status")  # arrives with the answer: one batch
    world.tick()
    assert world.replies("Status:"), "the message was answered at once"
    assert world.replies("Refunded") == []
    [waiting] = world.store.events(INBOX, "open")
    assert waiting.source == "approval" and waiting.attempts <= 1, "a wait spends no attempt"
    world.clock.now += world.store.settings.backoff_base + 1
    world.tick()
    assert world.fake.keys_seen() == [request_id, request_id]
    assert len(world.replies("Refunded order 8001 through Stripe")) == 1
    assert len(world.replies("Status:")) == 1
