"""The fake Stripe fails as the real one does (issue 33, item 8): each scripted fault answers
what Stripe, or what stands in front of it, answers, and keeps under the idempotency key what
Stripe keeps (docs.stripe.com/api/idempotent_requests: the first answer once the endpoint
ran, 500s included; nothing for a request refused before it). Asserted through Stripe's own
SDK, so the shapes are the ones it reads, and by the requests the fake received."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
import stripe

from wakeful.devtools.fake_stripe import FakeStripe
from wakeful.devtools.fake_stripe_faults import RATE_LIMITED, UNAVAILABLE


@pytest.fixture
def fake() -> Iterator[FakeStripe]:
    with FakeStripe() as running:
        yield running


def client(fake: FakeStripe) -> stripe.StripeClient:
    """The SDK straight at the fake, with no retries of its own: one call, one request."""
    return stripe.StripeClient(
        fake.api_key, base_addresses={"api": fake.url}, max_network_retries=0
    )


def create(fake: FakeStripe, payment: str, key: str) -> stripe.Refund:
    return client(fake).v1.refunds.create(
        params={"payment_intent": payment, "metadata": {"wakeful_request": key}},
        options={"idempotency_key": key},
    )


def test_a_500_is_kept_under_the_key_and_replayed_with_idempotent_replayed(
    fake: FakeStripe,
) -> None:
    pi = fake.add_payment("1")
    fake.fail_next(500, "api_error", "An unknown error occurred.")
    errors = []
    for _ in range(2):
        with pytest.raises(stripe.APIError) as caught:
            create(fake, pi, "k")
        errors.append(caught.value)
    first, again = errors
    assert first.http_status == again.http_status == 500
    assert first.headers.get("Idempotent-Replayed") is None
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.headers["Original-Request"] == first.request_id
    assert first.headers["Stripe-Should-Retry"] == "false", "the SDK does not retry it itself"
    assert first.json_body == again.json_body
    assert [r.replayed for r in fake.requests] == [False, True]
    assert fake.refunds == {}
    assert create(fake, pi, "other key").status == "succeeded", "another key runs for real"


def test_the_load_balancers_503_keeps_nothing_so_the_same_key_runs_for_real(
    fake: FakeStripe,
) -> None:
    pi = fake.add_payment("2")
    fake.unavailable(2)
    for _ in range(2):
        with pytest.raises(stripe.APIError) as caught:
            create(fake, pi, "k")
        assert caught.value.http_status == 503
        assert caught.value.request_id is None, "no Request-Id: Stripe never saw it"
        assert "503 Service Temporarily Unavailable" in str(caught.value.http_body)
    refund = create(fake, pi, "k")
    assert [(r.status, r.front, r.replayed) for r in fake.requests] == [
        (503, True, False),
        (503, True, False),
        (200, False, False),
    ]
    assert list(fake.refunds) == [refund.id]
    request = urllib.request.Request(f"{fake.url}/v1/refunds/{refund.id}")
    fake.unavailable(1, path="/v1/refunds/", method="GET")
    with pytest.raises(urllib.error.HTTPError) as raw:
        urllib.request.urlopen(request, timeout=5)  # no key at all: the front answers first
    assert raw.value.code == 503 and raw.value.read() == UNAVAILABLE
    assert raw.value.headers["Content-Type"] == "text/html"


def test_a_429_is_stripes_rate_limit_with_retry_after_and_nothing_kept(fake: FakeStripe) -> None:
    pi = fake.add_payment("3")
    fake.rate_limit(1, retry_after=2)
    with pytest.raises(stripe.RateLimitError) as caught:
        create(fake, pi, "k")
    error = caught.value
    assert error.http_status == 429 and error.headers["Retry-After"] == "2"
    assert error.request_id is not None and error.request_id.startswith("req_")
    assert error.error is not None and error.error.code == "rate_limit"
    assert error.error.type == "invalid_request_error" and error.user_message == RATE_LIMITED
    assert "_saved" not in error.headers
    refund = create(fake, pi, "k")
    assert refund.status == "succeeded" and not fake.requests[-1].replayed


def test_a_fault_for_a_span_of_time_answers_every_matching_request_until_it_ends(
    fake: FakeStripe,
) -> None:
    pi = fake.add_payment("4")
    fake.rate_limit(for_seconds=0.6, retry_after=None, method="POST")
    started = time.monotonic()
    limited = 0
    while True:
        try:
            create(fake, pi, "k")
            break
        except stripe.RateLimitError as exc:
            assert "Retry-After" not in exc.headers
            limited += 1
            time.sleep(0.05)
    assert time.monotonic() - started >= 0.6 and limited >= 3
    assert len(fake.refunds) == 1
    search = client(fake).v1.payment_intents.search(params={"query": "metadata['order_id']:'4'"})
    assert [p.id for p in search.data] == [pi], "a GET was never limited (method=POST)"


def test_down_refuses_connections_and_up_listens_again_on_the_same_port(
    fake: FakeStripe,
) -> None:
    port = fake.port
    fake.down()
    assert not fake.listening
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    with pytest.raises(stripe.APIConnectionError):
        client(fake).v1.refunds.list()
    fake.up()
    assert fake.listening and fake.url == f"http://127.0.0.1:{port}"
    assert client(fake).v1.refunds.list().data == []
    fake.down(for_seconds=0.5)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    deadline = time.monotonic() + 10
    while not fake.listening:
        assert time.monotonic() < deadline, "it never came back up"
        time.sleep(0.05)
    socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_refunds_are_listed_by_payment_intent_in_stripes_list_shape_newest_first(
    fake: FakeStripe,
) -> None:
    pi = fake.add_payment("5", amount=3000)
    other = fake.add_payment("6")
    made = []
    for n in range(3):
        made.append(
            client(fake).v1.refunds.create(
                params={"payment_intent": pi, "amount": 1000}, options={"idempotency_key": f"k{n}"}
            )
        )
    client(fake).v1.refunds.create(params={"payment_intent": other})
    newest_first = [r.id for r in reversed(made)]
    sdk = client(fake).v1.refunds
    assert [r.id for r in sdk.list(params={"payment_intent": pi}).data] == newest_first
    page = sdk.list(params={"payment_intent": pi, "limit": 2})
    assert [r.id for r in page.data] == newest_first[:2] and page.has_more
    assert [r.id for r in page.auto_paging_iter()] == newest_first, "every page, in order"
    before = sdk.list(params={"payment_intent": pi, "ending_before": newest_first[2]})
    assert [r.id for r in before.data] == newest_first[:2]
    with urllib.request.urlopen(
        urllib.request.Request(
            f"{fake.url}/v1/refunds?payment_intent={pi}&limit=1",
            headers={"Authorization": f"Bearer {fake.api_key}"},
        ),
        timeout=5,
    ) as answer:
        doc = json.loads(answer.read())
    assert set(doc) == {"object", "data", "has_more", "url"}
    assert (doc["object"], doc["url"], doc["has_more"]) == ("list", "/v1/refunds", True)
    for bad, param in (({"limit": 0}, "limit"), ({"limit": 101}, "limit"), ({"x": "1"}, "x")):
        with pytest.raises(stripe.InvalidRequestError) as caught:
            sdk.list(params={"payment_intent": pi, **bad})  # type: ignore[typeddict-item]
        assert caught.value.param == param


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda f: f.fail_next(200, "api_error", "x"), "400-599"),
        (lambda f: f.fail_next(500, "api_error", "x", count=0), "count"),
        (lambda f: f.rate_limit(for_seconds=0), "for_seconds"),
        (lambda f: f.rate_limit(retry_after=-1), "retry_after"),
        (lambda f: f.unavailable(path="v1"), "path"),
        (lambda f: f.unavailable(method="PUT"), "method"),
        (lambda f: f.down(for_seconds=-1), "for_seconds"),
    ],
)
def test_a_fault_scripted_wrong_is_refused_clearly(
    fake: FakeStripe, call: object, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        call(fake)  # type: ignore[operator]
