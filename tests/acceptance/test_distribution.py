"""Distribution mode, driven the way Slack and a browser meet it (issue 26).

`wakeful serve` runs as a subprocess in distribution mode (SLACK_CLIENT_ID / SECRET, no
SLACK_BOT_TOKEN) against the emulator with token rotation on. Two workspaces install the app
through /slack/install (Bolt's page, its state cookie, the emulator's authorize page and
oauth.v2.access), people converse in both, every reply goes out with its own workspace's
token, a click from one workspace cannot answer the other's approval, tokens are refreshed,
one workspace uninstalls (its timer cancelled, its inbox set aside, nothing more sent there)
while the other carries on, and a re-install resumes it. On both stores.
"""

from __future__ import annotations

import html
import http.client
import json
import re
import urllib.parse
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from tests.acceptance.test_slack_app import (
    LISTENING,
    Proc,
    child_env,
    eventually,
    pg_schema_url,
    wakeful_cmd,
)
from wakeful.core.store import Store, open_store
from wakeful.devtools.emulator import EventSender, SlackEmulator

SECRET = "distribution-signing-secret"
TTL = 6
"""Seconds a rotated token lives at the emulator; the app refreshes it once under 4 left."""
REFRESH_BEFORE = 4


def get(
    port: int, path: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read().decode()
    finally:
        conn.close()


class App:
    def __init__(self, proc: Proc, port: int, emu: SlackEmulator, store: Store) -> None:
        self.proc, self.port, self.emu, self.store = proc, port, emu, store
        self.url = f"http://127.0.0.1:{port}/slack/events"

    def install(self, team: str) -> tuple[int, str]:
        """A person adds the app to `team`: Bolt's page, Slack's approval, the redirect."""
        status, headers, page = get(self.port, "/slack/install")
        assert status == 200, page
        cookie = headers["set-cookie"].split(";")[0]
        found = re.search(r'<a href="([^"]+)"', page)
        assert found, page
        link = urllib.parse.urlsplit(html.unescape(found.group(1)))
        assert link.port == self.emu.port and link.path == "/oauth/v2/authorize"
        status, headers, text = get(self.emu.port, f"{link.path}?{link.query}&team={team}")
        assert status == 302, text
        back = urllib.parse.urlsplit(headers["location"])
        status, _, text = get(self.port, f"{back.path}?{back.query}", {"Cookie": cookie})
        return status, text

    def sender(self, team: str) -> EventSender:
        ws = self.emu._workspaces[team]
        return EventSender(self.url, SECRET, team_id=team, bot_user_id=ws.bot_user_id)

    def replies(self, channel: str, needle: str) -> list[dict[str, object]]:
        return [m for m in self.emu.messages(channel) if needle in str(m.get("text", ""))]

    def wait_reply(self, channel: str, needle: str, count: int = 1) -> None:
        ok = self.emu.wait_for(lambda _e: len(self.replies(channel, needle)) >= count, 15)
        assert ok, f"no {needle!r} in {channel}: {self.emu.messages(channel)}\n{self.proc.tail()}"

    def posts_by_team(self, channel: str) -> set[str | None]:
        return {
            c.team
            for c in self.emu.calls("chat.postMessage")
            if c.params.get("channel") == channel and c.response.get("ok")
        }


@contextmanager
def running(tmp: Path, db: str) -> Iterator[App]:
    emu = SlackEmulator(rotation=True, token_ttl=TTL).start()
    emu.add_workspace("TA")
    emu.add_workspace("TB")
    env = child_env(
        SLACK_CLIENT_ID=emu.client_id,
        SLACK_CLIENT_SECRET=emu.client_secret,
        SLACK_SIGNING_SECRET=SECRET,
        SLACK_API_URL=emu.api_url,
        WAKEFUL_TOKEN_KEY=Fernet.generate_key().decode(),
        WAKEFUL_TOKEN_REFRESH_BEFORE=str(REFRESH_BEFORE),
        WAKEFUL_DB=db,
        WAKEFUL_HOST="127.0.0.1",
        WAKEFUL_PORT="0",
        WAKEFUL_BATCH_WINDOW="0.2",
        WAKEFUL_OUTBOX_GAP="0",
        WAKEFUL_APPROVERS="UA9,UB9",
    )
    proc = Proc(wakeful_cmd("serve"), env, tmp, tmp / f"dist-{uuid.uuid4().hex[:6]}.log")
    store: Store | None = None
    try:
        line = proc.next_line()
        match = LISTENING.match(line)
        assert match, f"{line!r}\n{proc.tail()}"
        assert "install at" in proc.next_line()
        port = int(match.group(1))
        emu.redirect_uri = f"http://127.0.0.1:{port}/slack/oauth_redirect"
        store = open_store(db)
        yield App(proc, port, emu, store)
    finally:
        if store is not None:
            store.close()
        code = proc.stop()
        emu.stop()
    assert code == 0, proc.tail()


@pytest.fixture(params=["sqlite", "postgres"])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[App]:
    if request.param == "sqlite":
        with running(tmp_path, str(tmp_path / "dist.db")) as found:
            yield found
    else:
        with pg_schema_url() as url, running(tmp_path, url) as found:
            yield found


def test_two_workspaces_install_converse_rotate_uninstall_and_reinstall(app: App) -> None:
    emu = app.emu
    for team in ("TA", "TB"):
        status, page = app.install(team)
        assert status == 200 and "Thank you" in page, page
    rows = {r.workspace: r for r in app.store.installations()}
    assert set(rows) == {"TA", "TB"}
    for team, row in rows.items():
        assert row.status == "active"
        assert "xox" not in row.secrets and "xox" not in row.profile  # sealed at rest
        assert json.loads(row.profile)["bot_user_id"] == emu._workspaces[team].bot_user_id

    a, b = app.sender("TA"), app.sender("TB")
    assert a.message("UA1", "status").status == 200
    assert b.message("UB1", "status").status == 200
    app.wait_reply("DA1", "Handled 1 message")
    app.wait_reply("DB1", "Handled 1 message")
    assert app.posts_by_team("DA1") == {"TA"}  # each reply with its own workspace's token
    assert app.posts_by_team("DB1") == {"TB"}

    # A click from workspace A cannot answer workspace B's approval.
    b.message("UB1", "please refund order 91")

    def prompt() -> dict[str, object] | None:
        for m in emu.messages("DB1"):
            if "refund order 91 for" in str(m.get("text")) and m.get("blocks"):
                return m
        return None

    assert emu.wait_for(lambda _e: prompt() is not None), emu.messages("DB1")
    posted = prompt()
    assert posted is not None
    rid = next(
        blk["elements"][0]["value"]
        for blk in posted["blocks"]  # type: ignore[attr-defined]
        if blk.get("type") == "actions"
    )
    click = a.block_action("UA9", "approve", rid, channel="DB1", message_ts=str(posted["ts"]))
    assert click.status == 200
    assert eventually(lambda: emu.ephemerals(user="UA9") != [])
    state = app.store.approval(rid)
    assert state is not None and state.answer is None

    # Rotation: the tokens are due (under REFRESH_BEFORE seconds left); the next reply in A
    # goes out after a refresh, with the new token; no refresh token is ever used twice.
    first_a = emu.tokens_of("TA")[0]

    def due() -> bool:  # the app counts whole seconds, as its store does
        row = app.store.installation("TA")
        return row is not None and (row.expires_at or 0) - int(emu._clock()) < REFRESH_BEFORE

    assert eventually(due, timeout=TTL)
    a.message("UA1", "status")
    app.wait_reply("DA1", "Handled 1 message", count=2)
    refreshes = [
        c for c in emu.calls("oauth.v2.access") if c.params.get("grant_type") == "refresh_token"
    ]
    used_refresh = [str(c.params.get("refresh_token")) for c in refreshes]
    assert all(c.response.get("ok") for c in refreshes), [c.response for c in refreshes]
    assert len(used_refresh) == len(set(used_refresh))  # each single-use token once
    assert any(emu.team_of(t) == "TA" for t in used_refresh), used_refresh
    last_post = [c for c in emu.calls("chat.postMessage") if c.params.get("channel") == "DA1"][-1]
    used = last_post.headers.get("Authorization", "").removeprefix("Bearer ")
    assert used != first_a and emu.team_of(used) == "TA"

    # B sets a reminder, then uninstalls (tokens_revoked, then app_uninstalled).
    b.message("UB1", "remind me in 10 minutes to stretch")
    assert eventually(lambda: app.store.timers("TB:UB1") != [])
    emu.uninstall("TB")
    assert b.tokens_revoked().status == 200
    assert b.app_uninstalled().status == 200
    gone = app.store.installation("TB")
    assert gone is not None and gone.status == "uninstalled"
    lease = app.store.lease("TB:UB1")
    assert lease is not None and lease.holder == "aside:TB"
    assert [t for t in app.store.timers("TB:UB1") if "approval:" not in t.id] == []
    before, stored = len(emu.calls()), len(app.store.events("TB:UB1"))
    assert b.message("UB1", "status").status == 200  # not installed: acknowledged, not stored
    assert len(app.store.events("TB:UB1")) == stored
    a.message("UA1", "status")  # A carries on
    app.wait_reply("DA1", "Handled 1 message", count=3)
    assert not any(c.team == "TB" for c in emu.calls()[before:])

    # A re-install resumes B cleanly: its inbox runs again, with the new token.
    status, _ = app.install("TB")
    assert status == 200
    assert eventually(lambda: (app.store.lease("TB:UB1") or lease).expires_at < 2**62)
    b.message("UB1", "status")
    app.wait_reply("DB1", "Status:", count=2)  # the status before the uninstall, and this one
    assert app.posts_by_team("DB1") == {"TB"}
