"""Refunds through Stripe, with Stripe's own SDK pointed at the credential gateway: the worker
never holds the Stripe key (the gateway adds it), and every refund carries the approval's
request id as its Idempotency-Key, so a retried call gets Stripe's first answer back instead of
a second refund. Written on the public agent API alone (`wakeful.agents.Gateway`).

A refund is two calls: the order's PaymentIntent found by Stripe's search
(`metadata['order_id']`), then `POST /v1/refunds` for it. A refund made is the approved tool's
result (recorded under the request id, so it stands for every retry). Anything else raises, so
wakeful knows what to do and tells the person (docs/agents.md "When a tool fails"):

- `RefundUnavailable` (a `ToolUnavailable`) for what a later try can cure: the gateway or
  Stripe unreachable or too slow, a rate limit (Stripe's, with its Retry-After, or the
  gateway's), a 5xx Stripe did not keep under the key (a load balancer's 503). wakeful retries
  the call later under the same key, spending none of the event's attempts;
- `ToolFailed` for an answer that stands: no payment, a payment already refunded, Stripe's
  refusals (a card error, an invalid request, the gateway's key), the gateway refusing the
  destination, and a 5xx Stripe replays under the key (`Idempotent-Replayed: true`: a retry would
  only replay it). For that last one Stripe is asked whether a refund carries this request in
  its metadata: if one does, that is the result; if none does, nothing was refunded under it.
  Each reason is a clause read as "The refund of order X was not done: <reason>."; those only an
  operator can mend (the gateway refusing, its key refused) are marked `tell_ops`, so the
  operators' channel hears of them too.

Stripe's webhooks confirm the refund afterwards (bot/builtin/stripe_confirm.py).
"""

from __future__ import annotations

import http.client
import logging
import threading
from collections.abc import Mapping
from typing import Any

import stripe
from requests.structures import CaseInsensitiveDict

from wakeful.agents import Gateway, Query, Steps, ToolFailed, ToolUnavailable, inert

PLACEHOLDER_KEY = "sk_held_by_the_gateway"
"""What the SDK sends as its key: the gateway client sends its token (WAKEFUL_GATEWAY_TOKEN) in
its place, and the gateway drops that and adds the real key."""
SENT = "stripe_refund:sent"
"""The step recording, before the refund call, which PaymentIntent a request refunds: a retry
refunds the same one, so it sends the same parameters under the same key."""
NOT_REACHED = "the gateway could not be reached"
NO_ANSWER = "the payment service did not answer"
SLOW_DOWN = "the payment service asked to slow down"


class RefundUnavailable(ToolUnavailable):
    """Stripe or the gateway cannot be asked now (a rate limit, a timeout, unreachable, a 5xx
    Stripe did not keep): wakeful retries the refund later, sending the same Idempotency-Key
    again, and spends none of the event's attempts."""


class GatewayHTTPClient(stripe.HTTPClient):
    """Stripe's SDK transport over the gateway: loopback or its Unix socket, nowhere else,
    no proxy settings honoured. It keeps the headers of the last answer on this thread: the
    SDK drops them from the error it raises for a body that is not JSON (a load balancer's
    page)."""

    name = "wakeful-gateway"

    def __init__(self, gateway: Gateway, timeout: float = 30.0) -> None:
        super().__init__()
        self.gateway = gateway
        self.timeout = timeout
        self._last = threading.local()

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
        self._last.headers = CaseInsensitiveDict()
        try:
            got = self.gateway.send(method, url, headers or {}, body, self.timeout)
        except (OSError, http.client.HTTPException) as exc:
            raise stripe.APIConnectionError(  # type: ignore[no-untyped-call]
                f"{NOT_REACHED}: {exc}", should_retry=True
            ) from exc
        self._last.headers = CaseInsensitiveDict(dict(got.headers))
        return got.body, got.status, self._last.headers

    def last_headers(self) -> Mapping[str, str]:
        """The headers of this thread's last answer (empty when there was none)."""
        found: Mapping[str, str] = getattr(self._last, "headers", CaseInsensitiveDict())
        return found

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
        self.transport = GatewayHTTPClient(gateway, timeout)
        self.client = stripe.StripeClient(
            api_key=PLACEHOLDER_KEY,
            base_addresses={"api": gateway.url(destination)},
            http_client=self.transport,
            max_network_retries=retries,
        )

    def refund(self, steps: Steps, query: Query, order: str, request_id: str) -> dict[str, Any]:
        """The refund of `order` under `request_id` (its Idempotency-Key), as a JSON result.
        Raises RefundUnavailable (retried later under the same key) or ToolFailed (an answer
        that stands), each with a reason the person is told."""
        sent_key = f"{SENT}:{request_id}"
        sent = query.step(sent_key)
        payment = ""
        try:
            made = None
            if sent is not None:
                payment = str(sent.result["payment_intent"])
                # An earlier attempt may have refunded and lost its answer. Stripe keeps a key
                # for 24 h, as long as a call may wait (WAKEFUL_TOOL_RETRY_FOR): ask before
                # sending again instead of trusting the key alone.
                made = self._listed(payment, request_id)
            else:
                payment = self._payment(order)
                steps.once(sent_key, lambda _k: {"payment_intent": payment}, name=SENT)
            refund = made or self.client.v1.refunds.create(
                params={
                    "payment_intent": payment,
                    "metadata": {"order_id": order, "wakeful_request": request_id},
                },
                options={"idempotency_key": request_id},
            )
        except stripe.StripeError as exc:
            refund = self._failed(exc, payment, request_id, sent is not None)
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

    def _payment(self, order: str) -> str:
        """The order's paid PaymentIntent id; ToolFailed when there is none."""
        if "'" in order or "\\" in order:
            raise ToolFailed("an order id cannot hold quotes or backslashes")
        found = self.client.v1.payment_intents.search(
            params={"query": f"metadata['order_id']:'{order}'", "limit": 10}
        )
        if not found.data:
            raise ToolFailed(f"no payment for order {inert(order)} was found in Stripe")
        paid = [pi for pi in found.data if pi.status == "succeeded"]
        if not paid:
            status = inert(str(found.data[0].status))
            raise ToolFailed(f"its payment in Stripe has not succeeded (status {status})")
        return str(paid[0].id)

    def _failed(
        self, exc: stripe.StripeError, payment: str, request_id: str, sent_before: bool
    ) -> Any:
        """A refused or failed call read: raises RefundUnavailable or ToolFailed, or returns
        the refund Stripe made under this request after all (a 5xx it kept under the key)."""
        status = exc.http_status
        headers = exc.headers or (self.transport.last_headers() if status else {})
        replayed = str(_get(headers, "idempotent-replayed")).lower() == "true"
        if isinstance(status, int) and status >= 500 and replayed and payment:
            made = self._made_under(payment, request_id, status)
            if made is not None:
                return made
            raise ToolFailed(
                f"Stripe failed ({status}) and kept that answer under this request; no refund "
                "was made under it"
            ) from exc
        raise failure(exc, headers, sent_before) from exc

    def _made_under(self, payment: str, request_id: str, status: int) -> Any:
        """The refund of `payment` whose metadata names `request_id`, or None: Stripe is asked
        (its list of the PaymentIntent's refunds, newest first, every page)."""
        kept = f"Stripe failed ({status}) and kept that answer under this request"
        try:
            return self._find(payment, request_id)
        except stripe.StripeError as exc:
            why = failure(exc, exc.headers or self.transport.last_headers(), False)
            if isinstance(why, ToolUnavailable):
                raise RefundUnavailable(
                    f"{kept}, and whether it refunded could not be asked yet: {why.reason}",
                    why.retry_after,
                ) from exc
            raise ToolFailed(
                f"{kept}; whether it refunded could not be checked: {why.reason}", tell_ops=True
            ) from exc

    def _find(self, payment: str, request_id: str) -> Any:
        """The refund of `payment` whose metadata names `request_id` (Stripe's list of the
        PaymentIntent's refunds, newest first, every page), or None."""
        found = self.client.v1.refunds.list(params={"payment_intent": payment, "limit": 100})
        for refund in found.auto_paging_iter():
            metadata = refund.metadata.to_dict() if refund.metadata else {}
            if metadata.get("wakeful_request") == request_id:
                return refund
        return None

    def _listed(self, payment: str, request_id: str) -> Any:
        """`_find` before a retry sends again; None too when the gateway does not allow the
        list (an older allow rule): the idempotency key alone then stands."""
        try:
            return self._find(payment, request_id)
        except stripe.StripeError as exc:
            headers = exc.headers or self.transport.last_headers()
            if str(_get(headers, "wakeful-gateway") or "") == "refused":
                return None
            raise


def failure(
    exc: stripe.StripeError, headers: Mapping[str, str], sent_before: bool
) -> RefundUnavailable | ToolFailed:
    """What a refused or failed call comes to (a 5xx Stripe replayed under the key is the
    caller's to check first). `headers`: the answer's, `Wakeful-Gateway` saying whether the
    gateway refused, forwarded Stripe's answer, or could not reach Stripe."""
    mark = str(_get(headers, "wakeful-gateway") or "")
    body = exc.json_body if isinstance(exc.json_body, dict) else {}
    found = body.get("error")
    error: dict[str, Any] = found if isinstance(found, dict) else {}
    code = inert(str(error.get("code") or getattr(exc, "code", "") or ""))
    message = inert(" ".join(str(error.get("message") or exc.user_message or "").split())[:300])
    status = exc.http_status
    wait = _retry_after(headers)
    if isinstance(exc, stripe.APIConnectionError):
        return RefundUnavailable(NOT_REACHED)
    if mark == "refused":
        if code == "rate_limited":
            return RefundUnavailable("the gateway's rate limit for Stripe was reached", wait)
        if code == "revocations_unknown":
            return RefundUnavailable("the gateway cannot read its revocations", wait)
        if sent_before:
            return RefundUnavailable(
                f"the gateway refused the call ({code}) and an earlier attempt may have reached "
                "Stripe; it is tried again under the same key once the gateway lets it through"
            )
        return ToolFailed(f"the gateway refused the call ({code})", tell_ops=True)
    if mark == "upstream_error":
        if code == "upstream_timeout":
            return RefundUnavailable("the payment service did not answer in time")
        if code == "answer_too_large":
            return ToolFailed(
                "Stripe's answer was larger than the gateway passes on", tell_ops=True
            )
        return RefundUnavailable("the payment service could not be reached")
    if isinstance(exc, stripe.RateLimitError) or status == 429:
        return RefundUnavailable(SLOW_DOWN, wait)
    if status == 409:
        return RefundUnavailable("Stripe is still working on an earlier try of this refund", wait)
    if isinstance(status, int) and status >= 500:
        return RefundUnavailable(NO_ANSWER, wait)
    if code == "charge_already_refunded":
        return ToolFailed("its payment was already fully refunded in Stripe")
    if isinstance(exc, stripe.AuthenticationError):
        return ToolFailed(
            "Stripe refused the gateway's credential; an operator must check the gateway's "
            "Stripe key",
            tell_ops=True,
        )
    said = message.rstrip(".") + (f" ({code})" if code else "")
    if isinstance(exc, stripe.CardError):
        return ToolFailed(f"Stripe declined it: {said}")
    return ToolFailed(f"Stripe refused it: {said}")


def _get(headers: Mapping[str, str], name: str) -> str | None:
    """A header by name in any case (the SDK's headers are case-insensitive; a plain dict's
    may not be)."""
    value = headers.get(name)
    if value is None:
        value = next((v for k, v in headers.items() if k.lower() == name), None)
    return value


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """Retry-After as seconds (the delay form; an HTTP date is left to the backoff)."""
    raw = _get(headers, "retry-after")
    try:
        seconds = float(str(raw).strip()) if raw is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds <= 86_400 else None
