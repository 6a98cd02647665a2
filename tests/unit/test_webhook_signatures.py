"""The three signature schemes, checked against the services' own published values and against
signatures computed here with the documented algorithms (not with the code under test)."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from tests.conftest import T0
from wakeful.bot.front.webhooks import (
    STRIPE_TOLERANCE,
    Rejected,
    parse_body,
    read_delivery,
    sha256_signature_problem,
    stripe_signature_problem,
)
from wakeful.bot.process.config import WebhookSource

SECRET = "whsec_unit_test_secret"
BODY = b'{\n  "id": "evt_test_webhook",\n  "object": "event",\n  "type": "charge.succeeded"\n}'


def hexmac(secret: str, data: bytes) -> str:
    return hmac.new(secret.encode(), data, hashlib.sha256).hexdigest()


def stripe_header(timestamp: int, *signatures: str) -> str:
    return f"t={timestamp}," + ",".join(f"v1={s}" for s in signatures)


def good(timestamp: int = T0, secret: str = SECRET, body: bytes = BODY) -> str:
    return hexmac(secret, f"{timestamp}.".encode() + body)


# -- GitHub's X-Hub-Signature-256 and wakeful's X-Wakeful-Signature ---------------------------


def test_githubs_published_example_verifies() -> None:
    """GitHub's "Validating webhook deliveries" page gives this secret, body and signature."""
    secret, body = "It's a Secret to Everybody", b"Hello, World!"
    header = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    assert sha256_signature_problem(secret, body, header, "X-Hub-Signature-256") is None
    assert sha256_signature_problem(secret, body + b" ", header, "X-Hub-Signature-256") == (
        "X-Hub-Signature-256 does not match the body"
    )


@pytest.mark.parametrize(
    "header",
    [
        "",
        "sha256=",
        "sha1=" + hexmac("k", BODY),  # GitHub's older header scheme is not accepted here
        hexmac("k", BODY),  # the hex without its scheme
        "sha256=" + hexmac("k", BODY).upper(),
        "sha256=" + hexmac("other", BODY),
        "sha256=" + hexmac("k", BODY)[:-1],
        "sha256=" + hexmac("k", BODY) + "00",
        "sha256=" + hexmac("k", BODY) + ", sha256=" + hexmac("k", BODY),  # a doubled header
        "sha256=ünïcödé",
        "sha256=\ud800",
    ],
)
def test_a_wrong_sha256_header_is_refused(header: str) -> None:
    problem = sha256_signature_problem("k", BODY, header, "X-Wakeful-Signature")
    assert problem is not None and "X-Wakeful-Signature" in problem


def test_the_right_sha256_header_passes_with_surrounding_spaces() -> None:
    header = " sha256=" + hexmac("k", BODY) + " "
    assert sha256_signature_problem("k", BODY, header, "X-Wakeful-Signature") is None


# -- Stripe-Signature ----------------------------------------------------------------------------


def test_a_stripe_signature_verifies() -> None:
    assert stripe_signature_problem(SECRET, BODY, stripe_header(T0, good()), T0) is None


def test_any_of_several_v1_values_may_match() -> None:
    """During a secret roll Stripe signs with both secrets; any one v1 is enough, in any place,
    and a v0 (test-mode legacy scheme) beside them is ignored."""
    old = good(secret="whsec_old")
    for values in ([old, good()], [good(), old], [old, "0" * 64, good(), "zz"]):
        header = stripe_header(T0, *values) + ",v0=" + "ab" * 32
        assert stripe_signature_problem(SECRET, BODY, header, T0) is None, header


def test_none_of_several_v1_values_matching_is_refused() -> None:
    header = stripe_header(T0, good(secret="whsec_a"), good(secret="whsec_b"))
    assert stripe_signature_problem(SECRET, BODY, header, T0) == (
        "Stripe-Signature does not match the body"
    )


@pytest.mark.parametrize("age", [0, 1, STRIPE_TOLERANCE, -STRIPE_TOLERANCE])
def test_a_timestamp_within_the_tolerance_passes(age: int) -> None:
    stamp = T0 - age
    assert stripe_signature_problem(SECRET, BODY, stripe_header(stamp, good(stamp)), T0) is None


@pytest.mark.parametrize("age", [STRIPE_TOLERANCE + 1, 3600, 3 * 86400, -(STRIPE_TOLERANCE + 1)])
def test_a_stale_or_future_timestamp_is_refused_even_when_well_signed(age: int) -> None:
    stamp = T0 - age
    problem = stripe_signature_problem(SECRET, BODY, stripe_header(stamp, good(stamp)), T0)
    assert problem == f"Stripe-Signature timestamp is more than {STRIPE_TOLERANCE} s from now"


def test_the_timestamp_is_part_of_what_is_signed() -> None:
    """A captured signature cannot be replayed under a fresh timestamp."""
    header = stripe_header(T0, good(T0 - 3600))
    assert stripe_signature_problem(SECRET, BODY, header, T0) == (
        "Stripe-Signature does not match the body"
    )


@pytest.mark.parametrize(
    "header",
    [
        "",
        "garbage",
        f"v1={good()}",  # no timestamp
        f"t={T0}",  # no signature
        f"t={T0},v0={good()}",  # only the legacy scheme
        f"t={T0},t={T0},v1={good()}",  # two timestamps
        f"t=,v1={good()}",
        f"t=-{T0},v1={good()}",
        f"t={T0}.5,v1={good()}",
        f"t=1e9,v1={good()}",
        f"t={'9' * 13},v1={good()}",  # a 13-digit time: an attack on int(), not a clock
        f"t=٣٤٥,v1={good()}",  # non-ASCII digits
        f"t={T0},v1=",
        f"T={T0},V1={good()}",
        f"t={T0};v1={good()}",
    ],
)
def test_a_malformed_stripe_header_is_refused(header: str) -> None:
    assert stripe_signature_problem(SECRET, BODY, header, T0) is not None


def test_stripe_signs_the_raw_bytes() -> None:
    """Re-serialising the JSON (another spacing) breaks the signature: the raw body counts."""
    header = stripe_header(T0, good())
    respaced = BODY.replace(b"\n  ", b"")
    assert stripe_signature_problem(SECRET, respaced, header, T0) is not None


# -- reading what passed the signature -------------------------------------------------------


GITHUB = WebhookSource("github", "github", "gh", "C0OPS")
STRIPE = WebhookSource("stripe", "stripe", SECRET, "C0OPS")
GENERIC = WebhookSource("ci", "generic", "ci", "C0OPS")


def signed_github(body: bytes, **headers: str) -> dict[str, str]:
    return {"x-hub-signature-256": "sha256=" + hexmac("gh", body), **headers}


def test_the_signature_is_checked_before_the_body_is_read() -> None:
    with pytest.raises(Rejected) as info:
        read_delivery(GITHUB, {"x-github-event": "push"}, b"not json at all", T0)
    assert (info.value.status, info.value.reason) == (401, "missing X-Hub-Signature-256 header")


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({"x-github-delivery": "d-1"}, "X-GitHub-Event is missing or not an event name"),
        (
            {"x-github-delivery": "d-1", "x-github-event": "Push!"},
            "X-GitHub-Event is missing or not an event name",
        ),
        ({"x-github-event": "push"}, "X-GitHub-Delivery must be 1 to 200 visible ASCII characters"),
        (
            {"x-github-event": "push", "x-github-delivery": "a b"},
            "X-GitHub-Delivery must be 1 to 200 visible ASCII characters",
        ),
        (
            {"x-github-event": "push", "x-github-delivery": "x" * 201},
            "X-GitHub-Delivery must be 1 to 200 visible ASCII characters",
        ),
    ],
)
def test_a_github_delivery_needs_its_event_and_delivery_headers(
    headers: dict[str, str], reason: str
) -> None:
    body = b'{"zen": "hi"}'
    with pytest.raises(Rejected) as info:
        read_delivery(GITHUB, signed_github(body, **headers), body, T0)
    assert (info.value.status, info.value.reason) == (400, reason)


def test_githubs_form_content_type_is_read_too() -> None:
    """GitHub's other content type: the JSON in a `payload` form field, signed as sent."""
    body = b"payload=%7B%22zen%22%3A+%22hi%22%7D"
    headers = signed_github(
        body,
        **{
            "x-github-event": "ping",
            "x-github-delivery": "d-1",
            "content-type": "application/x-www-form-urlencoded",
        },
    )
    delivery = read_delivery(GITHUB, headers, body, T0)
    assert (delivery.delivery_id, delivery.type, delivery.body) == ("d-1", "ping", {"zen": "hi"})


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        (b'{"type": "charge.succeeded"}', "the Stripe event's id must be 1 to 200"),
        (b'{"id": 7, "type": "charge.succeeded"}', "the Stripe event's id must be 1 to 200"),
        (b'{"id": "evt_1"}', "a Stripe event needs a type"),
        (b'{"id": "evt_1", "type": "Charge Succeeded"}', "a Stripe event needs a type"),
    ],
)
def test_a_stripe_event_needs_its_id_and_type(doc: bytes, reason: str) -> None:
    headers = {"stripe-signature": stripe_header(T0, good(body=doc))}
    with pytest.raises(Rejected) as info:
        read_delivery(STRIPE, headers, doc, T0)
    assert info.value.status == 400 and reason in info.value.reason


def test_a_generic_delivery_needs_its_delivery_header() -> None:
    body = b"{}"
    headers = {"x-wakeful-signature": "sha256=" + hexmac("ci", body)}
    with pytest.raises(Rejected) as info:
        read_delivery(GENERIC, headers, body, T0)
    assert (info.value.status, info.value.reason) == (
        400,
        "X-Wakeful-Delivery must be 1 to 200 visible ASCII characters",
    )
    delivery = read_delivery(GENERIC, {**headers, "x-wakeful-delivery": "build-7"}, body, T0)
    assert (delivery.delivery_id, delivery.type, delivery.body) == ("build-7", None, {})


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"", "malformed JSON"),
        (b"{", "malformed JSON"),
        (b"[1, 2]", "the body is a JSON array, not an object"),
        (b'"text"', "the body is a JSON string, not an object"),
        (b"null", "the body is a JSON null, not an object"),
        (b'{"a": NaN}', "NaN is not JSON"),
        (b'{"a": Infinity}', "Infinity is not JSON"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "malformed JSON"),
        (b'{"n": ' + b"9" * 5000 + b"}", "malformed JSON"),
    ],
)
def test_a_body_that_is_not_a_json_object_is_400(raw: bytes, reason: str) -> None:
    with pytest.raises(Rejected) as info:
        parse_body(raw)
    assert info.value.status == 400 and reason in info.value.reason
