"""The one line the built-in agent posts for each webhook delivery (bot/front/webhooks.py stores
them): what happened, where, and a link, in the words of the contract:

- GitHub: `GitHub <event>[.<action>] <repo>: <title or ref> <html_url>`
- Stripe: `Stripe <type> <object id>` plus the amount and currency where the object has them
- any other source: `<name> delivery <id>`

Every value comes from outside, so each is cut to one short line and made inert for Slack
(bot/slack/text.py): an issue titled `<!channel>` is shown, never obeyed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wakeful.agents import WebhookDelivery, inert

TITLE_CAP = 150
"""Characters of a title or ref shown in a report line; longer ones end in `…`."""
_SUBJECT = {
    "issues": "issue",
    "issue_comment": "issue",
    "pull_request_review": "pull_request",
    "pull_request_review_comment": "pull_request",
}
"""GitHub events whose subject object is not named like the event itself."""
_ZERO_DECIMAL = frozenset(
    {"bif", "clp", "djf", "gnf", "jpy", "kmf", "krw", "mga"}
    | {"pyg", "rwf", "ugx", "vnd", "vuv", "xaf", "xof", "xpf"}
)
_THREE_DECIMAL = frozenset({"bhd", "jod", "kwd", "omr", "tnd"})
"""Stripe's amounts are in the currency's smallest unit; these have 0 and 3 decimals, the rest 2."""


def report_line(delivery: WebhookDelivery) -> str:
    """The report of one delivery."""
    body = delivery.body if isinstance(delivery.body, dict) else {}
    if delivery.source == "github":
        return _github(delivery.type or "?", body)
    if delivery.source == "stripe":
        return _stripe(body)
    return f"{_clean(delivery.source)} delivery {_clean(delivery.delivery_id or '?')}"


def _github(event: str, body: Mapping[str, Any]) -> str:
    action = _text(body, "action")
    head = f"GitHub {_clean(event)}" + (f".{_clean(action)}" if action else "")
    repository = _object(body, "repository")
    where = _text(repository, "full_name") or _text(_object(body, "organization"), "login")
    subject = _object(body, _SUBJECT.get(event, event))
    comment = _object(body, "comment") or _object(body, "review")
    title = ""
    if event == "workflow_run":
        name = _text(_object(body, "workflow"), "name") or _text(subject, "name")
        state = _text(subject, "conclusion") or _text(subject, "status")
        title = f"{name} ({state})" if name and state else name or state
    elif event == "ping":
        title = _text(body, "zen")
    else:
        title = (
            _text(subject, "title")
            or _text(subject, "name")
            or _text(subject, "tag_name")
            or _text(body, "ref")
        )
    url = (
        _text(comment, "html_url")
        or _text(subject, "html_url")
        or _text(body, "compare")
        or _text(repository, "html_url")
    )
    parts = [head, f"{_clean(where)}:" if where else "", _clean(title), _clean(url)]
    return " ".join(p for p in parts if p)


def _stripe(body: Mapping[str, Any]) -> str:
    kind = _text(body, "type") or "?"
    obj = _object(_object(body, "data"), "object")
    line = f"Stripe {_clean(kind)} {_clean(_text(obj, 'id') or '?')}"
    amount = next(
        (obj[k] for k in ("amount", "amount_due", "amount_total") if _whole(obj.get(k))), None
    )
    currency = _text(obj, "currency")
    if amount is not None and currency:
        line += f" {money(int(amount), currency)}"
    return line


def money(amount: int, currency: str) -> str:
    """`2000`, `usd` -> `20.00 USD`: Stripe's smallest unit shown in the currency's own."""
    code = currency.lower()
    places = 0 if code in _ZERO_DECIMAL else 3 if code in _THREE_DECIMAL else 2
    sign, units = ("-" if amount < 0 else ""), abs(amount)
    whole, fraction = divmod(units, 10**places)
    shown = f"{whole}.{fraction:0{places}d}" if places else str(whole)
    return f"{sign}{shown} {_clean(currency.upper())}"


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _object(parent: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = parent.get(key)
    return value if isinstance(value, dict) else {}


def _text(parent: Mapping[str, Any], key: str) -> str:
    value = parent.get(key)
    return value.strip() if isinstance(value, str) else ""


def _clean(text: str) -> str:
    """One line, at most TITLE_CAP characters, inert in Slack."""
    text = " ".join(text.split())
    if len(text) > TITLE_CAP:
        text = text[: TITLE_CAP - 1] + "…"
    return inert(text)
