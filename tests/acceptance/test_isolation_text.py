"""Issue 21 through the real HTTP front against the emulator, on both stores: one person's text
cannot page a channel or phish through the bot (item 1), and cannot fail the writes that carry
other people's work (item 4(a)).

One `wakeful serve` per backend for the module (helpers from
tests/support/slack_app.py), with a GitHub
webhook reporting to OPS; each test uses users of its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.slack_app import (
    APP_SETTINGS,
    Wakeful,
    dm,
    serving,
)
from wakeful.devtools.webhooks import WebhookSender, github_payload

GITHUB_SECRET = "isolation-github-secret"
OPS = "C0OPS21"
SETTINGS = {
    **APP_SETTINGS,
    "WAKEFUL_GITHUB_WEBHOOK_SECRET": GITHUB_SECRET,
    "WAKEFUL_WEBHOOK_CHANNEL": OPS,
}
ISSUE_TEXT = (
    "remind me in 1 seconds to <!channel> <!here> <!subteam^S0ADMINS|@admins> payroll moved, "
    "sign in at <https://evil.example/login|https://slack.com/signin>"
)
SHOWN = (
    "&lt;!channel&gt; &lt;!here&gt; &lt;!subteam^S0ADMINS|@admins&gt; payroll moved, sign in at "
    "&lt;https://evil.example/login|https://slack.com/signin&gt;"
)
ACTIVE = re.compile(r"<(?:[!@#]|[A-Za-z][A-Za-z0-9+.-]*:)[^>]*>")
"""What Slack would act on: `<!…>`, `<@…>`, `<#…>` and `<scheme:…|label>` links."""
REACTIVATING = ("link_names", "parse")
FFFD = "\ufffd"


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.pg)])
def app(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Wakeful]:
    tmp = tmp_path_factory.mktemp(f"isolation-{request.param}")
    with serving(request.param, tmp, SETTINGS, channels=(OPS,)) as running:
        yield running


def posted(app: Wakeful, channel: str) -> list[dict[str, Any]]:
    """The chat.postMessage calls the app made to `channel`, as the emulator received them."""
    return [
        c.params for c in app.emu.calls("chat.postMessage") if c.params.get("channel") == channel
    ]


def test_the_issues_broadcast_and_disguised_link_are_shown_never_obeyed(app: Wakeful) -> None:
    user = "U21001"
    url = app.emu.response_url_for("isolation-21-1")
    assert app.sender.command(user, ISSUE_TEXT, response_url=url).status == 200
    app.wait_post(dm(user), "Reminder:")

    [answer] = app.emu.responses("isolation-21-1")
    assert answer["text"] == f"I'll remind you in 1 seconds: {SHOWN}"
    [reminder] = posted(app, dm(user))
    assert reminder["text"] == f"Reminder: {SHOWN}"
    for params in (answer, reminder):
        assert ACTIVE.search(json.dumps(params)) is None, params
        assert not set(REACTIVATING) & set(params), params


def test_a_nul_from_one_person_neither_fails_nor_delays_the_others(app: Wakeful) -> None:
    """A NUL in one DM and in one GitHub issue title, beside an ordinary DM: all three are
    answered (the run that carries the NUL too), each NUL shown as U+FFFD."""
    nul_user, other = "U21002", "U21003"
    issue = json.loads(github_payload("issues.opened"))
    issue["issue"]["title"] = "crash\x00me"
    hooks = WebhookSender(f"http://127.0.0.1:{app.port}", github_secret=GITHUB_SECRET)

    assert app.sender.message(nul_user, "remind me in 1 seconds to a\x00b").status == 200
    assert app.sender.message(other, "status").status == 200
    assert hooks.github("issues", json.dumps(issue).encode()).status == 200

    app.wait_post(dm(other), "Status:")
    app.wait_post(dm(nul_user), f"I'll remind you in 1 seconds: a{FFFD}b")
    app.wait_post(dm(nul_user), f"Reminder: a{FFFD}b")
    app.wait_post(OPS, f"crash{FFFD}me")
    assert not [p for p in app.emu.calls("chat.postMessage") if "\\u0000" in json.dumps(p.params)]
