"""Issue 21, item 9: what the redaction list holds and masks. A PostgreSQL password in either
URL form, every webhook secret, and a slash command's response_url (a bearer credential for 30
minutes) never reach a log line or a printed error."""

from __future__ import annotations

import pytest

from wakeful.bot.process.config import Config, ConfigError, secret_values
from wakeful.core import logs

PG_PASSWORD = "pg-QUERY-password-7"
WEBHOOK_SECRETS = ("gh-webhook-SECRET-1", "whsec_stripe_SECRET_2", "ci-SECRET-3", "deploy-SECRET4")
RESPONSE_URL = "https://hooks.slack.com/commands/T0001/1234567890/AbCdEfGhIjKlMnOp"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (
            f"postgresql://wakeful@db:5432/w?password={PG_PASSWORD}&sslmode=require",
            "postgresql://wakeful@db:5432/w?password=[redacted]&sslmode=require",
        ),
        (
            f"postgresql://db/w?sslmode=require&password={PG_PASSWORD}",
            "postgresql://db/w?sslmode=require&password=[redacted]",
        ),
        (
            f"'postgresql://db/w?PASSWORD={PG_PASSWORD}' is not a wakeful store",
            "'postgresql://db/w?PASSWORD=[redacted]' is not a wakeful store",
        ),
        (f"host=db password={PG_PASSWORD} dbname=w", "host=db password=[redacted] dbname=w"),
        (f"postgresql://:{PG_PASSWORD}@db/w", "postgresql://:[redacted]@db/w"),
        (f"postgresql://wakeful:{PG_PASSWORD}@db/w", "postgresql://wakeful:[redacted]@db/w"),
        (f"url: {RESPONSE_URL}, body: {{}}", "url: [redacted], body: {}"),
        (
            "response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT0001%2F1%2FAbC&team_id=T1",
            "response_url=[redacted]&team_id=T1",
        ),
    ],
)
def test_redact_masks_database_passwords_and_response_urls(text: str, shown: str) -> None:
    assert logs.redact(text) == shown


def env() -> dict[str, str]:
    return {
        "WAKEFUL_DB": f"postgresql://wakeful:url%2Fpass-9@db/w?password={PG_PASSWORD}",
        "WAKEFUL_GITHUB_WEBHOOK_SECRET": WEBHOOK_SECRETS[0],
        "WAKEFUL_STRIPE_WEBHOOK_SECRET": WEBHOOK_SECRETS[1],
        "WAKEFUL_WEBHOOKS": f"ci={WEBHOOK_SECRETS[2]}, deploy = {WEBHOOK_SECRETS[3]}",
        "WAKEFUL_WEBHOOK_CHANNEL": "C0OPS",
    }


def test_every_webhook_secret_and_the_database_password_are_on_the_redaction_list() -> None:
    values = secret_values(env())
    for secret in (*WEBHOOK_SECRETS, PG_PASSWORD, "url%2Fpass-9", "url/pass-9"):
        assert secret in values, secret


def test_a_malformed_webhooks_setting_is_on_the_list_and_its_error_shows_no_secret() -> None:
    pasted = {**env(), "WAKEFUL_WEBHOOKS": "deploy-SECRET-without-its-name"}
    assert "deploy-SECRET-without-its-name" in secret_values(pasted)
    with pytest.raises(ConfigError) as refused:
        Config.from_env(pasted)
    assert "deploy-SECRET-without-its-name" not in str(refused.value)
    assert str(refused.value) == "WAKEFUL_WEBHOOKS entries must be name=secret; one has no '='"


def test_a_url_that_does_not_parse_is_a_secret_as_a_whole() -> None:
    odd = "postgresql://wakeful:pw-secret@[::1/w"  # urlparse refuses it
    assert odd in secret_values({"WAKEFUL_DB": odd})


def test_a_remembered_redaction_forgets_what_a_new_secret_makes_unsafe() -> None:
    """`redact_short` remembers its answers (tracing's attributes repeat); a secret learnt
    later is masked in a text it had already let through."""
    text = "team-R3M3MB3R-9 said hi"
    assert logs.redact_short(text) == text
    logs.add_secrets(["R3M3MB3R-9"])
    assert logs.redact_short(text) == "team-[redacted] said hi"
    long = "x" * logs.SHORT + " R3M3MB3R-9"
    assert logs.redact_short(long) == "x" * logs.SHORT + " [redacted]"
