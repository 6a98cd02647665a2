"""The fake Stripe's objects and endpoints (devtools/fake_stripe.py serves them): PaymentIntents
with their charges, refunds (created, retrieved, listed), search, and Stripe's error shapes.
Objects start from stripe-mock's fixtures (fixtures/stripe_api/, see
fixtures/webhooks/README.md)."""

from __future__ import annotations

import copy
import itertools
import json
import re
import secrets
import threading
from functools import cache
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures" / "stripe_api"
_CLAUSE = re.compile(r"""^\s*(metadata\[(['"])([^'"\]]+)\2\]|status)\s*:\s*(['"])([^'"]*)\4\s*$""")
_ids = itertools.count(1)


@cache
def template(kind: str) -> dict[str, Any]:
    """The example object of stripe-mock's fixtures (`payment_intent`, `charge`, `refund`)."""
    doc: dict[str, Any] = json.loads((FIXTURES / f"{kind}.json").read_text())
    return doc


def new_id(prefix: str) -> str:
    return f"{prefix}_{next(_ids):04d}{secrets.token_hex(10)}"


class StripeError(Exception):
    """An answer in Stripe's error shape. `saved`: kept under the idempotency key."""

    def __init__(
        self,
        status: int,
        kind: str,
        message: str,
        code: str | None = None,
        param: str | None = None,
        saved: bool = True,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.saved, self.headers = status, saved, headers or {}
        self.body: dict[str, Any] = {"type": kind, "message": message}
        if code:
            self.body["code"] = code
            self.body["doc_url"] = f"https://docs.stripe.com/error-codes/{code.replace('_', '-')}"
        if param:
            self.body["param"] = param


class StripeObjects:
    """PaymentIntents, charges and refunds, and the endpoints over them (a mixin: the server
    supplies `now`, `_lock` and `_emit`)."""

    payment_intents: dict[str, dict[str, Any]]
    charges: dict[str, dict[str, Any]]
    refunds: dict[str, dict[str, Any]]
    pending_refunds: bool
    _lock: threading.RLock

    def now(self) -> float:
        raise NotImplementedError

    def _emit(
        self,
        kind: str,
        obj: dict[str, Any],
        request: dict[str, Any] | None,
        previous: dict[str, Any] | None = None,
    ) -> None:
        raise NotImplementedError

    def add_payment(
        self, order_id: str, amount: int = 2000, currency: str = "usd", status: str = "succeeded"
    ) -> str:
        """A PaymentIntent for `order_id` (in its metadata) and, when it succeeded, its
        charge; returns the PaymentIntent's id."""
        with self._lock:
            pi = copy.deepcopy(template("payment_intent"))
            pi.update(
                id=new_id("pi"),
                amount=amount,
                amount_received=amount if status == "succeeded" else 0,
                currency=currency,
                status=status,
                created=int(self.now()),
                canceled_at=None,
                last_payment_error=None,
                next_action=None,
                metadata={"order_id": order_id},
                latest_charge=None,
                transfer_data=None,
            )
            pi["client_secret"] = f"{pi['id']}_secret_{secrets.token_hex(8)}"
            if status == "succeeded":
                charge = copy.deepcopy(template("charge"))
                charge.update(
                    id=new_id("ch"),
                    amount=amount,
                    amount_captured=amount,
                    amount_refunded=0,
                    captured=True,
                    currency=currency,
                    created=int(self.now()),
                    payment_intent=pi["id"],
                    refunded=False,
                )
                charge["refunds"] = {
                    "object": "list",
                    "data": [],
                    "has_more": False,
                    "url": f"/v1/charges/{charge['id']}/refunds",
                }
                self.charges[charge["id"]] = charge
                pi["latest_charge"] = charge["id"]
            self.payment_intents[pi["id"]] = pi
            return str(pi["id"])

    def settle(self, refund_id: str, status: str = "succeeded", reason: str | None = None) -> None:
        """A pending refund's outcome arrives: `refund.updated` is emitted."""
        with self._lock:
            refund = self.refunds[refund_id]
            before = refund["status"]
            refund["status"] = status
            if status == "failed":
                refund["failure_reason"] = reason or "expired_or_canceled_card"
            self._emit("refund.updated", refund, None, {"status": before})

    def refunds_for(self, payment_intent: str) -> list[dict[str, Any]]:
        return [r for r in self.refunds.values() if r["payment_intent"] == payment_intent]

    # -- the endpoints -----------------------------------------------------------------------

    def _search(self, params: dict[str, str]) -> dict[str, Any]:
        query = params.get("query", "")
        unknown = set(params) - {"query", "limit", "page", "expand[]"}
        if unknown:
            raise _unknown(sorted(unknown)[0])
        clauses = []
        for part in re.split(r"\s+AND\s+", query) if query.strip() else []:
            m = _CLAUSE.match(part)
            if m is None:
                raise StripeError(
                    400,
                    "invalid_request_error",
                    f"Invalid search query: {query!r}. Search queries use fields such as "
                    "metadata['key']:'value' and status:'value'.",
                    param="query",
                    saved=False,
                )
            clauses.append((m.group(3), m.group(5)))
        if not clauses:
            raise StripeError(
                400,
                "invalid_request_error",
                "Missing required param: query.",
                code="parameter_missing",
                param="query",
                saved=False,
            )
        found = [
            pi
            for pi in self.payment_intents.values()
            if all((pi["metadata"].get(k) if k else pi["status"]) == v for k, v in clauses)
        ]
        found.sort(key=lambda pi: (pi["created"], pi["id"]), reverse=True)
        limit = max(1, min(100, int(params.get("limit") or 10)))
        return {
            "object": "search_result",
            "data": copy.deepcopy(found[:limit]),
            "has_more": len(found) > limit,
            "next_page": None,
            "url": "/v1/payment_intents/search",
        }

    def _refund(
        self, params: list[tuple[str, str]], request_id: str, key: str | None
    ) -> dict[str, Any]:
        fields = {k: v for k, v in params if not k.startswith("metadata[")}
        metadata = {k[9:-1]: v for k, v in params if k.startswith("metadata[") and k.endswith("]")}
        unknown = set(fields) - {"payment_intent", "charge", "amount", "reason", "expand[]"}
        if unknown:
            raise _unknown(sorted(unknown)[0])
        charge = self._charge_of(fields)
        left = charge["amount"] - charge["amount_refunded"]
        if charge["refunded"] or left <= 0:
            raise StripeError(
                400,
                "invalid_request_error",
                f"Charge {charge['id']} has already been refunded.",
                code="charge_already_refunded",
            )
        amount = int(fields.get("amount") or left)
        if amount > left:
            raise StripeError(
                400,
                "invalid_request_error",
                f"Refund amount ({amount}) is greater than unrefunded amount on charge ({left})",
                code="amount_too_large",
                param="amount",
            )
        reason = fields.get("reason") or None
        if reason not in (None, "duplicate", "fraudulent", "requested_by_customer"):
            raise StripeError(
                400,
                "invalid_request_error",
                "Invalid reason: must be one of duplicate, fraudulent, or requested_by_customer",
                param="reason",
                saved=False,
            )
        refund = copy.deepcopy(template("refund"))
        refund.update(
            id=new_id("re"),
            amount=amount,
            charge=charge["id"],
            payment_intent=charge["payment_intent"],
            currency=charge["currency"],
            created=int(self.now()),
            metadata=metadata,
            reason=reason,
            status="pending" if self.pending_refunds else "succeeded",
        )
        self.refunds[refund["id"]] = refund
        charge["amount_refunded"] += amount
        charge["refunded"] = charge["amount_refunded"] >= charge["amount"]
        charge["refunds"]["data"].insert(0, copy.deepcopy(refund))
        self._emit("charge.refunded", charge, {"id": request_id, "idempotency_key": key})
        return copy.deepcopy(refund)

    def _charge_of(self, fields: dict[str, str]) -> dict[str, Any]:
        if fields.get("payment_intent"):
            pi = self.payment_intents.get(fields["payment_intent"])
            if pi is None:
                raise StripeError(
                    400,
                    "invalid_request_error",
                    f"No such payment_intent: '{fields['payment_intent']}'",
                    code="resource_missing",
                    param="payment_intent",
                )
            if not pi.get("latest_charge"):
                raise StripeError(
                    400,
                    "invalid_request_error",
                    f"This PaymentIntent ({pi['id']}) does not have a successful charge to refund.",
                    param="payment_intent",
                )
            return self.charges[pi["latest_charge"]]
        if fields.get("charge"):
            charge = self.charges.get(fields["charge"])
            if charge is None:
                raise StripeError(
                    400,
                    "invalid_request_error",
                    f"No such charge: '{fields['charge']}'",
                    code="resource_missing",
                    param="charge",
                )
            return charge
        raise StripeError(
            400,
            "invalid_request_error",
            "One of the following params should be provided for this request: payment_intent "
            "or charge.",
            code="parameter_missing",
            saved=False,
        )

    def _list_refunds(self, params: list[tuple[str, str]]) -> dict[str, Any]:
        """`GET /v1/refunds` (`charge`, `payment_intent`, `limit` 1-100 default 10,
        `starting_after`, `ending_before`): Stripe's list shape, newest first."""
        fields = dict(params)
        unknown = set(fields) - {
            "charge",
            "payment_intent",
            "limit",
            "starting_after",
            "ending_before",
            "expand[]",
        }
        if unknown:
            raise _unknown(sorted(unknown)[0])
        limit = _limit(fields.get("limit"))
        found = [
            r
            for r in self.refunds.values()
            if all(r[k] == fields[k] for k in ("charge", "payment_intent") if fields.get(k))
        ]
        found.sort(key=lambda r: (r["created"], r["id"]), reverse=True)
        ids = [r["id"] for r in found]
        for cursor in ("starting_after", "ending_before"):
            if fields.get(cursor) and fields[cursor] not in self.refunds:
                raise StripeError(
                    400,
                    "invalid_request_error",
                    f"No such refund: '{fields[cursor]}'",
                    code="resource_missing",
                    param=cursor,
                    saved=False,
                )
        if fields.get("starting_after") in ids:
            found = found[ids.index(fields["starting_after"]) + 1 :]
        elif fields.get("ending_before") in ids:
            found = found[: ids.index(fields["ending_before"])][-limit:]
        return {
            "object": "list",
            "data": copy.deepcopy(found[:limit]),
            "has_more": len(found) > limit,
            "url": "/v1/refunds",
        }

    def _get_refund(self, refund_id: str) -> dict[str, Any]:
        refund = self.refunds.get(refund_id)
        if refund is None:
            raise StripeError(
                404,
                "invalid_request_error",
                f"No such refund: '{refund_id}'",
                code="resource_missing",
                param="id",
            )
        return copy.deepcopy(refund)


def _limit(raw: str | None) -> int:
    if raw is None or raw == "":
        return 10
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= 100:
        raise StripeError(
            400,
            "invalid_request_error",
            f"Invalid limit: must be an integer between 1 and 100, got {raw!r}",
            code="parameter_invalid_integer",
            param="limit",
            saved=False,
        )
    return limit


def _unknown(name: str) -> StripeError:
    return StripeError(
        400,
        "invalid_request_error",
        f"Received unknown parameter: {name}",
        param=name,
        code="parameter_unknown",
        saved=False,
    )
