"""Issue 21, item 9: no secret in anything wakeful prints or logs. Real `wakeful` processes:

- a PostgreSQL password given as `?password=` (and through `--db`) is masked wherever the URL
  is printed: `doctor`, `inspect`, start-up errors and the start-up retry warnings;
- the webhook secrets are redacted like Slack's, and a malformed WAKEFUL_WEBHOOKS prints none;
- a `wakeful serve` at DEBUG writes no slash command's response_url (a bearer credential for
  30 minutes) and no webhook secret, while it takes a signed delivery and answers a command.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from tests.support.slack_app import (
    SECRET,
    child_env,
    launch,
    pg_schema_url,
    shut_down,
    wakeful_cmd,
)
from wakeful.devtools.emulator import SlackEmulator
from wakeful.devtools.webhooks import WebhookSender

PG_PASSWORD = "pg-QUERY-password-SECRET"
GITHUB_SECRET = "gh-webhook-SECRET-value"
STRIPE_SECRET = "whsec_stripe_SECRET_value"
CI_SECRET = "ci-webhook-SECRET-value"
WEBHOOKS = {
    "WAKEFUL_GITHUB_WEBHOOK_SECRET": GITHUB_SECRET,
    "WAKEFUL_STRIPE_WEBHOOK_SECRET": STRIPE_SECRET,
    "WAKEFUL_WEBHOOKS": f"ci={CI_SECRET}",
    "WAKEFUL_WEBHOOK_CHANNEL": "C0OPS",
}
DEAD_DB = f"postgresql://wakeful@127.0.0.1:1/wakeful?sslmode=disable&password={PG_PASSWORD}"


def run(tmp: Path, *args: str, **env: str) -> str:
    """One `wakeful` command; everything it wrote, stdout and stderr."""
    result = subprocess.run(
        wakeful_cmd(*args),
        env=child_env(SLACK_SIGNING_SECRET=SECRET, **env),
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return result.stdout + result.stderr


def test_a_query_password_is_masked_in_start_up_errors_retries_doctor_and_inspect(
    tmp_path: Path,
) -> None:
    worker = run(
        tmp_path, "--log-level", "DEBUG", "worker", WAKEFUL_DB=DEAD_DB, WAKEFUL_STARTUP_WAIT="3"
    )
    assert "store unavailable at start-up, retrying" in worker and "store error" in worker
    doctor = run(tmp_path, "doctor", WAKEFUL_DB=DEAD_DB)
    assert "FAIL store" in doctor
    flag = run(tmp_path, "--log-level", "DEBUG", "inspect", "--db", DEAD_DB)
    odd = run(tmp_path, "inspect", WAKEFUL_DB=f"mysql://db/w?password={PG_PASSWORD}")
    assert "WAKEFUL_DB must be a file path or a postgresql:// URL" in odd and "mysql" not in odd
    for out in (worker, doctor, flag, odd):
        assert PG_PASSWORD not in out, out


def test_a_query_password_is_masked_where_inspect_names_the_store(tmp_path: Path) -> None:
    with pg_schema_url() as dsn:
        url = f"{dsn}&password={PG_PASSWORD}"
        empty = run(tmp_path, "inspect", WAKEFUL_DB=url)
        assert "is not a wakeful store" in empty and "password=[redacted]" in empty
        doctor = run(tmp_path, "doctor", WAKEFUL_DB=url)
        assert "store" in doctor
    for out in (empty, doctor):
        assert PG_PASSWORD not in out, out


@pytest.mark.parametrize(
    "webhooks",
    [f"{CI_SECRET}", f"ci={CI_SECRET},{CI_SECRET}x", f"BAD NAME={CI_SECRET}"],
    ids=["secret-without-name", "second-entry-without-name", "bad-name"],
)
def test_a_malformed_webhooks_setting_prints_no_secret(tmp_path: Path, webhooks: str) -> None:
    out = run(
        tmp_path,
        "serve",
        **{**WEBHOOKS, "WAKEFUL_WEBHOOKS": webhooks},
        SLACK_BOT_TOKEN="xoxb-x",
        WAKEFUL_DB=str(tmp_path / "w.db"),
    )
    assert "WAKEFUL_WEBHOOKS" in out, out
    assert CI_SECRET not in out, out


def test_serve_at_debug_logs_no_response_url_and_no_webhook_secret(tmp_path: Path) -> None:
    key = f"respond-{uuid.uuid4().hex}"
    with SlackEmulator(bot_token="xoxb-debug-run") as emu:
        settings = {**WEBHOOKS, "WAKEFUL_BATCH_WINDOW": "0", "WAKEFUL_OUTBOX_GAP": "0"}
        app = launch(
            tmp_path, emu, str(tmp_path / "d.db"), settings, args=("--log-level", "DEBUG", "serve")
        )
        try:
            hooks = WebhookSender(
                f"http://127.0.0.1:{app.port}",
                github_secret=GITHUB_SECRET,
                stripe_secret=STRIPE_SECRET,
                secrets={"ci": CI_SECRET},
            )
            assert hooks.github_example("issues.opened").status == 200
            assert hooks.generic("ci", b'{"build": 7}').status == 200
            url = emu.response_url_for(key)
            assert app.sender.command("U9100", "status", response_url=url).status == 200
            assert emu.wait_for(lambda e: bool(e.responses(key)), 20), app.tail()
        finally:
            shut_down(app)
        written = app.proc.log.read_text() + "\n".join(app.proc.lines.queue)
    assert "DEBUG" in written  # the run did log at DEBUG
    for secret in (key, GITHUB_SECRET, STRIPE_SECRET, CI_SECRET):
        assert secret not in written, secret
