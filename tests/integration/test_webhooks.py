"""Webhook deliveries through the real HTTP front (SlackFront under the product's waitress
server, spoken to over loopback HTTP) into a real store of each backend.

What a sender sees (statuses and answers) and what the store holds at the moment the answer
arrives: a delivery is stored once under (source, delivery id) before its 200, a repeat is a 200
that stores nothing new, and every refusal (404, 405, 401, 400, 413, 503) stores nothing.
"""

from __future__ import annotations

import http.client
import json
import socket
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import T0, MakeStore
from tests.support.webhook_front import (
    CI_SECRET,
    GITHUB_SECRET,
    OPS,
    PAY,
    SOURCES,
    STRIPE_SECRET,
    Served,
    serve,
)
from wakeful.bot.front.webhooks import STRIPE_TOLERANCE
from wakeful.bot.front.wsgi import BODY_CAP
from wakeful.core import metrics
from wakeful.core.events import WebhookDelivery
from wakeful.core.inbox_id import InboxId
from wakeful.core.runner import typed
from wakeful.core.settings import MAX_PAYLOAD_BYTES
from wakeful.core.store import open_store
from wakeful.devtools.audit import count_events
from wakeful.devtools.webhooks import (
    GITHUB_EVENTS,
    STRIPE_EVENTS,
    github_payload,
    github_signature,
    stripe_event,
    stripe_signature,
)


@pytest.fixture
def served(make_store: MakeStore) -> Iterator[Served]:
    running = serve(make_store())
    yield running
    running.close()


# -- stored once, before the 200 --------------------------------------------------------------


@pytest.mark.parametrize("name", GITHUB_EVENTS)
def test_a_github_delivery_is_stored_before_its_200_and_once(served: Served, name: str) -> None:
    sent = served.sender.github_example(name)
    # Read the moment the answer arrives: the row must already be committed.
    event = served.store.event_by_key("github", sent.delivery_id)
    assert (sent.status, sent.text) == (200, "stored")
    assert event is not None, "the 200 left before the delivery was committed"
    assert (event.inbox, event.source, event.status) == (
        InboxId.conversation(OPS),
        "github",
        "pending",
    )
    assert typed(event) == WebhookDelivery(
        id=event.id,
        source="github",
        key=sent.delivery_id,
        received_at=event.created_at,
        type=name.split(".")[0],
        delivery_id=sent.delivery_id,
        channel=OPS,
        body=json.loads(github_payload(name)),
    )
    assert served.worker.kicks == 1

    again = served.sender.github_example(name, delivery=sent.delivery_id)  # GitHub's redelivery
    assert (again.status, again.text) == (200, "duplicate delivery; already stored")
    assert count_events(served.store) == 1
    assert served.worker.kicks == 1, "a repeat must not wake the worker"


@pytest.mark.parametrize("event_type", STRIPE_EVENTS)
def test_a_stripe_event_is_stored_under_its_id_and_its_retry_is_not(
    served: Served, event_type: str
) -> None:
    event = stripe_event(event_type)
    sent = served.sender.stripe(event)
    stored = served.store.event_by_key("stripe", event["id"])
    assert (sent.status, sent.text) == (200, "stored")
    assert stored is not None
    assert stored.inbox == InboxId.conversation(PAY)  # WAKEFUL_WEBHOOK_CHANNEL_STRIPE
    assert (stored.payload["type"], stored.payload["delivery"], stored.payload["body"]) == (
        event_type,
        event["id"],
        event,
    )
    # Stripe retries for up to three days, signing each attempt anew.
    served.clock.now += 3 * 3600
    retried = served.sender.stripe(event)
    assert (retried.status, retried.text) == (200, "duplicate delivery; already stored")
    assert count_events(served.store) == 1


def test_a_generic_delivery_is_stored_under_its_delivery_header(served: Served) -> None:
    body = b'{"build": 7, "result": "failed"}'
    sent = served.sender.generic("ci", body, delivery="build-7")
    assert (sent.status, sent.text) == (200, "stored")
    event = served.store.event_by_key("ci", "build-7")
    assert event is not None and event.inbox == InboxId.conversation(OPS)
    assert (event.source, event.payload["type"], event.payload["body"]) == (
        "ci",
        None,
        {"build": 7, "result": "failed"},
    )
    assert served.sender.generic("ci", body, delivery="build-7").status == 200
    assert count_events(served.store) == 1


def test_one_delivery_id_in_two_sources_is_two_deliveries(served: Served) -> None:
    """The key is (source, delivery id): a generic source reusing a GitHub GUID is its own."""
    first = served.sender.github_example("ping")
    second = served.sender.generic("ci", b"{}", delivery=first.delivery_id)
    assert (first.status, second.status) == (200, 200) and second.text == "stored"
    assert count_events(served.store) == 2


def test_several_v1_values_and_a_timestamp_at_the_edge_are_accepted(served: Served) -> None:
    event = stripe_event("charge.succeeded")
    sent = served.sender.stripe(
        event, timestamp=T0 - STRIPE_TOLERANCE, also=["whsec_previous_secret"]
    )
    assert (sent.status, sent.text) == (200, "stored")


def test_a_body_too_big_for_the_payload_cap_is_stored_pruned(served: Served) -> None:
    """A push of many commits (GitHub sends up to 25 MB) under the 1 MiB body cap but over the
    store's 256 KiB payload cap is kept, pruned, rather than refused and lost."""
    body = json.loads(github_payload("push"))
    body["commits"] = [dict(body["head_commit"] or {}, message="x" * 5000) for _ in range(120)]
    raw = json.dumps(body).encode()
    assert MAX_PAYLOAD_BYTES < len(raw) < BODY_CAP
    sent = served.sender.github("push", raw)
    assert (sent.status, sent.text) == (200, "stored")
    event = served.store.event_by_key("github", sent.delivery_id)
    assert event is not None and event.payload["body_cut"] is True
    kept = event.payload["body"]
    assert kept["ref"] == body["ref"] and kept["compare"] == body["compare"]
    assert kept["repository"]["full_name"] == "Codertocat/Hello-World"
    assert len(json.dumps(event.payload).encode()) <= MAX_PAYLOAD_BYTES


# -- refusals store nothing --------------------------------------------------------------------


def _github_headers(body: bytes, secret: str = GITHUB_SECRET, **extra: str) -> dict[str, str]:
    return {
        "X-GitHub-Event": "ping",
        "X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
        "X-Hub-Signature-256": github_signature(secret, body),
        "Content-Type": "application/json",
        **extra,
    }


def _stripe_headers(body: bytes, at: int, secret: str = STRIPE_SECRET) -> dict[str, str]:
    return {"Stripe-Signature": stripe_signature(secret, body, at)}


PING = github_payload("ping")
CHARGE = json.dumps(stripe_event("charge.succeeded", "evt_refused")).encode()
Case = tuple[str, bytes, Callable[[bytes], dict[str, str]], int, str]
REFUSALS: dict[str, Case] = {
    "github-unsigned": (
        "/webhooks/github",
        PING,
        lambda b: {k: v for k, v in _github_headers(b).items() if k != "X-Hub-Signature-256"},
        401,
        "missing X-Hub-Signature-256 header",
    ),
    "github-wrong-secret": (
        "/webhooks/github",
        PING,
        lambda b: _github_headers(b, secret="not-the-secret"),
        401,
        "X-Hub-Signature-256 does not match the body",
    ),
    "github-body-changed-after-signing": (
        "/webhooks/github",
        PING + b" ",
        lambda b: _github_headers(PING),
        401,
        "X-Hub-Signature-256 does not match the body",
    ),
    "github-malformed-json": (
        "/webhooks/github",
        b'{"zen": ',
        _github_headers,
        400,
        "malformed JSON",
    ),
    "github-no-delivery-id": (
        "/webhooks/github",
        PING,
        lambda b: {**_github_headers(b), "X-GitHub-Delivery": ""},
        400,
        "X-GitHub-Delivery must be 1 to 200 visible ASCII characters",
    ),
    "github-no-event": (
        "/webhooks/github",
        PING,
        lambda b: {**_github_headers(b), "X-GitHub-Event": ""},
        400,
        "X-GitHub-Event is missing or not an event name",
    ),
    "stripe-stale": (
        "/webhooks/stripe",
        CHARGE,
        lambda b: _stripe_headers(b, T0 - STRIPE_TOLERANCE - 1),
        401,
        "Stripe-Signature timestamp is more than 300 s from now",
    ),
    "stripe-future": (
        "/webhooks/stripe",
        CHARGE,
        lambda b: _stripe_headers(b, T0 + STRIPE_TOLERANCE + 1),
        401,
        "Stripe-Signature timestamp is more than 300 s from now",
    ),
    "stripe-wrong-secret": (
        "/webhooks/stripe",
        CHARGE,
        lambda b: _stripe_headers(b, T0, secret="whsec_other"),
        401,
        "Stripe-Signature does not match the body",
    ),
    "stripe-github-style-signature": (
        "/webhooks/stripe",
        CHARGE,
        lambda b: {"Stripe-Signature": github_signature(STRIPE_SECRET, b)},
        401,
        "Stripe-Signature has no single t=<unix time>",
    ),
    "stripe-not-an-object": (
        "/webhooks/stripe",
        b'["evt_1"]',
        lambda b: _stripe_headers(b, T0),
        400,
        "malformed JSON: the body is a JSON array, not an object",
    ),
    "generic-unsigned": (
        "/webhooks/ci",
        b"{}",
        lambda b: {"X-Wakeful-Delivery": "d-1"},
        401,
        "missing X-Wakeful-Signature header",
    ),
    "generic-signed-with-githubs-secret": (
        "/webhooks/ci",
        b"{}",
        lambda b: {
            "X-Wakeful-Delivery": "d-1",
            "X-Wakeful-Signature": github_signature(GITHUB_SECRET, b),
        },
        401,
        "X-Wakeful-Signature does not match the body",
    ),
    "generic-no-delivery-id": (
        "/webhooks/ci",
        b"{}",
        lambda b: {"X-Wakeful-Signature": github_signature(CI_SECRET, b)},
        400,
        "X-Wakeful-Delivery must be 1 to 200 visible ASCII characters",
    ),
    "unknown-source": ("/webhooks/sentry", b"{}", lambda b: {}, 404, "not found"),
    "source-name-in-upper-case": (
        "/webhooks/GITHUB",
        PING,
        _github_headers,
        404,
        "not found",
    ),
    "path-below-a-source": ("/webhooks/github/x", PING, _github_headers, 404, "not found"),
    "no-source-name": ("/webhooks/", b"{}", lambda b: {}, 404, "not found"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_a_refused_delivery_stores_nothing(served: Served, case: str) -> None:
    path, body, headers, status, text = REFUSALS[case]
    before = served.snapshot()
    got = served.sender.post(path, body, headers(body))
    assert got[0] == status and text in got[1], got
    assert served.snapshot() == before
    assert served.worker.kicks == 0


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_other_methods_are_405_on_a_served_source_and_404_elsewhere(
    served: Served, method: str
) -> None:
    for path, status in (("/webhooks/github", 405), ("/webhooks/nope", 404)):
        conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=5)
        try:
            conn.request(method, path)
            assert conn.getresponse().status == status, path
        finally:
            conn.close()
    assert served.snapshot() == (0, 0)


def _padded(size: int) -> bytes:
    body = b'{"pad": "' + b"x" * (size - 11) + b'"}'
    assert len(body) == size
    return body


def test_a_body_over_the_cap_is_413_and_stores_nothing(served: Served) -> None:
    """Chunked (no Content-Length): refused once the cap is passed (waitress, sized by the
    front's BODY_CAP, answers before the front would)."""
    body = _padded(BODY_CAP + 1)
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
    try:
        chunks = iter([body[i : i + 65536] for i in range(0, len(body), 65536)])
        conn.request("POST", "/webhooks/github", chunks, _github_headers(body), encode_chunked=True)
        response = conn.getresponse()
        status = response.status
    finally:
        conn.close()
    assert status == 413
    assert served.snapshot() == (0, 0)


def test_a_content_length_over_the_cap_is_413_on_the_headers(served: Served) -> None:
    head = "".join(f"{k}: {v}\r\n" for k, v in _github_headers(b"").items())
    request = (
        f"POST /webhooks/github HTTP/1.1\r\nHost: x\r\n{head}Content-Length: {BODY_CAP + 1}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
        sock.sendall(request.encode())
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:80]
    assert served.snapshot() == (0, 0)


def test_a_body_of_exactly_the_cap_is_read_and_stored(served: Served) -> None:
    body = _padded(BODY_CAP)
    sent = served.sender.github("ping", body)
    assert (sent.status, sent.text) == (200, "stored")


def test_an_endpoint_whose_secret_is_not_set_is_404(make_store: MakeStore) -> None:
    """A front with GitHub only: a correctly signed Stripe delivery finds no endpoint."""
    running = serve(make_store(), sources=SOURCES[:1])
    try:
        event = stripe_event("charge.succeeded")
        sent = running.sender.stripe(event)
        assert (sent.status, sent.text) == (404, "not found")
        assert running.sender.github_example("ping").status == 200
        assert count_events(running.store) == 1
    finally:
        running.close()
    bare = serve(make_store(), sources=())
    try:
        assert bare.sender.github_example("ping").status == 404
        assert count_events(bare.store) == 0
    finally:
        bare.close()


def test_a_locked_store_is_503_and_the_retry_is_stored_once(tmp_path: Path) -> None:
    """Fault chosen: another connection holds SQLite's write lock past the store's busy
    timeout (the real fault a busy disk or another process causes)."""
    path = tmp_path / "locked.db"
    running = serve(open_store(path, busy_timeout_ms=300))
    blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        refused = running.sender.github_example("issues.opened")
        blocker.execute("ROLLBACK")
        assert (refused.status, refused.text) == (503, "store unavailable; please retry")
        assert count_events(running.store) == 0
        retried = running.sender.github_example("issues.opened", delivery=refused.delivery_id)
        assert (retried.status, retried.text) == (200, "stored")
        assert [e.source_id for e in running.store.events(InboxId.conversation(OPS))] == [
            refused.delivery_id
        ]
    finally:
        blocker.close()
        running.close()
        running.store.close()


def ingested(source: str, outcome: str) -> float:
    labels = {"source": source, "outcome": outcome}
    return metrics.REGISTRY.get_sample_value("wakeful_events_ingested_total", labels) or 0.0


def test_deliveries_are_counted_by_source_and_outcome(served: Served) -> None:
    """/metrics: wakeful_events_ingested_total{source, outcome} counts webhooks like Slack."""
    before = {o: ingested("stripe", o) for o in ("stored", "duplicate", "rejected")}
    event = stripe_event("charge.succeeded")
    assert served.sender.stripe(event).status == 200
    assert served.sender.stripe(event).status == 200
    assert served.sender.stripe(event, secret="whsec_forged").status == 401
    assert served.sender.stripe(event, timestamp=T0 - 3600).status == 401
    after = {o: ingested("stripe", o) - before[o] for o in before}
    assert after == {"stored": 1, "duplicate": 1, "rejected": 2}
