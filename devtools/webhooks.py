"""Webhook deliveries as GitHub, Stripe and other signed sources send them, for tests, chaos
runs and the demo: the payload examples the services publish (fixtures/webhooks/, see its
README) posted over real HTTP with the headers and signatures each service documents.

- GitHub (docs "Webhook events and payloads", example delivery): `X-GitHub-Event`,
  `X-GitHub-Delivery` (a GUID), `X-GitHub-Hook-ID`, `X-GitHub-Hook-Installation-Target-*`,
  `X-Hub-Signature` (HMAC-SHA1) and `X-Hub-Signature-256` (HMAC-SHA256) of the raw body,
  `User-Agent: GitHub-Hookshot/...`, `Content-Type: application/json`.
- Stripe (stripe-python's webhook tests and verifier): `Stripe-Signature: t=<unix>,v1=<hex>`,
  HMAC-SHA256 of `"{t}.{body}"` with the endpoint secret; a retry is the same event (same id)
  signed again with a new timestamp.
- wakeful's generic scheme: `X-Wakeful-Signature: sha256=<hex>` of the raw body and the
  delivery id in `X-Wakeful-Delivery`.
"""

from __future__ import annotations

import copy
import hmac
import http.client
import json
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures" / "webhooks"
GITHUB_USER_AGENT = "GitHub-Hookshot/044aadd"
"""The User-Agent of GitHub's example delivery (the prefix `GitHub-Hookshot/` is documented)."""
STRIPE_USER_AGENT = "Stripe/1.0 (+https://stripe.com/docs/webhooks)"
GITHUB_EVENTS = (
    "ping",
    "ping.with-organization",
    "push",
    "issues.opened",
    "pull_request.opened",
    "workflow_run.completed",
)
"""The GitHub payload examples kept under fixtures/webhooks/github (`<event>[.<variant>]`)."""
STRIPE_EVENTS = (
    "charge.succeeded",
    "payment_intent.succeeded",
    "charge.dispute.created",
    "invoice.payment_failed",
)
"""The Stripe events kept under fixtures/webhooks/stripe."""


@cache
def github_payload(name: str) -> bytes:
    """The bytes of a GitHub payload example, e.g. `issues.opened` (sent as they are)."""
    return (FIXTURES / "github" / f"{name}.payload.json").read_bytes()


def stripe_event(event_type: str, event_id: str | None = None) -> dict[str, Any]:
    """A Stripe event of `event_type` with its own id (each real event has one; a retry
    reuses it), built from the kept example."""
    event: dict[str, Any] = copy.deepcopy(_stripe_example(event_type))
    event["id"] = event_id or f"evt_{uuid.uuid4().hex[:24]}"
    return event


@cache
def _stripe_example(event_type: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FIXTURES / "stripe" / f"{event_type}.json").read_bytes())
    return doc


def hmac_hex(secret: str, data: bytes, digest: str = "sha256") -> str:
    return hmac.new(secret.encode("utf-8"), data, digest).hexdigest()


def github_signature(secret: str, body: bytes) -> str:
    """X-Hub-Signature-256 (and wakeful's X-Wakeful-Signature): `sha256=` + hex HMAC."""
    return "sha256=" + hmac_hex(secret, body)


def stripe_signature(secret: str, body: bytes, timestamp: int, also: Iterable[str] = ()) -> str:
    """Stripe-Signature for `body` signed at `timestamp`; `also` adds more v1 values (signed
    with other secrets, as Stripe does while an endpoint's secret is being rolled)."""
    signed = f"{timestamp}.".encode() + body
    values = [hmac_hex(s, signed) for s in (secret, *also)]
    return f"t={timestamp}," + ",".join(f"v1={v}" for v in values)


@dataclass(frozen=True)
class Sent:
    """What the app answered one delivery."""

    status: int
    text: str
    delivery_id: str


class WebhookSender:
    """Posts signed deliveries to an app's `/webhooks/<name>` endpoints over real HTTP."""

    def __init__(
        self,
        base_url: str,
        *,
        github_secret: str = "",
        stripe_secret: str = "",
        secrets: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        timeout: float = 10.0,
    ) -> None:
        parts = urllib.parse.urlsplit(base_url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.github_secret = github_secret
        self.stripe_secret = stripe_secret
        self.secrets = dict(secrets or {})
        self.clock = clock
        self.timeout = timeout

    def post(self, path: str, body: bytes, headers: Mapping[str, str]) -> tuple[int, str]:
        """One POST on a fresh connection: (status, answer text)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request("POST", path, body=body, headers=dict(headers))
            response = conn.getresponse()
            return response.status, response.read().decode("utf-8", "replace")
        finally:
            conn.close()

    def github(
        self,
        event: str,
        body: bytes,
        delivery: str | None = None,
        secret: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Sent:
        """A GitHub delivery of `event` (X-GitHub-Event); reuse `delivery` to redeliver."""
        delivery = delivery or str(uuid.uuid4())
        key = self.github_secret if secret is None else secret
        target = _repository_id(body)
        sent = {
            "X-GitHub-Delivery": delivery,
            "X-GitHub-Event": event,
            "X-GitHub-Hook-ID": "292430182",
            "X-GitHub-Hook-Installation-Target-ID": target or "79929171",
            "X-GitHub-Hook-Installation-Target-Type": "repository",
            "X-Hub-Signature": "sha1=" + hmac_hex(key, body, "sha1"),
            "X-Hub-Signature-256": github_signature(key, body),
            "User-Agent": GITHUB_USER_AGENT,
            "Content-Type": "application/json",
            **(headers or {}),
        }
        status, text = self.post("/webhooks/github", body, sent)
        return Sent(status, text, delivery)

    def github_example(self, name: str, delivery: str | None = None) -> Sent:
        """A kept payload example by name (`issues.opened`), as GitHub delivers it."""
        return self.github(name.split(".")[0], github_payload(name), delivery)

    def stripe(
        self,
        event: Mapping[str, Any],
        timestamp: int | None = None,
        secret: str | None = None,
        also: Iterable[str] = (),
    ) -> Sent:
        """A Stripe delivery of `event` (its `id` is the delivery id; send it again to retry)."""
        body = (json.dumps(event, indent=2) + "\n").encode()
        stamp = int(self.clock()) if timestamp is None else timestamp
        key = self.stripe_secret if secret is None else secret
        headers = {
            "Stripe-Signature": stripe_signature(key, body, stamp, also),
            "User-Agent": STRIPE_USER_AGENT,
            "Content-Type": "application/json; charset=utf-8",
        }
        status, text = self.post("/webhooks/stripe", body, headers)
        return Sent(status, text, str(event.get("id")))

    def generic(
        self, name: str, body: bytes, delivery: str | None = None, secret: str | None = None
    ) -> Sent:
        """A delivery to `/webhooks/<name>` in wakeful's generic scheme."""
        delivery = delivery or f"d-{uuid.uuid4().hex[:16]}"
        key = self.secrets.get(name, "") if secret is None else secret
        headers = {
            "X-Wakeful-Signature": github_signature(key, body),
            "X-Wakeful-Delivery": delivery,
            "Content-Type": "application/json",
        }
        status, text = self.post(f"/webhooks/{name}", body, headers)
        return Sent(status, text, delivery)


def _repository_id(body: bytes) -> str:
    try:
        repository = json.loads(body).get("repository") or {}
        return str(repository.get("id") or "")
    except (ValueError, AttributeError):
        return ""
