"""Webhooks into the inbox: a signed delivery from GitHub, Stripe or another source becomes one
inbox event keyed by its delivery id, so the store refuses a retried delivery's second copy.

Each delivery is checked in the order that stores nothing on a rejection: the signature over
the raw body first (401), then the body and the headers that name the delivery (400); only a
delivery that passes both is stored, and the answer is 200 only after the commit (503 when the
store cannot take the write, so the sender retries). The front (bot/front/wsgi.py) routes
`POST /webhooks/<name>` here after its body cap (413) and answers 404 for a name whose secret
is not set.

Events go to the inbox of the Slack conversation the source reports to, `channel:<id>`, as a
typed `WebhookDelivery` (core/events.py): the source's type, the delivery id, the conversation
and the parsed body (pruned, with `body_cut`, when it would not fit the store's payload cap).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from wakeful.bot.front import store_failures
from wakeful.bot.front.store_contract import WebhookStore
from wakeful.bot.process.config import WebhookSource
from wakeful.core import metrics
from wakeful.core.effects import check_json
from wakeful.core.errors import InvalidInput, StoreError
from wakeful.core.events import WebhookDelivery
from wakeful.core.inbox_id import InboxId
from wakeful.core.loops import Kicker
from wakeful.core.settings import MAX_PAYLOAD_BYTES

WEBHOOKS_PATH = "/webhooks/"
STRIPE_TOLERANCE = 300
"""Seconds a Stripe-Signature timestamp may be from now, either way (Stripe's default)."""
_DELIVERY_ID = re.compile(r"^[\x21-\x7e]{1,200}$")
_GITHUB_EVENT = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_STRIPE_TYPE = re.compile(r"^[a-z][a-z0-9_.]{0,99}$")
_TIMESTAMP = re.compile(r"^[0-9]{1,12}$")
_JSON_KINDS = {
    list: "array",
    str: "string",
    int: "number",
    float: "number",
    bool: "boolean",
    type(None): "null",
}
_PRUNE_STEPS = ((6, 50, 2000, 200), (4, 10, 500, 100), (3, 3, 200, 50))
"""(depth, list items, string characters, object keys) kept, tried in turn on a body too big."""


# -- signatures ------------------------------------------------------------------------------


def hmac_sha256(secret: str, data: bytes) -> str:
    return hmac.new(secret.encode("utf-8"), data, hashlib.sha256).hexdigest()


def _same(expected: str, given: str) -> bool:
    """Constant-time comparison of any two strings (hmac.compare_digest refuses non-ASCII str)."""
    return hmac.compare_digest(
        expected.encode("utf-8", "surrogatepass"), given.encode("utf-8", "surrogatepass")
    )


def sha256_signature_problem(secret: str, body: bytes, header: str, name: str) -> str | None:
    """What is wrong with a `sha256=<hex>` signature of the raw body (GitHub's
    X-Hub-Signature-256, wakeful's X-Wakeful-Signature), or None when it matches."""
    if not header:
        return f"missing {name} header"
    if not _same("sha256=" + hmac_sha256(secret, body), header.strip()):
        return f"{name} does not match the body"
    return None


def stripe_signature_problem(
    secret: str, body: bytes, header: str, now: int, tolerance: int = STRIPE_TOLERANCE
) -> str | None:
    """What is wrong with a Stripe-Signature (`t=<unix time>,v1=<hex>[,v1=<hex>...]`: HMAC-SHA256
    of `"{t}.{body}"`; any one v1 may match, as during a secret roll), or None when it is good.
    The timestamp must be within `tolerance` seconds of `now`, past or future."""
    if not header:
        return "missing Stripe-Signature header"
    pairs = [part.strip().partition("=") for part in header.split(",")]
    stamps = [value for key, _, value in pairs if key == "t"]
    signatures = [value for key, _, value in pairs if key == "v1"]
    if len(stamps) != 1 or not _TIMESTAMP.match(stamps[0]):
        return "Stripe-Signature has no single t=<unix time>"
    if not signatures:
        return "Stripe-Signature has no v1 signature"
    stamp = int(stamps[0])
    expected = hmac_sha256(secret, f"{stamp}.".encode() + body)
    if not any(_same(expected, s) for s in signatures):
        return "Stripe-Signature does not match the body"
    if abs(now - stamp) > tolerance:
        return f"Stripe-Signature timestamp is more than {tolerance} s from now"
    return None


# -- reading a delivery ----------------------------------------------------------------------


class Rejected(Exception):
    """A delivery refused before anything is stored: the HTTP status and the reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Delivery:
    """A verified delivery: its id (the inbox key), its event type and its parsed body."""

    delivery_id: str
    type: str | None
    body: dict[str, Any]


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_body(raw: bytes, content_type: str = "", form: bool = False) -> dict[str, Any]:
    """The body as a JSON object, or Rejected(400) saying why not. With `form`, GitHub's other
    content type is read too: `application/x-www-form-urlencoded` with the JSON in `payload`."""
    try:
        text = raw.decode("utf-8")
        if form and content_type.split(";")[0].strip().lower() == (
            "application/x-www-form-urlencoded"
        ):
            fields = parse_qs(text, strict_parsing=True, max_num_fields=20)
            if len(fields.get("payload", [])) != 1:
                raise Rejected(400, "malformed body: a form body needs one payload field")
            text = fields["payload"][0]
        doc = json.loads(text, parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise Rejected(400, "malformed body: not UTF-8") from None
    except (ValueError, RecursionError) as exc:
        raise Rejected(400, f"malformed JSON: {str(exc)[:200]}") from None
    if not isinstance(doc, dict):
        what = _JSON_KINDS.get(type(doc), "value")
        raise Rejected(400, f"malformed JSON: the body is a JSON {what}, not an object")
    return doc


def _delivery_id(value: Any, what: str) -> str:
    if not isinstance(value, str) or not _DELIVERY_ID.match(value):
        raise Rejected(400, f"{what} must be 1 to 200 visible ASCII characters")
    return value


def read_delivery(
    source: WebhookSource, headers: Mapping[str, str], body: bytes, now: int
) -> Delivery:
    """Verify and read one delivery to `source`; Rejected (401 or 400) says what is wrong.
    `headers` are keyed in lower case."""
    if source.scheme == "github":
        problem = sha256_signature_problem(
            source.secret, body, headers.get("x-hub-signature-256", ""), "X-Hub-Signature-256"
        )
    elif source.scheme == "stripe":
        problem = stripe_signature_problem(
            source.secret, body, headers.get("stripe-signature", ""), now
        )
    else:
        problem = sha256_signature_problem(
            source.secret, body, headers.get("x-wakeful-signature", ""), "X-Wakeful-Signature"
        )
    if problem is not None:
        raise Rejected(401, problem)
    doc = parse_body(body, headers.get("content-type", ""), form=source.scheme == "github")
    if source.scheme == "github":
        event = headers.get("x-github-event", "")
        if not _GITHUB_EVENT.match(event):
            raise Rejected(400, "X-GitHub-Event is missing or not an event name")
        delivery_id = _delivery_id(headers.get("x-github-delivery"), "X-GitHub-Delivery")
        return Delivery(delivery_id, event, doc)
    if source.scheme == "stripe":
        kind = doc.get("type")
        if not isinstance(kind, str) or not _STRIPE_TYPE.match(kind):
            raise Rejected(400, "malformed body: a Stripe event needs a type like charge.succeeded")
        return Delivery(_delivery_id(doc.get("id"), "the Stripe event's id"), kind, doc)
    delivery_id = _delivery_id(headers.get("x-wakeful-delivery"), "X-Wakeful-Delivery")
    return Delivery(delivery_id, None, doc)


def event_payload(source: WebhookSource, delivery: Delivery) -> dict[str, Any]:
    """The inbox event's payload. A body that would take the payload past the store's cap
    (GitHub sends up to 25 MB) is pruned, and `body_cut` says so: the report needs only a few
    fields, and a refused delivery would be lost (GitHub does not retry by itself)."""
    payload = WebhookDelivery(
        type=delivery.type,
        delivery_id=delivery.delivery_id,
        body=delivery.body,
        channel=source.channel,
    ).to_wire()
    if _size(payload) <= MAX_PAYLOAD_BYTES:
        return payload
    payload["body_cut"] = True
    for depth, items, chars, keys in _PRUNE_STEPS:
        payload["body"] = _prune(delivery.body, depth, items, chars, keys)
        if _size(payload) <= MAX_PAYLOAD_BYTES:
            return payload
    payload["body"] = {}
    return payload


def _size(payload: dict[str, Any]) -> int:
    try:
        return len(check_json(payload, "payload").encode("utf-8", "surrogatepass"))
    except InvalidInput:
        return 0  # not storable at all: the store says why (a 400)


def _prune(value: Any, depth: int, items: int, chars: int, keys: int) -> Any:
    if isinstance(value, str):
        return value if len(value) <= chars else value[:chars] + "…"
    if isinstance(value, list):
        return [_prune(v, depth - 1, items, chars, keys) for v in value[:items]] if depth else []
    if isinstance(value, dict):
        kept = list(value.items())[:keys] if depth else []
        return {k: _prune(v, depth - 1, items, chars, keys) for k, v in kept}
    return value


# -- the door --------------------------------------------------------------------------------


class Webhooks:
    """The configured endpoints: verify, store once under (source, delivery id), kick the
    worker. `clock` is the same integer-seconds clock the Slack listeners use."""

    def __init__(
        self,
        store: WebhookStore,
        sources: tuple[WebhookSource, ...],
        wake_worker: Kicker,
        clock: Callable[[], int],
    ) -> None:
        self.store = store
        self.sources = {s.name: s for s in sources}
        self.wake_worker = wake_worker
        self.clock = clock

    def serves(self, name: str) -> bool:
        return name in self.sources

    def receive(self, name: str, headers: Mapping[str, str], body: bytes) -> tuple[int, str]:
        """(HTTP status, text) for one delivery to `/webhooks/<name>` (a served name)."""
        source = self.sources[name]
        now = self.clock()
        try:
            delivery = read_delivery(source, headers, body, now)
        except Rejected as exc:
            metrics.count_ingest(source.name, "rejected")  # the store counts the rest
            return exc.status, exc.reason
        payload = event_payload(source, delivery)
        inbox = InboxId.conversation(source.channel)
        try:
            result = self.store.ingest(inbox, source.name, delivery.delivery_id, payload, now)
        except InvalidInput as exc:
            return 400, f"malformed body: {exc}"
        except StoreError as error:
            return store_failures.answer_to(error)
        if not result.stored:
            return 200, "duplicate delivery; already stored"
        self.wake_worker.kick()
        return 200, "stored"
