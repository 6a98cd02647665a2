"""Refunds through Stripe, with Stripe's own SDK pointed at the credential gateway: the worker
never holds the Stripe key (the gateway adds it), and every refund carries the approval's
request id as its Idempotency-Key, so a retried run gets Stripe's first answer back instead of
a second refund. Written on the public agent API alone (`wakeful.agents.Gateway`).

A refund is two calls: the order's PaymentIntent found by Stripe's search
(`metadata['order_id']`), then `POST /v1/refunds` for it. What comes back is recorded as the
approved tool's result (a durable step keyed by the request id), so it stands for every retry.
An answer that a retry must not change is a result: no payment, a payment already refunded,
Stripe's refusals (a card error, an invalid request), a 5xx Stripe keeps under the key (a retry
would only replay it), a gateway that refuses the destination. What a retry can cure raises
`RefundUnavailable`, so the run fails and is retried with backoff under the same key: a rate
limit, a gateway or Stripe that could not be reached or did not answer in time.

Stripe's webhooks confirm the refund afterwards (bot/agents/stripe_confirm.py).
"""

from __future__ import annotations

import http.client
import logging
from collections.abc import Mapping
from typing import Any

import stripe
from requests.structures import CaseInsensitiveDict

from wakeful.agents import Gateway, InvalidInput, Query, Steps, inert

PLACEHOLDER_KEY = "sk_held_by_the_gateway"
"""What the SDK sends as its key: the gateway drops it and adds the real one."""
SENT = "stripe_refund:sent"
"""The step recording, before the refund call, which PaymentIntent a request refunds: a retry
refunds the same one, so it sends the same parameters under the same key."""


class RefundUnavailable(RuntimeError):
    """Stripe or the gateway cannot be asked now (a rate limit, a timeout, unreachable): the
    run fails and is retried with backoff, sending the same Idempotency-Key again."""


class GatewayHTTPClient(stripe.HTTPClient):
    """Stripe's SDK transport over the gateway: loopback or its Unix socket, nowhere else,
    no proxy settings honoured."""

    name = "wakeful-gateway"

    def __init__(self, gateway: Gateway, timeout: float = 30.0) -> None:
        super().__init__()
        self.gateway = gateway
        self.timeout = timeout

    def request(  # type: ignore[override]
        self,
        method: str,
        url: str,
        headers: Mapping[str, str] | None,
        post_data: Any = None,
        *,
        _usage: Any = None,
    ) -> tuple[bytes, int, Mapping[str, str]]:
        body = post_data.encode() if isinstance(post_data, str) else post_data
        try:
            got = self.gateway.send(method, url, headers or {}, body, self.timeout)
        except (OSError, http.client.HTTPException) as exc:
            raise stripe.APIConnectionError(  # type: ignore[no-untyped-call]
                f"the gateway could not be reached: {exc}", should_retry=True
            ) from exc
        return got.body, got.status, CaseInsensitiveDict(dict(got.headers))

    def close(self) -> None:
        return None


class StripeRefunds:
    """Refund an order through Stripe, once per request id."""

    def __init__(
        self,
        gateway: Gateway,
        destination: str = "stripe",
        timeout: float = 30.0,
        retries: int = 2,
    ) -> None:
        self.destination = destination
        # The SDK logs every request line at INFO, query strings included: its errors are
        # ours to report, its chatter is not.
        logging.getLogger("stripe").setLevel(logging.WARNING)
        self.client = stripe.StripeClient(
            api_key=PLACEHOLDER_KEY,
            base_addresses={"api": gateway.url(destination)},
            http_client=GatewayHTTPClient(gateway, timeout),
            max_network_retries=retries,
        )

    def refund(self, steps: Steps, query: Query, order: str, request_id: str) -> dict[str, Any]:
        """The refund of `order` under `request_id` (its Idempotency-Key), as a JSON result."""
        shown = inert(order)
        sent_key = f"{SENT}:{request_id}"
        sent_before = query.step(sent_key) is not None
        try:
            if sent_before:
                step = query.step(sent_key)
                payment = str(step.result["payment_intent"]) if step else ""
            else:
                found = self._payment(order)
                if isinstance(found, dict):
                    return found
                payment = found
                steps.once(sent_key, lambda _k: {"payment_intent": payment}, name=SENT)
            refund = self.client.v1.refunds.create(
                params={
                    "payment_intent": payment,
                    "metadata": {"order_id": order, "wakeful_request": request_id},
                },
                options={"idempotency_key": request_id},
            )
        except stripe.StripeError as exc:
            return failed(exc, shown, sent_before)
        record = {"order_id": order, "request": request_id, "refund_id": refund.id}
        steps.once(f"refund_order:{order}", lambda _k: record, name="refund_order:once")
        return {
            "refunded": True,
            "order_id": order,
            "via": "stripe",
            "refund_id": str(refund.id),
            "amount": int(refund.amount),
            "currency": str(refund.currency),
            "status": str(refund.status),
            "payment_intent": payment,
        }

    def _payment(self, order: str) -> str | dict[str, Any]:
        """The order's paid PaymentIntent id, or the answer when there is none."""
        if "'" in order or "\\" in order:
            raise InvalidInput(f"an order id cannot hold quotes: {order!r}")
        found = self.client.v1.payment_intents.search(
            params={"query": f"metadata['order_id']:'{order}'", "limit": 10}
        )
        shown = inert(order)
        if not found.data:
            return _not_refunded(
                order, f"No payment for order {shown} was found in Stripe; nothing was refunded."
            )
        paid = [pi for pi in found.data if pi.status == "succeeded"]
        if not paid:
            status = inert(str(found.data[0].status))
            return _not_refunded(
                order,
                f"Order {shown}'s payment in Stripe has not succeeded (status {status}); "
                "nothing was refunded.",
            )
        return str(paid[0].id)


def failed(exc: stripe.StripeError, order: str, sent_before: bool) -> dict[str, Any]:
    """What a refused or failed call comes to: a result that stands, or RefundUnavailable
    when a retry under the same key is the right answer. `order` is shown as it is."""
    headers = exc.headers or {}
    mark = str(headers.get("wakeful-gateway") or "")
    body: dict[str, Any] = exc.json_body if isinstance(exc.json_body, dict) else {}
    found = body.get("error")
    error: dict[str, Any] = found if isinstance(found, dict) else {}
    code = str(error.get("code") or getattr(exc, "code", "") or "")
    message = inert(" ".join(str(error.get("message") or exc.user_message or "").split())[:300])
    status = exc.http_status
    if mark == "refused" and code not in ("rate_limited", "revocations_unknown"):
        if sent_before:
            raise RefundUnavailable(
                f"the gateway refused ({code}) a refund an earlier attempt may have sent; "
                "retried under the same key once it lets it through"
            )
        return _not_refunded(
            order,
            f"The refund of order {order} was not done: the gateway refused the call "
            f"({message}). Nothing was refunded.",
            code,
        )
    if mark in ("refused", "upstream_error") or isinstance(
        exc, stripe.RateLimitError | stripe.APIConnectionError
    ):
        raise RefundUnavailable(f"Stripe could not be asked now ({status} {code}): {message}")
    if isinstance(exc, stripe.InvalidRequestError) and code == "charge_already_refunded":
        return {
            "refunded": False,
            "order_id": order,
            "error": code,
            "already": f"Order {order}'s payment was already fully refunded in Stripe.",
        }
    if isinstance(exc, stripe.AuthenticationError):
        why = (
            f"Stripe refused the gateway's credential for order {order} ({message}); nothing "
            "was refunded. An operator must check the gateway's Stripe key."
        )
        return _not_refunded(order, why, "authentication")
    if isinstance(exc, stripe.APIError) and (status or 0) >= 500:
        kind = inert(str(error.get("type") or "api_error"))
        why = (
            f"Stripe answered with an error ({status} {kind}) and could not say whether order "
            f"{order} was refunded; it was not tried again under this request. If Stripe did "
            "refund it, its confirmation will follow here."
        )
        return _not_refunded(order, why, kind)
    kind = "declined" if isinstance(exc, stripe.CardError) else "refused"
    why = f"Stripe {kind} the refund of order {order}: {message}" + (f" ({code})" if code else "")
    return _not_refunded(order, why + "; nothing was refunded.", code or kind)


def _not_refunded(order: str, why: str, error: str = "") -> dict[str, Any]:
    return {"refunded": False, "order_id": order, "error": error or "not_found", "why": why}
