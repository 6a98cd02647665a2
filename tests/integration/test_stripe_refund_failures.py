"""How the Stripe refund tool reads each failure (issue 33, item 1): what a later try can cure
raises `RefundUnavailable` (a `ToolUnavailable`: retried under the same key, the event's
attempts untouched), what stands raises `ToolFailed`, each with the reason the person is told
("The refund of order X was not done: <reason>."); only a refund made is a result. The tool
runs as the refund desk runs it (Stripe's SDK through the real gateway app, in front of the
fake Stripe, a real store for its steps), called directly, as the engine calls an approved
tool. Both stores."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import T0
from tests.support.chaos import free_port
from tests.support.gateway import gateway_in_thread, write_config
from wakeful.agents import Setup, ToolFailed, ToolUnavailable
from wakeful.bot.builtin.stripe_refunds import RefundUnavailable, StripeRefunds
from wakeful.bot.process.config import Config
from wakeful.bot.process.loading import make_setup
from wakeful.bot.slack.zones import ZoneLookup
from wakeful.core.clock import ManualClock
from wakeful.core.store import Store
from wakeful.devtools.fake_stripe import FakeStripe

ORDER = "7201"


@dataclass
class Tool:
    """The refund tool through a gateway in front of `fake`."""

    fake: FakeStripe
    refunds: StripeRefunds
    setup: Setup

    def __call__(self, request_id: str, order: str = ORDER) -> dict[str, Any]:
        return self.refunds.refund(self.setup.steps, self.setup.query, order, request_id)

    def refund_posts(self) -> int:
        """POSTs of a refund that reached Stripe's API (not those its front answered)."""
        return sum(
            1
            for r in self.fake.requests
            if (r.method, r.path, r.front) == ("POST", "/v1/refunds", False)
        )


@pytest.fixture
def fake() -> Iterator[FakeStripe]:
    with FakeStripe() as running:
        yield running


@contextmanager
def tool(
    store: Store, tmp_path: Path, fake: FakeStripe, retries: int = 2, **gateway: Any
) -> Iterator[Tool]:
    """The tool (the SDK making `retries` of its own) through a gateway configured with
    `gateway`'s settings."""
    config = write_config(tmp_path, fake.url, **gateway)
    with gateway_in_thread(config, {"STRIPE_SECRET_KEY": fake.api_key}, store) as running:
        env = running.worker_env
        setup = make_setup(
            Config(settings=store.settings), store, ZoneLookup(None), env, ManualClock(T0)
        )
        assert setup.gateway is not None
        yield Tool(fake, StripeRefunds(setup.gateway, retries=retries), setup)


@pytest.fixture
def refund(store: Store, tmp_path: Path, fake: FakeStripe) -> Iterator[Tool]:
    with tool(store, tmp_path, fake) as made:
        yield made


def _already_refunded(fake: FakeStripe) -> None:
    pi = fake.add_payment(ORDER)
    charge = fake.charges[fake.payment_intents[pi]["latest_charge"]]
    charge.update(amount_refunded=charge["amount"], refunded=True)


PERMANENT = [
    ("no payment", 0, f"no payment for order {ORDER} was found in Stripe"),
    (
        "not paid",
        0,
        "its payment in Stripe has not succeeded (status requires_payment_method)",
    ),
    ("refunded before", 1, "its payment was already fully refunded in Stripe"),
    ("card declined", 1, "Stripe declined it: Your card was declined (card_declined)"),
    (
        "invalid",
        1,
        "Stripe refused it: Refund amount (2000) is greater than unrefunded amount on charge "
        "(1500) (amount_too_large)",
    ),
    (
        "wrong key",
        0,
        "Stripe refused the gateway's credential; an operator must check the gateway's Stripe key",
    ),
]


@pytest.mark.parametrize(("case", "posts", "reason"), PERMANENT, ids=[c[0] for c in PERMANENT])
def test_what_stripe_refuses_is_a_failure_that_stands_after_one_call(
    refund: Tool, case: str, posts: int, reason: str
) -> None:
    fake = refund.fake
    if case == "not paid":
        fake.add_payment(ORDER, status="requires_payment_method")
    elif case == "refunded before":
        _already_refunded(fake)
    elif case != "no payment":
        fake.add_payment(ORDER)
    if case == "card declined":
        fake.fail_next(402, "card_error", "Your card was declined.", code="card_declined")
    if case == "invalid":
        fake.fail_next(
            400,
            "invalid_request_error",
            "Refund amount (2000) is greater than unrefunded amount on charge (1500)",
            code="amount_too_large",
        )
    if case == "wrong key":
        fake.api_key = "sk_test_rotated_" + "x" * 12  # the gateway still sends the old one
    with pytest.raises(ToolFailed) as failed:
        refund("req-permanent")
    assert failed.value.reason == reason
    assert failed.value.tell_ops == (case == "wrong key"), "only an operator mends the key"
    assert not isinstance(failed.value, ToolUnavailable)
    assert refund.refund_posts() == posts, "exactly the calls it took, none repeated"
    assert fake.refunds == {}
    assert refund.setup.query.step(f"refund_order:{ORDER}") is None, "no order marked refunded"


def test_an_order_id_stripe_search_cannot_take_fails_without_a_call(refund: Tool) -> None:
    with pytest.raises(ToolFailed, match="cannot hold quotes"):
        refund("req-q", order="72'01")
    assert refund.fake.requests == []


def test_a_revoked_destination_fails_at_once_unless_an_earlier_try_may_have_sent(
    refund: Tool, store: Store
) -> None:
    refund.fake.add_payment(ORDER)
    store.revoke_destination("stripe", T0, "ops", "suspected leak")
    _until_refused(refund)  # the gateway reads the revocations every 0.25 s
    polled = len(refund.fake.requests)
    with pytest.raises(ToolFailed) as failed:
        refund("req-revoked")
    assert failed.value.reason == "the gateway refused the call (destination_revoked)"
    assert failed.value.tell_ops
    assert len(refund.fake.requests) == polled, "nothing reached Stripe"
    store.restore_destination("stripe")
    _until_forwarded(refund)
    refund.fake.unavailable(3, method="POST")  # the first try is sent, and answered by the front
    with pytest.raises(RefundUnavailable):
        refund("req-sent")
    store.revoke_destination("stripe", T0, "ops", "again")
    _until_refused(refund)
    with pytest.raises(RefundUnavailable) as later:
        refund("req-sent")
    assert later.value.reason.startswith("the gateway refused the call (destination_revoked) and")
    store.restore_destination("stripe")
    _until_forwarded(refund)
    done = refund("req-sent")
    [made] = refund.fake.refunds.values()
    assert done["refund_id"] == made["id"] and made["metadata"]["wakeful_request"] == "req-sent"


def _until_refused(refund: Tool, want: bool = True) -> None:
    gateway = refund.setup.gateway
    assert gateway is not None
    deadline = time.monotonic() + 10
    while (gateway.request("GET", "stripe", "/v1/refunds/re_x").refused is not None) != want:
        assert time.monotonic() < deadline, "the gateway never read the revocations"
        time.sleep(0.05)


def _until_forwarded(refund: Tool) -> None:
    _until_refused(refund, want=False)


TRANSIENT = [
    ("stripe 429", "the payment service asked to slow down", 2.0),
    ("front 503", "the payment service did not answer", None),
    ("stripe down", "the payment service could not be reached", None),
]


@pytest.mark.parametrize(("case", "reason", "wait"), TRANSIENT, ids=[c[0] for c in TRANSIENT])
def test_what_a_later_try_can_cure_is_unavailable_and_the_retry_refunds_once_under_one_key(
    refund: Tool, case: str, reason: str, wait: float | None
) -> None:
    fake = refund.fake
    fake.add_payment(ORDER)
    if case == "stripe 429":
        fake.rate_limit(1, retry_after=2, method="POST")
    elif case == "front 503":
        fake.unavailable(3, method="POST")  # the SDK's own two retries meet it too
    else:
        fake.down()
    with pytest.raises(RefundUnavailable) as unavailable:
        refund("req-later")
    assert isinstance(unavailable.value, ToolUnavailable)
    assert (unavailable.value.reason, unavailable.value.retry_after) == (reason, wait)
    assert fake.refunds == {}
    fake.up()
    done = refund("req-later")
    [made] = fake.refunds.values()
    assert done == {
        "refunded": True,
        "order_id": ORDER,
        "via": "stripe",
        "refund_id": made["id"],
        "amount": 2000,
        "currency": "usd",
        "status": "succeeded",
        "payment_intent": made["payment_intent"],
    }
    assert set(fake.keys_seen()) <= {"req-later"}, "one key for every try"


def test_a_500_stripe_kept_under_the_key_is_checked_with_stripe_and_stands(refund: Tool) -> None:
    refund.fake.add_payment(ORDER)
    refund.fake.fail_next(500, "api_error", "An unknown error occurred.")
    with pytest.raises(RefundUnavailable) as first:
        refund("req-500")  # not yet known to be kept: tried again under the key
    assert first.value.reason == "the payment service did not answer"
    with pytest.raises(ToolFailed) as kept:
        refund("req-500")
    assert kept.value.reason == (
        "Stripe failed (500) and kept that answer under this request; no refund was made under it"
    )
    assert refund.fake.refunds == {}
    seen = [(r.method, r.path, r.replayed) for r in refund.fake.requests[1:]]
    assert seen == [
        ("POST", "/v1/refunds", False),
        ("GET", "/v1/refunds", False),  # the retry asks first: no refund under the request yet
        ("POST", "/v1/refunds", True),
        ("GET", "/v1/refunds", False),
    ], "Stripe was asked for the refunds of the payment"


def test_a_kept_500_that_stripe_cannot_be_asked_about_says_so(
    store: Store, tmp_path: Path, fake: FakeStripe
) -> None:
    """A gateway configured before the refunds' list was allowed: the truth cannot be read."""
    fake.add_payment(ORDER)
    allow = ("GET /v1/payment_intents/search", "POST /v1/refunds")
    with tool(store, tmp_path, fake, allow=allow) as old:
        fake.fail_next(500, "api_error", "An unknown error occurred.")
        with pytest.raises(RefundUnavailable):
            old("req-500")
        with pytest.raises(ToolFailed) as kept:
            old("req-500")
    assert kept.value.reason == (
        "Stripe failed (500) and kept that answer under this request; whether it refunded "
        "could not be checked: the gateway refused the call (not_allowed)"
    )


def test_a_500_after_stripe_refunded_is_found_by_its_request_and_is_the_result(
    refund: Tool,
) -> None:
    pi = refund.fake.add_payment(ORDER)
    other = refund.fake.add_payment("7202")
    refund.fake.fail_next(500, "api_error", "An unknown error occurred.", acted=True)
    with pytest.raises(RefundUnavailable):
        refund("req-acted")
    refund("req-elsewhere", order="7202")  # another payment's refund, not this one's
    done = refund("req-acted")
    [made] = refund.fake.refunds_for(pi)
    assert done["refunded"] is True and done["refund_id"] == made["id"]
    assert len(refund.fake.refunds_for(other)) == 1 and len(refund.fake.refunds) == 2


def test_the_gateway_unreachable_is_unavailable(store: Store, tmp_path: Path) -> None:
    setup = make_setup(
        Config(settings=store.settings),
        store,
        ZoneLookup(None),
        {"WAKEFUL_GATEWAY_URL": f"http://127.0.0.1:{free_port()}"},
        ManualClock(T0),
    )
    assert setup.gateway is not None
    with pytest.raises(RefundUnavailable) as unavailable:
        StripeRefunds(setup.gateway).refund(setup.steps, setup.query, ORDER, "req-gw")
    assert unavailable.value.reason == "the gateway could not be reached"


def test_the_gateways_rate_limit_is_unavailable_with_its_retry_after(
    store: Store, tmp_path: Path, fake: FakeStripe
) -> None:
    fake.add_payment(ORDER)
    with (
        tool(store, tmp_path, fake, rate_limit=1) as limited,
        pytest.raises(RefundUnavailable) as unavailable,
    ):
        limited("req-rate")  # the search takes the one request a second, the POST waits
    assert unavailable.value.reason == "the gateway's rate limit for Stripe was reached"
    assert unavailable.value.retry_after == 1.0
    assert fake.refunds == {}


def test_an_answer_too_slow_is_unavailable_and_the_retry_finds_the_refund_made(
    store: Store, tmp_path: Path, fake: FakeStripe
) -> None:
    fake.add_payment(ORDER)
    with tool(store, tmp_path, fake, retries=0, timeout=3) as slow:
        fake.hold_next("answer")  # Stripe refunds; its answer is late
        try:
            with pytest.raises(RefundUnavailable) as unavailable:
                slow("req-slow")
        finally:
            fake.release()
        assert unavailable.value.reason == "the payment service did not answer in time"
        done = slow("req-slow")
    [made] = fake.refunds.values()
    assert done["refund_id"] == made["id"]
    assert fake.keys_seen() == ["req-slow"], "the retry found the refund; it sent nothing again"
    assert (fake.requests[-1].method, fake.requests[-1].path) == ("GET", "/v1/refunds")
