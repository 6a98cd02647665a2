"""What Stripe says about a refund, in the conversation the refund was asked in: the reply to
the approval (`refunded_text`) and the confirmation from Stripe's webhooks (`confirmation`).
No Stripe SDK here: the webhooks arrive as stored events (bot/front/webhooks.py), in the inbox
of the conversation webhooks report to.

A `charge.refunded` or `refund.updated` delivery names the request that made the refund: the
event's `request.idempotency_key` (the approval's request id, sent as the Idempotency-Key), or
the refund's `metadata.wakeful_request`. Only an approved request of this store counts, and the
confirmation goes where that request was asked, once per request (a durable `once` step keyed
by it, whichever delivery and retry comes first); a failed refund is told once too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wakeful.agents import ApprovalState, Conversation, Query, Steps, WebhookDelivery, inert
from wakeful.bot.builtin.webhook_report import money

CONFIRMED = "stripe_refund:confirmed"
REFUND_EVENTS = ("charge.refunded", "refund.updated")


def refunded_text(order: str, result: Mapping[str, Any]) -> str:
    """`Refunded order 1001 through Stripe (re_…, 20.00 USD).`"""
    shown = f"{inert(str(result['refund_id']))}, {money(result['amount'], result['currency'])}"
    pending = (
        " It is pending at the bank; Stripe will confirm it."
        if (result.get("status") == "pending")
        else ""
    )
    return f"Refunded order {inert(order)} through Stripe ({shown}).{pending}"


def confirmation(
    query: Query, steps: Steps, event: WebhookDelivery
) -> tuple[Conversation, str] | None:
    """Where and what to say about a Stripe refund webhook, once per request (and once per
    failure); None when it is not about a refund this wakeful made, or was said already."""
    if event.source != "stripe" or event.type not in REFUND_EVENTS:
        return None
    body = event.body if isinstance(event.body, dict) else {}
    obj = (body.get("data") or {}).get("object") or {}
    request = (body.get("request") or {}).get("idempotency_key")
    refund = obj if event.type == "refund.updated" else _refund_of(obj, request)
    request = request or (refund.get("metadata") or {}).get("wakeful_request")
    approval = query.approval(str(request)) if request else None
    if approval is None or approval.answer != "yes" or not approval.channel:
        return None
    where = Conversation(approval.channel, approval.thread_ts)
    status = str(refund.get("status") or "succeeded") if refund else "succeeded"
    if event.type == "charge.refunded" and status == "pending":
        return None  # the refund's own refund.updated will say how it ends
    order = inert(str((approval.args or {}).get("order_id", "?")))
    refund_id = inert(str(refund.get("id") or "")) if refund else _recorded_refund(query, approval)
    if status in ("failed", "canceled"):
        key = f"stripe_refund:{status}:{refund_id or request}"
        reason = inert(str(refund.get("failure_reason") or "no reason given"))
        text = f"Stripe reports the refund of order {order} ({refund_id}) {status}: {reason}."
    elif status == "succeeded":
        key = f"{CONFIRMED}:{request}"
        amount = refund.get("amount") if refund else obj.get("amount_refunded")
        currency = (refund or obj).get("currency")
        paid = f", {money(amount, currency)}" if isinstance(amount, int) and currency else ""
        text = f"Stripe confirmed the refund of order {order} ({refund_id}{paid})."
    else:
        return None
    stood = steps.once(key, lambda _k: {"event": event.key}, name=CONFIRMED)
    return (where, text) if stood.get("event") == event.key else None


def _refund_of(charge: Mapping[str, Any], request: Any) -> dict[str, Any]:
    """The charge's refund made under `request` (by its metadata), else its newest refund, or
    {} (charges of current API versions list no refunds)."""
    refunds = [r for r in (charge.get("refunds") or {}).get("data") or [] if isinstance(r, dict)]
    ours = [r for r in refunds if (r.get("metadata") or {}).get("wakeful_request") == request]
    return dict((ours or refunds or [{}])[0])


def _recorded_refund(query: Query, approval: ApprovalState) -> str:
    step = query.step(approval.id)
    result = step.result if step is not None and isinstance(step.result, dict) else {}
    return inert(str(result.get("refund_id") or "refund"))
