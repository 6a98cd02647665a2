"""Webhook settings: which endpoints exist, where each reports, and one clear line naming the
variable for every bad combination."""

from __future__ import annotations

import pytest

from wakeful.bot.process.config import Config, ConfigError, WebhookSource

BASE = {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s"}
STRIPE = "whsec_abc"


def sources(**env: str) -> tuple[WebhookSource, ...]:
    return Config.from_env({**BASE, **env}).webhooks


def test_no_secret_no_endpoint_and_no_channel_needed() -> None:
    assert sources() == ()


def test_every_source_reports_to_the_channel_or_its_own() -> None:
    got = sources(
        WAKEFUL_GITHUB_WEBHOOK_SECRET="gh-secret",
        WAKEFUL_STRIPE_WEBHOOK_SECRET=STRIPE,
        WAKEFUL_WEBHOOKS=" ci=a=b= , sentry_io = z ",
        WAKEFUL_WEBHOOK_CHANNEL="C0OPS",
        WAKEFUL_WEBHOOK_CHANNEL_STRIPE="C0PAY",
        WAKEFUL_WEBHOOK_CHANNEL_SENTRY_IO="G0ERR",
    )
    assert got == (
        WebhookSource("github", "github", "gh-secret", "C0OPS"),
        WebhookSource("stripe", "stripe", STRIPE, "C0PAY"),
        WebhookSource("ci", "generic", "a=b=", "C0OPS"),
        WebhookSource("sentry_io", "generic", "z", "G0ERR"),
    )


def test_a_secret_never_shows_in_the_configs_repr() -> None:
    config = Config.from_env(
        {**BASE, "WAKEFUL_GITHUB_WEBHOOK_SECRET": "hunter2", "WAKEFUL_WEBHOOK_CHANNEL": "C0OPS"}
    )
    assert "hunter2" not in repr(config)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"WAKEFUL_GITHUB_WEBHOOK_SECRET": "x"},
            "WAKEFUL_WEBHOOK_CHANNEL is not set (the Slack conversation id webhook reports go "
            "to, required when a webhook secret is set)",
        ),
        ({"WAKEFUL_STRIPE_WEBHOOK_SECRET": STRIPE}, "WAKEFUL_WEBHOOK_CHANNEL is not set"),
        ({"WAKEFUL_WEBHOOKS": "ci=x"}, "WAKEFUL_WEBHOOK_CHANNEL is not set"),
        (
            # Every source has its own channel: the common one is still required (contract).
            {"WAKEFUL_GITHUB_WEBHOOK_SECRET": "x", "WAKEFUL_WEBHOOK_CHANNEL_GITHUB": "C0OPS"},
            "WAKEFUL_WEBHOOK_CHANNEL is not set",
        ),
        (
            {"WAKEFUL_GITHUB_WEBHOOK_SECRET": "x", "WAKEFUL_WEBHOOK_CHANNEL": "#ops"},
            "WAKEFUL_WEBHOOK_CHANNEL must be a Slack conversation id like C012AB3CD (not a "
            "#name), got '#ops'",
        ),
        (
            {
                "WAKEFUL_GITHUB_WEBHOOK_SECRET": "x",
                "WAKEFUL_WEBHOOK_CHANNEL": "C0OPS",
                "WAKEFUL_WEBHOOK_CHANNEL_GITHUB": "U123",
            },
            "WAKEFUL_WEBHOOK_CHANNEL_GITHUB must be a Slack conversation id",
        ),
        (
            {"WAKEFUL_STRIPE_WEBHOOK_SECRET": "sk_live_123", "WAKEFUL_WEBHOOK_CHANNEL": "C0OPS"},
            "WAKEFUL_STRIPE_WEBHOOK_SECRET must be the endpoint's signing secret, starting with "
            "'whsec_'",
        ),
        (
            {"WAKEFUL_WEBHOOKS": "ci", "WAKEFUL_WEBHOOK_CHANNEL": "C0OPS"},
            "WAKEFUL_WEBHOOKS entries must be name=secret; one has no '='",  # and is not shown
        ),
        (
            {"WAKEFUL_WEBHOOKS": "ci=", "WAKEFUL_WEBHOOK_CHANNEL": "C0OPS"},
            "WAKEFUL_WEBHOOKS entries must be name=secret",
        ),
        (
            {"WAKEFUL_WEBHOOKS": "My-CI=x", "WAKEFUL_WEBHOOK_CHANNEL": "C0OPS"},
            "WAKEFUL_WEBHOOKS: 'My-CI' is not a webhook name (lower-case letters, digits and _, "
            "starting with a letter, at most 32)",
        ),
        (
            {"WAKEFUL_WEBHOOKS": "=x", "WAKEFUL_WEBHOOK_CHANNEL": "C0OPS"},
            "WAKEFUL_WEBHOOKS: '' is not a webhook name",
        ),
        (
            {"WAKEFUL_WEBHOOKS": "a" * 33 + "=x", "WAKEFUL_WEBHOOK_CHANNEL": "C0OPS"},
            "is not a webhook name",
        ),
        (
            {"WAKEFUL_WEBHOOKS": "github=x", "WAKEFUL_WEBHOOK_CHANNEL": "C0OPS"},
            "WAKEFUL_WEBHOOKS: 'github' is reserved (github and stripe have their own secret "
            "settings; slack, timer and approval are wakeful's own sources)",
        ),
        (
            {"WAKEFUL_WEBHOOKS": "stripe=x", "WAKEFUL_WEBHOOK_CHANNEL": "C0OPS"},
            "'stripe' is reserved",
        ),
        (
            {"WAKEFUL_WEBHOOKS": "slack=x", "WAKEFUL_WEBHOOK_CHANNEL": "C0OPS"},
            "'slack' is reserved",
        ),
        (
            {"WAKEFUL_WEBHOOKS": "timer=x", "WAKEFUL_WEBHOOK_CHANNEL": "C0OPS"},
            "'timer' is reserved",
        ),
        (
            {"WAKEFUL_WEBHOOKS": "ci=x,ci=y", "WAKEFUL_WEBHOOK_CHANNEL": "C0OPS"},
            "WAKEFUL_WEBHOOKS lists 'ci' twice",
        ),
        (
            {
                "WAKEFUL_GITHUB_WEBHOOK_SECRET": "x",
                "WAKEFUL_WEBHOOK_CHANNEL": "C0OPS",
                "WAKEFUL_WEBHOOK_CHANNEL_GITUB": "C0TWO",
            },
            "WAKEFUL_WEBHOOK_CHANNEL_GITUB names no webhook: use WAKEFUL_WEBHOOK_CHANNEL_<NAME> "
            "with GITHUB, STRIPE or a name listed in WAKEFUL_WEBHOOKS",
        ),
        (
            {
                "WAKEFUL_WEBHOOKS": "ci=x",
                "WAKEFUL_WEBHOOK_CHANNEL": "C0OPS",
                "WAKEFUL_WEBHOOK_CHANNEL_ci": "C0TWO",
            },
            "WAKEFUL_WEBHOOK_CHANNEL_ci names no webhook",
        ),
    ],
)
def test_a_bad_webhook_setting_is_one_line_naming_it(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        Config.from_env({**BASE, **env})
    text = str(info.value)
    assert message in text and "\n" not in text


def test_a_channel_override_for_a_source_without_a_secret_is_allowed() -> None:
    """GitHub switched off for a while (its secret unset): its channel setting may stay."""
    got = sources(
        WAKEFUL_WEBHOOKS="ci=x",
        WAKEFUL_WEBHOOK_CHANNEL="C0OPS",
        WAKEFUL_WEBHOOK_CHANNEL_GITHUB="C0TWO",
    )
    assert got == (WebhookSource("ci", "generic", "x", "C0OPS"),)
