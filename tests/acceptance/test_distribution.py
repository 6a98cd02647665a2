"""Distribution mode, driven the way Slack and a browser meet it (issue 26).

`wakeful serve` runs as a subprocess in distribution mode (SLACK_CLIENT_ID / SECRET, no
SLACK_BOT_TOKEN) against the emulator with token rotation on. Two workspaces install the app
through /slack/install (Bolt's page, its state cookie, the emulator's authorize page and
oauth.v2.access), people converse in both, every reply goes out with its own workspace's
token, a click from one workspace cannot answer the other's approval, tokens are refreshed,
one workspace uninstalls (its timer cancelled, its inbox set aside, nothing more sent there)
while the other carries on, and a re-install resumes it; no token it was ever given shows in
the DEBUG log, /metrics, `inspect` or `dead-letters`. An Enterprise Grid org installs the
app org-wide: people in two of its workspaces are answered with the org's one token, and a
click from another org's workspace cannot answer. Two workspaces refund the same order number
apart, and an approver sees their own workspace's approvals only (issue 34). On both stores.
"""

from __future__ import annotations

import html
import http.client
import json
import re
import subprocess
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from tests.support.slack_app import (
    LISTENING,
    Proc,
    child_env,
    eventually,
    pg_schema_url,
    wakeful_cmd,
)
from wakeful.core.store import Store, open_store
from wakeful.devtools.emulator import EventSender, SlackEmulator

TOKEN_SHAPE = re.compile(r"xox[a-z]-[0-9A-Za-z]+-")
"""A Slack token in the clear (a sealed one is random base64: "xox" alone turns up by chance)."""

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
    def __init__(
        self, proc: Proc, port: int, emu: SlackEmulator, store: Store, env: dict[str, str]
    ) -> None:
        self.proc, self.port, self.emu, self.store = proc, port, emu, store
        self.env = env
        """The process's environment: a command run beside it (`wakeful inspect`) reads it."""
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

    def sender(self, team: str, org: str | None = None) -> EventSender:
        """Slack's requests from `team`'s people; `org`: of the org-wide install there."""
        ws = self.emu._workspaces[org or team]
        return EventSender(
            self.url,
            SECRET,
            team_id=team,
            bot_user_id=ws.bot_user_id,
            enterprise_id=org,
            org_install=org is not None,
        )

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


def approval_prompt(emu: SlackEmulator, channel: str, needle: str) -> tuple[str, str]:
    """(request id, message ts) of the approval prompt posted in `channel`."""

    def prompt() -> dict[str, object] | None:
        for m in emu.messages(channel):
            if needle in str(m.get("text")) and m.get("blocks"):
                return m
        return None

    assert emu.wait_for(lambda _e: prompt() is not None), emu.messages(channel)
    posted = prompt()
    assert posted is not None
    rid = next(
        blk["elements"][0]["value"]
        for blk in posted["blocks"]  # type: ignore[attr-defined]
        if blk.get("type") == "actions"
    )
    return str(rid), str(posted["ts"])


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
        # Distribution mode names each approver with their workspace (issue 34).
        WAKEFUL_APPROVERS="TA:UA9,TB:UB9,TE1:WE9,TF1:WF9",
        WAKEFUL_LOG_LEVEL="DEBUG",  # every line a token could slip into
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
        yield App(proc, port, emu, store, env)
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
        assert not TOKEN_SHAPE.search(row.secrets + row.profile)  # sealed at rest
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
    rid, ts = approval_prompt(emu, "DB1", "refund order 91 for")
    click = a.block_action("UA9", "approve", rid, channel="DB1", message_ts=ts)
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
    lease = app.store.inbox_view("TB:UB1", 0).lease
    assert lease is not None and lease["holder"] == "aside:TB"
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
    assert eventually(
        lambda: (app.store.inbox_view("TB:UB1", 0).lease or lease)["expires_at"] < 2**62
    )
    b.message("UB1", "status")
    app.wait_reply("DB1", "Status:", count=2)  # the status before the uninstall, and this one
    assert app.posts_by_team("DB1") == {"TB"}

    # No token or refresh token, of either workspace, old or new, in what an operator sees: the
    # process's log (at DEBUG), /metrics, `wakeful inspect` and `wakeful dead-letters`.
    issued = [
        t for team in ("TA", "TB") for k in ("bot", "refresh") for t in emu.tokens_of(team, k)
    ]
    assert len(issued) >= 6  # two installs of B, A's refresh, each with its refresh token
    status, _, metrics_text = get(app.port, "/metrics")
    assert status == 200
    shown = [app.proc.log.read_text(errors="replace"), metrics_text]
    for args in (("inspect",), ("inspect", "--json"), ("inspect", "TB:UB1"), ("dead-letters",)):
        ran = subprocess.run(
            wakeful_cmd(*args), env=app.env, capture_output=True, text=True, timeout=60
        )
        assert ran.returncode == 0, ran.stderr
        shown += [ran.stdout, ran.stderr]
    assert "wakeful_" in metrics_text and "TB:UB1" in shown[-4]
    leaked = [t for t in issued if any(t in text for text in shown)]
    assert leaked == [], leaked
    assert not any(TOKEN_SHAPE.search(text) for text in shown)


def test_an_org_wide_install_answers_its_workspaces_with_the_orgs_token(app: App) -> None:
    """Enterprise Grid: the org's admin installs the app org-wide through /slack/install
    (oauth.v2.access answers `"team": null`, `"enterprise": {"id": "E1"}`,
    `"is_enterprise_install": true`); DMs in two of its workspaces are answered with the org
    install's one token; a click from a workspace of another org (installed org-wide too) can
    never answer an approval of this one, while the org's own approver can."""
    emu = app.emu
    emu.add_org("E1")  # its workspaces TE1 and TE2 below
    emu.add_org("EF")  # its workspace TF1
    for org in ("E1", "EF"):
        status, page = app.install(org)
        assert status == 200 and "Thank you" in page, page
        # Bolt sends an org's admin on to add the app to the org's workspaces.
        assert "manage/organization/apps/profile/AEMULATOR/workspaces/add" in page, page
    row = app.store.installation("E1")
    assert row is not None and row.status == "active"
    assert (row.org_wide, row.enterprise_id, row.team_id) == (True, "E1", None)
    assert not TOKEN_SHAPE.search(row.secrets)

    one, two = app.sender("TE1", org="E1"), app.sender("TE2", org="E1")
    assert one.message("WE1", "status").status == 200
    assert two.message("WE2", "status").status == 200
    app.wait_reply("DWE1", "Handled 1 message")
    app.wait_reply("DWE2", "Handled 1 message")
    for channel in ("DWE1", "DWE2"):
        assert app.posts_by_team(channel) == {"E1"}  # the org install's token, in both
    assert app.store.installation_for_team("TE2") == app.store.installation("E1")

    # A click from another org's workspace (its approver, of its own org-wide install).
    one.message("WE1", "please refund order 92")
    rid, ts = approval_prompt(emu, "DWE1", "refund order 92 for")
    other = app.sender("TF1", org="EF")
    click = other.block_action("WF9", "approve", rid, channel="DWE1", message_ts=ts)
    assert click.status == 200
    assert eventually(lambda: emu.ephemerals(user="WF9") != [])
    [note] = emu.ephemerals(user="WF9")
    assert "not yours to answer" in str(note.get("text")), note
    notes = [c for c in emu.calls("chat.postEphemeral") if c.params.get("user") == "WF9"]
    assert [c.team for c in notes] == ["EF"]  # told with its own org's token
    state = app.store.approval(rid)
    assert state is not None and state.answer is None
    # The org's own approver, from the workspace of the request, answers it.
    assert one.block_action("WE9", "approve", rid, channel="DWE1", message_ts=ts).status == 200
    assert eventually(lambda: (app.store.approval(rid) or state).answer == "yes")

    # The org uninstalls: every workspace of it is set aside, the other org carries on.
    emu.uninstall("E1")
    assert one.tokens_revoked().status == 200
    assert one.app_uninstalled().status == 200
    gone = app.store.installation("E1")
    assert gone is not None and gone.status == "uninstalled"
    for inbox in ("TE1:WE1", "TE2:WE2"):
        lease = app.store.inbox_view(inbox, int(time.time())).lease
        assert lease is not None and lease["holder"] == "aside:E1", (inbox, lease)
    row_f = app.store.installation("EF")
    assert row_f is not None and row_f.status == "active"


def test_two_workspaces_refund_one_order_number_apart_and_approve_their_own(app: App) -> None:
    """Issue 34, items 1 and 2, as Slack shows them: A refunds order 1001; B's `refund order
    1001` gets B's own prompt, and nothing B is sent names A's request or says the order was
    refunded until B's approver says yes; B's open approval for 2002 does not hold A's back;
    A's approver's Home tab lists A's open approval, never B's."""
    emu = app.emu
    for team in ("TA", "TB"):
        assert app.install(team)[0] == 200
    a, b = app.sender("TA"), app.sender("TB")

    a.message("UA1", "refund order 1001")
    rid_a, ts_a = approval_prompt(emu, "DA1", "refund order 1001 for")
    assert a.block_action("UA9", "approve", rid_a, channel="DA1", message_ts=ts_a).status == 200
    app.wait_reply("DA1", "Refunded order 1001.")

    b.message("UB1", "refund order 1001")
    rid_b, ts_b = approval_prompt(emu, "DB1", "refund order 1001 for")
    assert rid_b != rid_a
    shown_b = json.dumps(emu.messages("DB1"))
    assert rid_a not in shown_b and "already" not in shown_b and "refunded" not in shown_b
    assert b.block_action("UB9", "approve", rid_b, channel="DB1", message_ts=ts_b).status == 200
    app.wait_reply("DB1", "Refunded order 1001.")

    b.message("UB1", "refund order 2002")
    rid_b2, _ = approval_prompt(emu, "DB1", "refund order 2002 for")
    a.message("UA1", "refund order 2002")
    rid_a2, _ = approval_prompt(emu, "DA1", "refund order 2002 for")

    # A's approver opens the Home tab in A: A's open approval, none of B's.
    assert a.home_opened("UA9").status == 200

    def home() -> str:
        views = emu.homes("UA9")
        return json.dumps(views[-1]) if views else ""

    assert eventually(lambda: rid_a2 in home()), home()
    assert rid_b2 not in home() and "TB:" not in home()

    # Neither workspace was ever sent the other's request ids.
    shown_a, shown_b = json.dumps(emu.messages("DA1")), json.dumps(emu.messages("DB1"))
    assert [r for r in (rid_b, rid_b2) if r in shown_a] == []
    assert [r for r in (rid_a, rid_a2) if r in shown_b] == []
    refunds = [
        (team, row)
        for team in ("TA", "TB")
        if (row := app.store.recorded_step(f"{team}:refund_order:1001")) is not None
    ]
    assert [(t, r.result["request"]) for t, r in refunds] == [("TA", rid_a), ("TB", rid_b)]
