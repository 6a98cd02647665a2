"""What the gateway passes back when its upstream fails, so a tool can tell which failure it
met: Stripe's own answers (a 5xx it keeps under the key and replays, its 429 with Retry-After)
and the load balancer's 503 in front of it come back as they were sent, headers intact, marked
`Wakeful-Gateway: forwarded`; an upstream that refuses connections or does not answer in time
is the gateway's own 502 / 504, marked `upstream_error`. The real gateway app in front of the
fake Stripe; both stores."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gateway import Running, audit_lines, gateway_in_thread, write_config
from wakeful.core.gateway.client import Gateway, GatewayResponse
from wakeful.core.store import Store
from wakeful.devtools.fake_stripe import FakeStripe
from wakeful.devtools.fake_stripe_faults import UNAVAILABLE


@pytest.fixture
def stripe() -> Iterator[FakeStripe]:
    with FakeStripe() as fake:
        yield fake


@pytest.fixture
def gateway(store: Store, stripe: FakeStripe, tmp_path: Path) -> Iterator[Running]:
    config = write_config(tmp_path, stripe.url, timeout=1.0)
    with gateway_in_thread(config, {"STRIPE_SECRET_KEY": stripe.api_key}, store) as running:
        yield running


def refund(gw: Gateway, payment: str, key: str) -> GatewayResponse:
    return gw.request(
        "POST",
        "stripe",
        "/v1/refunds",
        body=f"payment_intent={payment}".encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded", "Idempotency-Key": key},
    )


def test_a_5xx_stripe_keeps_under_the_key_comes_back_replayed_as_stripe_sent_it(
    gateway: Running, stripe: FakeStripe
) -> None:
    gw = gateway.client()
    pi = stripe.add_payment("A")
    stripe.fail_next(500, "api_error", "An unknown error occurred.")
    first, again = refund(gw, pi, "k1"), refund(gw, pi, "k1")
    assert (first.status, again.status) == (500, 500)
    assert first.headers["wakeful-gateway"] == again.headers["wakeful-gateway"] == "forwarded"
    assert "idempotent-replayed" not in first.headers
    assert again.headers["idempotent-replayed"] == "true"
    assert again.headers["original-request"] == first.headers["request-id"]
    assert again.headers["request-id"] != first.headers["request-id"]
    assert first.headers["stripe-should-retry"] == again.headers["stripe-should-retry"] == "false"
    assert again.body == first.body and first.json()["error"]["type"] == "api_error"
    assert stripe.refunds == {}


def test_the_load_balancers_503_comes_back_as_it_was_and_the_retry_runs_for_real(
    gateway: Running, stripe: FakeStripe, tmp_path: Path
) -> None:
    gw = gateway.client()
    pi = stripe.add_payment("B")
    stripe.unavailable(1, retry_after=2)
    front = refund(gw, pi, "k2")
    assert (front.status, front.headers["wakeful-gateway"]) == (503, "forwarded")
    assert front.body == UNAVAILABLE and front.headers["content-type"] == "text/html"
    assert "request-id" not in front.headers and front.headers["retry-after"] == "2"
    assert [r.front for r in stripe.requests] == [True], "Stripe never saw it"
    done = refund(gw, pi, "k2")
    assert done.status == 200 and "idempotent-replayed" not in done.headers, "nothing was kept"
    assert len(stripe.refunds) == 1
    assert [(a["status"], a["outcome"]) for a in audit_lines(tmp_path)] == [
        (503, "forwarded"),
        (200, "forwarded"),
    ]


def test_stripes_429_comes_back_with_retry_after_and_nothing_kept(
    gateway: Running, stripe: FakeStripe
) -> None:
    gw = gateway.client()
    pi = stripe.add_payment("C")
    stripe.rate_limit(1, retry_after=3)
    limited = refund(gw, pi, "k3")
    assert (limited.status, limited.headers["wakeful-gateway"]) == (429, "forwarded")
    assert limited.headers["retry-after"] == "3" and limited.headers["request-id"].startswith(
        "req_"
    )
    assert limited.json()["error"]["code"] == "rate_limit"
    assert limited.refused is None, "Stripe's limit, not the gateway's"
    done = refund(gw, pi, "k3")
    assert done.status == 200 and "idempotent-replayed" not in done.headers
    assert len(stripe.refunds) == 1


def test_an_upstream_refusing_connections_is_the_gateways_502_and_passes_when_it_is_back(
    gateway: Running, stripe: FakeStripe, tmp_path: Path
) -> None:
    gw = gateway.client()
    stripe.down()
    got = gw.request("GET", "stripe", "/v1/refunds/re_x")
    assert (got.status, got.headers["wakeful-gateway"]) == (502, "upstream_error")
    error = got.json()["error"]
    assert (error["type"], error["code"]) == ("gateway_error", "upstream_unreachable")
    assert error["message"] == "destination 'stripe' could not be reached", "nothing was sent"
    assert stripe.requests == []
    stripe.up()
    got = gw.request("GET", "stripe", "/v1/refunds/re_x")
    assert (got.status, got.headers["wakeful-gateway"]) == (404, "forwarded")
    stripe.down(for_seconds=1.0)
    assert gw.request("GET", "stripe", "/v1/refunds/re_x").status == 502
    deadline = time.monotonic() + 10
    while gw.request("GET", "stripe", "/v1/refunds/re_x").status == 502:
        assert time.monotonic() < deadline, "the fake Stripe never came back up"
        time.sleep(0.05)
    lines = audit_lines(tmp_path)
    assert (lines[0]["status"], lines[0]["outcome"], lines[0]["reason"]) == (
        502,
        "upstream_error",
        "upstream_unreachable",
    )
    assert (lines[1]["status"], lines[1]["outcome"]) == (404, "forwarded")


def test_an_upstream_too_slow_is_the_gateways_504_saying_it_may_have_acted(
    gateway: Running, stripe: FakeStripe
) -> None:
    gw = gateway.client()
    pi = stripe.add_payment("D")
    stripe.hold_next("answer")
    try:
        got = refund(gw, pi, "k4")
    finally:
        stripe.release()
    assert (got.status, got.headers["wakeful-gateway"]) == (504, "upstream_error")
    error = got.json()["error"]
    assert error["code"] == "upstream_timeout"
    assert error["message"] == (
        "destination 'stripe' did not answer in time after the request was sent: it may have acted"
    )
    assert len(stripe.refunds) == 1, "Stripe refunded all the same"
