"""Distribution mode's rules on both stores: tokens sealed at rest, OAuth state good once for
10 minutes, a row of a workspace whose installation is gone parked with the reason (never sent
with another workspace's token), tokens_revoked / app_uninstalled in either order, a re-install
resuming, and one refresher per installation across processes (PostgreSQL)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from slack_sdk import WebClient
from slack_sdk.oauth.installation_store import Installation

from tests.conftest import T0, need_pg
from tests.support.slack_app import pg_schema_url
from wakeful.bot.process.config import Config, ConfigError
from wakeful.bot.slack.installations import StoreInstallations, StoreStates, TokenCipher
from wakeful.bot.slack.sender import SlackSender, make_client
from wakeful.bot.slack.workspaces import Workspaces
from wakeful.core.dispatcher import Dispatcher
from wakeful.core.effects import Post, Timer
from wakeful.core.errors import TransientSendError
from wakeful.core.store import Store, open_store
from wakeful.devtools.emulator import SlackEmulator
from wakeful.devtools.emulator.common import Call

TOKEN_SHAPE = re.compile(r"xox[a-z]-[0-9A-Za-z]+-")
"""A Slack token in the clear (a sealed one is random base64: "xox" alone turns up by chance)."""

REPO = Path(__file__).resolve().parents[2]
KEY = Fernet.generate_key().decode()


@pytest.fixture
def emu() -> Iterator[SlackEmulator]:
    with SlackEmulator(rotation=True, token_ttl=3600) as found:
        yield found


def install(emu: SlackEmulator, store: Store, team: str, clock: int = T0) -> StoreInstallations:
    """`team` installed the way Bolt's OAuth flow does it: a code from the authorize page,
    oauth.v2.access, the installation saved through the store."""
    if team not in emu._workspaces:
        emu.add_workspace(team)
    _, _, headers = emu.authorize_page(
        {"client_id": emu.client_id, "team": team, "redirect_uri": "http://app/cb", "state": "s"}
    )
    code = headers["Location"].split("code=")[1].split("&")[0]
    answer = WebClient(base_url=emu.api_url).oauth_v2_access(
        client_id=emu.client_id,
        client_secret=emu.client_secret,
        code=code,
        redirect_uri="http://app/cb",
    )
    ws = emu._workspaces[team]
    installations = StoreInstallations(store, TokenCipher(KEY), lambda: clock)
    installations.save(
        Installation(
            app_id="AEMULATOR",
            team_id=team,
            bot_token=answer["access_token"],
            bot_id=ws.bot_id,
            bot_user_id=ws.bot_user_id,
            bot_scopes=answer["scope"],
            bot_refresh_token=answer.get("refresh_token"),
            bot_token_expires_in=answer.get("expires_in"),
            user_id=ws.installer,
        )
    )
    return installations


def workspaces(emu: SlackEmulator, store: Store, **kw: object) -> Workspaces:
    installations = StoreInstallations(store, TokenCipher(KEY))
    return Workspaces(store, installations, emu.client_id, emu.client_secret, emu.api_url, **kw)  # type: ignore[arg-type]


def test_tokens_are_sealed_at_rest_and_open_only_with_the_key(
    store: Store, emu: SlackEmulator
) -> None:
    install(emu, store, "TA")
    row = store.installation("TA")
    assert row is not None
    assert not TOKEN_SHAPE.search(row.secrets + row.profile)  # sealed at rest
    opened = StoreInstallations(store, TokenCipher(KEY)).find_installation(
        enterprise_id=None, team_id="TA"
    )
    assert opened is not None and opened.bot_token == emu.tokens_of("TA")[0]
    other = StoreInstallations(store, TokenCipher(Fernet.generate_key().decode()))
    with pytest.raises(Exception, match="cannot be opened with WAKEFUL_TOKEN_KEY"):
        other.find_installation(enterprise_id=None, team_id="TA")


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("", "WAKEFUL_TOKEN_KEY is not set"),
        ("not-a-key", "WAKEFUL_TOKEN_KEY key 1 is not a Fernet key"),
    ],
)
def test_distribution_mode_needs_a_well_formed_token_key(key: str, expected: str) -> None:
    env = {"SLACK_CLIENT_ID": "1.2", "SLACK_CLIENT_SECRET": "s", "WAKEFUL_TOKEN_KEY": key}
    with pytest.raises(ConfigError, match=expected) as caught:
        Config.from_env(env, need={"token"})
    assert "\n" not in str(caught.value) and (not key or key not in str(caught.value))
    assert Config.from_env({**env, "WAKEFUL_TOKEN_KEY": KEY}).distribution
    assert not Config.from_env({**env, "SLACK_BOT_TOKEN": "xoxb-1"}).distribution


def test_an_oauth_state_is_good_once_and_for_ten_minutes(store: Store) -> None:
    now = [T0]
    states = StoreStates(store, clock=lambda: now[0])
    first, second = states.issue(), states.issue()
    assert first != second
    assert states.consume(first) is True
    assert states.consume(first) is False  # single-use
    now[0] = T0 + 600
    assert states.consume(second) is False  # expired after 10 minutes
    assert states.consume("never-issued") is False


def test_each_row_goes_with_its_workspaces_token_and_a_gone_one_is_parked(
    store: Store, emu: SlackEmulator
) -> None:
    install(emu, store, "TA")
    install(emu, store, "TB")
    ws = workspaces(emu, store)
    sender = SlackSender(make_client("", emu.api_url), sleep=lambda _s: None, tokens=ws.token)
    store.post("TA:UA1", [Post("DA1", "to A")], T0)
    store.post("TB:UB1", [Post("DB1", "to B")], T0)
    store.post("TC:UC1", [Post("DC1", "to C, never installed")], T0)
    Dispatcher(store=store, clock=lambda: T0, sender=sender).tick(T0)
    teams = {c.params["channel"]: c.team for c in emu.calls("chat.postMessage")}
    assert teams == {"DA1": "TA", "DB1": "TB"}
    [parked] = store.outbox("failed")
    assert parked.inbox == "TC:UC1"
    assert "workspace TC has no installation of the app" in (parked.error or "")


def test_tokens_sealed_with_another_key_hold_the_rows_and_still_let_events_in(
    store: Store, emu: SlackEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    # WAKEFUL_TOKEN_KEY replaced without keeping the old key: nothing can be sent until the
    # operator puts it back, but nothing is lost either. The rows wait (a retry, not a park
    # that needs a requeue), the log says why once, and the front still knows who the bot is
    # (its ids are not secret), so events keep being stored.
    install(emu, store, "TA")
    other = StoreInstallations(store, TokenCipher(Fernet.generate_key().decode()))
    ws = Workspaces(store, other, emu.client_id, emu.client_secret, emu.api_url)
    sender = SlackSender(make_client("", emu.api_url), sleep=lambda _s: None, tokens=ws.token)
    store.post("TA:UA1", [Post("DA1", "to A")], T0)
    store.post("TA:UA2", [Post("DA2", "to A again")], T0)
    with caplog.at_level("ERROR", logger="wakeful.workspaces"):
        Dispatcher(store=store, clock=lambda: T0, sender=sender).tick(T0)
    assert emu.calls("chat.postMessage") == []
    waiting = store.outbox()
    assert [row.status for row in waiting] == ["sending", "sending"]  # deferred, not parked
    assert all("WAKEFUL_TOKEN_KEY" in (row.error or "") for row in waiting)
    for _ in range(3):  # read again each time: still said once
        ws.forget()
        with pytest.raises(TransientSendError, match="WAKEFUL_TOKEN_KEY"):
            ws.token("TA")
    said = [r.getMessage() for r in caplog.records if "WAKEFUL_TOKEN_KEY" in r.getMessage()]
    assert len(said) == 1, said
    who = ws.who("TA")
    assert who == (emu._workspaces["TA"].bot_user_id, emu._workspaces["TA"].bot_id)
    # The key is back (a restart with it): the rows go out, each once.
    ws = workspaces(emu, store)
    sender = SlackSender(make_client("", emu.api_url), sleep=lambda _s: None, tokens=ws.token)
    later = T0 + 120
    Dispatcher(store=store, clock=lambda: later, sender=sender).tick(later)
    assert sorted(c.params["channel"] for c in emu.calls("chat.postMessage")) == ["DA1", "DA2"]
    assert [row.status for row in store.outbox()] == ["sent", "sent"]


def test_a_token_another_host_refreshed_under_another_key_waits_and_is_never_sent_empty(
    store: Store, emu: SlackEmulator
) -> None:
    # This process read TA's token and finds it due; meanwhile a host whose WAKEFUL_TOKEN_KEY
    # this one lacks refreshed it. The new version cannot be opened here: the send waits.
    install(emu, store, "TA")
    ws = workspaces(emu, store, token_refresh_before=3700)  # the emulator's tokens live 3600 s
    assert ws.who("TA")[0] is not None  # read and cached, still the first version
    row = store.installation("TA")
    assert row is not None
    sealed = TokenCipher(Fernet.generate_key().decode()).seal(
        {"bot_token": "xoxe.xoxb-1-TA-elsewhere", "bot_refresh_token": "xoxe-1-TA-elsewhere"}
    )
    later = int(time.time()) + 7200  # good for longer than token_refresh_before
    assert store.refresh_secrets("TA", row.version, sealed, row.profile, later, T0) is not None
    with pytest.raises(TransientSendError, match="WAKEFUL_TOKEN_KEY"):
        ws.token("TA")
    assert emu.calls("oauth.v2.access")[1:] == []  # the install's exchange only: no refresh


@pytest.mark.parametrize("order", [("revoked", "uninstalled"), ("uninstalled", "revoked")])
def test_revoked_and_uninstalled_in_either_order_set_the_workspace_aside(
    store: Store, emu: SlackEmulator, order: tuple[str, str]
) -> None:
    installations = install(emu, store, "TB")
    ws = workspaces(emu, store)
    store.ingest("TB:UB1", "slack", "Ev1", {"text": "later"}, T0)
    store.post("TB:UB1", [Post("DB1", "queued before")], T0)
    store.add_timer("TB:UB1", Timer.once("remind-1", T0 + 600, {}), T0)
    store.post("TA:UA1", [Post("DA1", "another workspace")], T0)
    reasons = {"revoked": "the bot token was revoked", "uninstalled": "the app was uninstalled"}
    for status in order:
        installations.end(None, "TB", status, reasons[status], org_wide=False)  # type: ignore[arg-type]
    row = store.installation("TB")
    assert row is not None and row.status == "uninstalled"
    assert row.reason == "the app was uninstalled"
    assert installations.cipher.open(row.secrets) == {}  # the tokens are gone
    [parked] = [r for r in store.outbox("failed") if r.inbox == "TB:UB1"]
    assert parked.error == "not sent: the app was uninstalled" or "revoked" in (parked.error or "")
    assert store.timers("TB:UB1") == []
    lease = store.inbox_view("TB:UB1", T0).lease
    assert lease is not None and lease["holder"] == "aside:TB"
    assert "TB:UB1" not in [i for i, _ in store.ready_list(T0 + 10).inboxes]
    assert [e.source_id for e in store.events("TB:UB1")] == ["Ev1"]  # kept for the operator
    assert [r.inbox for r in store.outbox("pending")] == ["TA:UA1"]  # A untouched
    ws.forget()
    with pytest.raises(Exception, match="workspace TB: the app was uninstalled"):
        ws.token("TB")
    install(emu, store, "TB", clock=T0 + 20)  # a re-install resumes
    assert "TB:UB1" in [i for i, _ in store.ready_list(T0 + 30).inboxes]
    ws.forget()
    assert emu.team_of(ws.token("TB")) == "TB"


def test_a_notice_older_than_a_reinstall_changes_nothing(store: Store, emu: SlackEmulator) -> None:
    install(emu, store, "TB", clock=T0)
    installations = install(emu, store, "TB", clock=T0 + 100)
    done = installations.end(None, "TB", "uninstalled", "late retry", issued_at=T0 + 50)
    assert done is None
    row = store.installation("TB")
    assert row is not None and row.status == "active"


def test_one_process_refreshes_a_rotating_token_the_other_picks_it_up(
    emu: SlackEmulator, tmp_path: Path
) -> None:
    """Two processes on one PostgreSQL store find the same token due and refresh at once:
    the store's lease lets exactly one call oauth.v2.access (a refresh token is single-use),
    and both end up with the new token."""
    need_pg("the refresh race")
    outs, calls = _refresh_race(emu, tmp_path, expired=False)
    assert all(emu.team_of(o["first"]) == "TR" for o in outs)
    assert all(c.response.get("ok") for c in calls)


def test_a_post_after_the_tokens_expiry_goes_with_the_token_refreshed_once(
    emu: SlackEmulator, tmp_path: Path
) -> None:
    """No request comes in for longer than the token lives (Bolt's token rotator refreshes
    only when one does): the old token has expired at Slack when two dispatcher processes
    on one PostgreSQL store post. Exactly one of them refreshes; neither sends a call with
    the expired token (the other waits for the refresh); every post goes with the new one."""
    need_pg("the refresh race")
    outs, calls = _refresh_race(emu, tmp_path, expired=True)
    new = outs[0]["after"]
    assert [o["first"] for o in outs] == [new, new]  # nobody used the expired token
    posts = [c for c in calls if c.method == "chat.postMessage"]
    assert sorted(c.params["channel"] for c in posts) == ["DR1", "DR2"]
    assert all(c.response.get("ok") for c in posts), [c.response for c in posts]
    assert {c.headers.get("Authorization") for c in posts} == {f"Bearer {new}"}
    assert sum(o["posted"] for o in outs) == 2


def _refresh_race(
    emu: SlackEmulator, tmp_path: Path, expired: bool
) -> tuple[list[dict[str, Any]], list[Call]]:
    """TR's token due (`expired`: past its expiry, at Slack too), two rows waiting, and two
    refresher processes released together: what each printed and the calls after the
    install. Checks what both tests share: one refresh, every process on the new token."""
    with pg_schema_url() as url:
        store = open_store(url)
        try:
            now = int(time.time())
            install(emu, store, "TR", clock=now)
            before = len(emu.calls())
            row = store.installation("TR")
            assert row is not None
            # Due: 10 s left (refreshed under 60 s), the token still works; or gone.
            expiry = now - 1 if expired else now + 10
            if expired:
                emu.expire_tokens("TR")
            store.refresh_secrets("TR", row.version, row.secrets, row.profile, expiry, now)
            store.post("TR:UR1", [Post("DR1", "one")], now)
            store.post("TR:UR2", [Post("DR2", "two")], now)
            outs = _race(url, emu, tmp_path)
        finally:
            store.close()
    calls = emu.calls()[before:]
    refreshes = [c for c in calls if c.method == "oauth.v2.access" and c.params.get("grant_type")]
    assert len(refreshes) == 1 and refreshes[0].response.get("ok"), [c.response for c in refreshes]
    assert sum(o["refreshes"] for o in outs) == 1
    new = refreshes[0].response["access_token"]
    assert [o["after"] for o in outs] == [new, new]  # every process picks up the new token
    return outs, calls


def _race(url: str, emu: SlackEmulator, tmp_path: Path) -> list[dict[str, object]]:
    """Two refresher processes, released together; what each printed."""
    go = tmp_path / "go"
    script = tmp_path / "refresher.py"
    script.write_text(_REFRESHER.format(repo=str(REPO)))
    args = [url, KEY, emu.client_id, emu.client_secret, emu.api_url, str(go)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        deadline = time.monotonic() + 30
        while not all((tmp_path / f"ready-{p.pid}").exists() for p in procs):
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            assert time.monotonic() < deadline, "the refreshers did not start"
            time.sleep(0.02)
        go.write_text("go")
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=30)
            assert p.returncode == 0, err
            outs.append(json.loads(out.strip().splitlines()[-1]))
        return outs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


_REFRESHER = textwrap.dedent(
    """
    import json, os, sys, time
    sys.path.insert(0, {repo!r})
    from wakeful.bot.slack.installations import StoreInstallations, TokenCipher
    from wakeful.bot.slack.sender import SlackSender, make_client
    from wakeful.bot.slack.workspaces import Workspaces
    from wakeful.core.dispatcher import Dispatcher
    from wakeful.core.store import open_store

    url, key, client_id, secret, api, go = sys.argv[1:7]
    store = open_store(url)
    ws = Workspaces(store, StoreInstallations(store, TokenCipher(key)), client_id, secret, api,
                    token_refresh_before=60, ttl=0)
    open(os.path.join(os.path.dirname(go), "ready-%d" % os.getpid()), "w").close()
    while not os.path.exists(go):
        time.sleep(0.001)
    first = ws.token("TR")
    sender = SlackSender(make_client("", api), sleep=lambda _s: None, tokens=ws.token)
    posted = Dispatcher(store=store, clock=lambda: int(time.time()), sender=sender).tick(
        int(time.time())
    )
    deadline = time.monotonic() + 10
    while True:  # the other process may still be refreshing: wait for its save
        after = ws.token("TR")
        row = store.installation("TR")
        if row.expires_at - time.time() > 60 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    out = {{"first": first, "after": ws.token("TR"), "refreshes": ws.refreshes}}
    print(json.dumps({{**out, "posted": posted}}))
    store.close()
    """
)


def doctor_env(emu: SlackEmulator, db: str) -> dict[str, str]:
    """What `wakeful doctor` reads in distribution mode against the emulator."""
    return {
        "SLACK_CLIENT_ID": emu.client_id,
        "SLACK_CLIENT_SECRET": emu.client_secret,
        "SLACK_SIGNING_SECRET": "s",
        "SLACK_API_URL": emu.api_url,
        "WAKEFUL_TOKEN_KEY": KEY,
        "WAKEFUL_DB": db,
    }


def test_the_doctor_checks_every_installations_token_and_scopes(
    emu: SlackEmulator, tmp_path: Path
) -> None:
    from wakeful.bot.commands.doctor import report, run_checks
    from wakeful.bot.slack.scopes import required_scopes

    db = str(tmp_path / "doctor.db")
    store = open_store(db)
    try:
        install(emu, store, "TA")
        install(emu, store, "TB")
    finally:
        store.close()
    emu.uninstall("TB")  # Slack no longer takes TB's token; the store does not know yet
    checks = {c.name: c for c in run_checks(doctor_env(emu, db))}
    assert checks["installations"].detail.startswith("2 active of 2")
    every = len(required_scopes() or [])
    assert checks["workspace TA"].ok is True and f"all {every}" in checks["workspace TA"].detail
    assert checks["workspace TB"].ok is False
    assert "token_revoked" in checks["workspace TB"].detail
    text, code = report(list(checks.values()))
    assert code == 1
    assert not any(t in text for t in emu.tokens_of("TA") + emu.tokens_of("TB"))


def test_the_doctor_takes_a_rotating_token_past_its_hours_for_what_it_is(
    emu: SlackEmulator, tmp_path: Path
) -> None:
    """A quiet workspace's rotating token expires (it is refreshed when a send needs it): the
    doctor says so instead of failing on auth.test's token_expired, and still compares the
    scopes last granted with the manifest's; with no refresh token kept, nothing will refresh
    it, and that fails."""
    from wakeful.bot.commands.doctor import run_checks
    from wakeful.bot.slack.scopes import required_scopes

    every = required_scopes(None)
    assert every
    db = str(tmp_path / "doctor.db")
    store = open_store(db)
    try:
        for team, refresh, scopes in (
            ("TA", "xoxe-1-refresh-a", every),
            ("TB", None, every),
            ("TC", "xoxe-1-refresh-c", ["chat:write"]),
        ):
            emu.add_workspace(team)
            StoreInstallations(store, TokenCipher(KEY)).save(
                Installation(
                    app_id="AEMULATOR",
                    team_id=team,
                    bot_token=f"xoxe.xoxb-1-{team}",
                    bot_user_id="UBOT",
                    bot_scopes=list(scopes),
                    bot_refresh_token=refresh,
                    bot_token_expires_at=int(time.time()) - 60,
                    user_id="U1",
                )
            )
    finally:
        store.close()
    checks = {c.name: c for c in run_checks(doctor_env(emu, db))}
    assert checks["workspace TA"].ok is True
    assert "the next send refreshes it" in checks["workspace TA"].detail
    assert checks["workspace TB"].ok is False
    assert "no refresh token" in checks["workspace TB"].detail
    assert checks["workspace TC"].ok is False and "missing " in checks["workspace TC"].detail
    assert emu.calls("auth.test") == []


def test_a_time_zone_is_read_with_the_token_of_the_runs_workspace(
    store: Store, emu: SlackEmulator
) -> None:
    from wakeful.bot.slack.zones import RUN_TEAM, ZoneLookup

    install(emu, store, "TA")
    install(emu, store, "TB")
    emu.add_user("UB1", tz="Europe/Paris")
    ws = workspaces(emu, store)
    lookup = ZoneLookup(make_client("", emu.api_url), wait=5.0, tokens=ws.token)
    RUN_TEAM.set("TB")  # what WorkspaceHook sets before a run of a TB inbox
    assert lookup("UB1") == "Europe/Paris"
    [call] = emu.calls("users.info")
    assert call.team == "TB"
