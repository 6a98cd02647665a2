"""`wakeful.devtools.client.Slack` against a real `wakeful serve` (a subprocess) and the HTTP
emulator: docs/agents.md's sample prints what the page says, a click on a prompt's button
runs the approval, a slash command is answered, signed webhooks are stored once, and a
delivery the app refuses raises."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from tests.support.slack_app import APP_SETTINGS, SECRET, serving
from wakeful.devtools.client import AppRefused, Slack
from wakeful.devtools.webhooks import github_payload, stripe_event

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = re.compile(
    r"<!-- runs against serve: [^>]*-->\n```python\n(.*?)```\n\n```text\n(.*?)```", re.DOTALL
)
GITHUB, STRIPE, HOOKS = "gh-secret", "whsec_client", "hooks-secret"


def base(url: str) -> str:
    return url.removesuffix("/slack/events")


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_docs_sample_prints_what_the_page_says(backend: str, tmp_path: Path) -> None:
    [(code, printed)] = SAMPLE.findall((ROOT / "docs" / "agents.md").read_text())
    settings = {**APP_SETTINGS, "WAKEFUL_AGENT": "examples.echo:factory"}
    with serving(backend, tmp_path, settings) as app:
        emulator = app.emu.api_url.removesuffix("api/").rstrip("/")
        code = (
            code.replace("http://127.0.0.1:3000", base(app.url))
            .replace("http://127.0.0.1:8090", emulator)
            .replace('"local-secret"', repr(SECRET))
        )
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "docs/agents.md", "exec"), {"__name__": "docs_sample"})
    assert out.getvalue() == printed


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_script_clicks_commands_and_sends_webhooks(backend: str, tmp_path: Path) -> None:
    settings = {
        **APP_SETTINGS,
        "WAKEFUL_APPROVERS": "",
        "WAKEFUL_GITHUB_WEBHOOK_SECRET": GITHUB,
        "WAKEFUL_STRIPE_WEBHOOK_SECRET": STRIPE,
        "WAKEFUL_WEBHOOKS": f"hooks={HOOKS}",
        "WAKEFUL_WEBHOOK_CHANNEL": "C0OPS",
    }
    with serving(backend, tmp_path, settings) as app:
        slack = Slack(
            base(app.url),
            SECRET,
            app.emu,
            github_secret=GITHUB,
            stripe_secret=STRIPE,
            webhook_secrets={"hooks": HOOKS},
        )
        slack.dm("U0ALICE", "refund order 1234")
        slack.wait_for_post("D0ALICE", "refund order 1234")
        [approve, deny] = slack.buttons("D0ALICE")
        assert (approve.label, deny.label) == ("Approve", "Deny")
        slack.click("U0ALICE", approve)
        slack.wait_for_post("D0ALICE", "Refunded order 1234")

        slack.command("U0ALICE", "status", response_url=app.emu.response_url_for("k"))
        assert app.emu.wait_for(lambda e: bool(e.responses("k")), timeout=10)  # the run's answer
        assert "pending events" in json.dumps(app.emu.responses("k"))

        first = slack.github("issues", github_payload("issues.opened"))
        again = slack.github("issues", github_payload("issues.opened"), first.delivery_id)
        assert (first.text, again.text) == ("stored", "duplicate delivery; already stored")
        assert slack.stripe(stripe_event("charge.succeeded")).text == "stored"
        assert slack.webhook("hooks", b'{"hello": "world"}').text == "stored"
        slack.wait_for_post("C0OPS", "GitHub issues.opened")

        wrong = Slack(base(app.url), "not-the-secret", app.emu)
        with pytest.raises(AppRefused, match="HTTP 401"):
            wrong.dm("U0ALICE", "forged")
        with pytest.raises(AppRefused, match="HTTP 40"):
            wrong.webhook("hooks", b"{}")


def test_a_bad_app_url_is_refused() -> None:
    with pytest.raises(ValueError, match="app_url must be the app's http"):
        Slack("127.0.0.1:3000", "s", "http://127.0.0.1:1")
