"""The built-in agent's one line per delivery, from the services' own payload examples, in the
contract's words: `GitHub <event>[.<action>] <repo>: <title or ref> <html_url>`,
`Stripe <type> <object id>` plus amount and currency, `<name> delivery <id>`."""

from __future__ import annotations

import json
from typing import Any

import pytest

from wakeful.agents import WebhookDelivery
from wakeful.bot.builtin.webhook_report import TITLE_CAP, report_line
from wakeful.devtools.webhooks import github_payload, stripe_event


def report(payload: dict[str, Any]) -> str:
    """The line for a delivery stored as `payload` (the webhook front's shape), as an agent
    receives it: a typed WebhookDelivery."""
    delivery = WebhookDelivery(
        source=str(payload.get("source") or ""),
        type=payload.get("type"),
        delivery_id=str(payload.get("delivery") or ""),
        body=payload.get("body"),
        channel="C0OPS",
    )
    return report_line(delivery)


def github(name: str, **changes: Any) -> dict[str, Any]:
    body = json.loads(github_payload(name))
    body.update(changes)
    return {"kind": "webhook", "source": "github", "type": name.split(".")[0], "body": body}


def stripe(event_type: str) -> dict[str, Any]:
    return {
        "kind": "webhook",
        "source": "stripe",
        "type": event_type,
        "body": stripe_event(event_type),
    }


@pytest.mark.parametrize(
    ("name", "line"),
    [
        (
            "issues.opened",
            "GitHub issues.opened Codertocat/Hello-World: Spelling error in the README file "
            "https://github.com/Codertocat/Hello-World/issues/1",
        ),
        (
            "pull_request.opened",
            "GitHub pull_request.opened Codertocat/Hello-World: Update the README with new "
            "information. https://github.com/Codertocat/Hello-World/pull/2",
        ),
        (
            "push",
            "GitHub push Codertocat/Hello-World: refs/tags/simple-tag "
            "https://github.com/Codertocat/Hello-World/compare/6113728f27ae...000000000000",
        ),
        (
            "workflow_run.completed",
            "GitHub workflow_run.completed octo-org/octo-repo: test (success) "
            "https://github.com/octo-org/octo-repo/actions/runs/289782451",
        ),
        (
            "ping",
            "GitHub ping Octocoders/Hello-World: Anything added dilutes everything else. "
            "https://github.com/Octocoders/Hello-World",
        ),
        (
            # An organization's webhook: no repository, the organization names the place.
            "ping.with-organization",
            "GitHub ping Octocoders: Anything added dilutes everything else.",
        ),
    ],
)
def test_github_lines(name: str, line: str) -> None:
    assert report(github(name)) == line


@pytest.mark.parametrize(
    ("event_type", "line"),
    [
        ("charge.succeeded", "Stripe charge.succeeded ch_1PgafuB7WZ01zgkWXYmPNZs8 1.00 USD"),
        (
            "payment_intent.succeeded",
            "Stripe payment_intent.succeeded pi_1PgafyB7WZ01zgkWSjxsAJo3 10.99 USD",
        ),
        (
            "charge.dispute.created",
            "Stripe charge.dispute.created dp_1Pgc71B7WZ01zgkWMevJiAUx 10.00 USD",
        ),
        # An invoice has no `amount`: what is due is the amount that failed.
        (
            "invoice.payment_failed",
            "Stripe invoice.payment_failed in_1Pgc6tB7WZ01zgkWu9fdqL6I 10.00 USD",
        ),
    ],
)
def test_stripe_lines(event_type: str, line: str) -> None:
    assert report(stripe(event_type)) == line


@pytest.mark.parametrize(
    ("amount", "currency", "shown"),
    [
        (2000, "usd", "20.00 USD"),
        (500, "jpy", "500 JPY"),
        (1234, "kwd", "1.234 KWD"),
        (-150, "eur", "-1.50 EUR"),
        (7, "usd", "0.07 USD"),
    ],
)
def test_stripe_amounts_are_shown_in_the_currencys_own_unit(
    amount: int, currency: str, shown: str
) -> None:
    payload = stripe("charge.succeeded")
    payload["body"]["data"]["object"].update(amount=amount, currency=currency)
    assert report(payload).endswith(f" {shown}")


def test_a_stripe_object_without_amount_or_currency_shows_neither() -> None:
    payload = stripe("charge.succeeded")
    del payload["body"]["data"]["object"]["currency"]
    assert report(payload) == "Stripe charge.succeeded ch_1PgafuB7WZ01zgkWXYmPNZs8"
    payload["body"]["data"]["object"].update(currency="usd", amount=True)
    assert report(payload) == "Stripe charge.succeeded ch_1PgafuB7WZ01zgkWXYmPNZs8"


def test_a_generic_line() -> None:
    payload = {"kind": "webhook", "source": "ci", "delivery": "build-7", "body": {"x": 1}}
    assert report(payload) == "ci delivery build-7"


def test_outside_text_is_shown_never_obeyed() -> None:
    """An issue titled to page the channel, with newlines, is one escaped line."""
    payload = github("issues.opened")
    payload["body"]["issue"]["title"] = "<!channel> urgent\n\n& <@U123|boss>"
    line = report(payload)
    assert "\n" not in line and "<" not in line and ">" not in line
    assert "&lt;!channel&gt; urgent &amp; &lt;@U123|boss&gt;" in line


def test_a_long_title_is_cut_to_one_short_line() -> None:
    payload = github("issues.opened")
    payload["body"]["issue"]["title"] = "x" * 1000
    line = report(payload)
    assert "x" * (TITLE_CAP - 1) + "…" in line and "x" * TITLE_CAP not in line


def test_a_body_missing_every_field_still_makes_a_line() -> None:
    assert report({"kind": "webhook", "source": "github", "type": "push", "body": {}}) == (
        "GitHub push"
    )
    assert report({"kind": "webhook", "source": "stripe", "body": []}) == "Stripe ? ?"
