"""Distribution mode at its edges, as docs/distributing.md tells them: the "Add to Slack" page's
link follows SLACK_API_URL and sets a state cookie; a callback without that cookie is a 400, one
with an unknown or used state a 401; an uninstalled (or never installed) workspace's requests
are acknowledged and not stored, and the log says so once per workspace, not an ERROR per
request; serve takes the scopes from the manifest it is pointed at, and an installed wheel
without one stops at start-up with one line. The real front (Bolt's OAuth flow on wakeful's
store) on waitress against the emulator; both stores."""

from __future__ import annotations

import html
import http.client
import logging
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from tests.support.gateway import ROOT
from tests.support.slack_app import LISTENING
from wakeful.bot.front.listeners import Listeners
from wakeful.bot.front.wsgi import SlackFront
from wakeful.bot.process.config import Config
from wakeful.bot.process.runtime import http_server, serve_in_thread
from wakeful.bot.slack.distribution import Distribution
from wakeful.bot.slack.scopes import manifest_scopes
from wakeful.core.store import Store
from wakeful.devtools.emulator import EventSender, SlackEmulator

SECRET = "edges-signing-secret"
REINSTALL = "no longer available. Please reinstall this app into your workspace"


@pytest.fixture
def emu() -> Iterator[SlackEmulator]:
    running = SlackEmulator().start()
    running.add_workspace("TA")
    yield running
    running.stop()


class Front:
    def __init__(self, store: Store, emu: SlackEmulator) -> None:
        env = {
            "SLACK_CLIENT_ID": emu.client_id,
            "SLACK_CLIENT_SECRET": emu.client_secret,
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_API_URL": emu.api_url,
            "WAKEFUL_TOKEN_KEY": Fernet.generate_key().decode(),
        }
        config = Config.from_env(env)
        self.dist = Distribution.build(config, store)
        listeners = Listeners(
            store,
            SECRET,
            authorizer=self.dist.authorize(),
            installations=self.dist.installations,
            oauth_settings=self.dist.oauth_settings(),
            client=self.dist.oauth_client(),
        )
        front = SlackFront(listeners)
        server = http_server(front, "127.0.0.1", 0)
        self.port = server.effective_port
        self.stop = serve_in_thread(server)
        emu.redirect_uri = f"http://127.0.0.1:{self.port}/slack/oauth_redirect"

    def get(self, path: str, cookie: str = "") -> tuple[int, dict[str, str], str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request("GET", path, headers={"Cookie": cookie} if cookie else {})
            got = conn.getresponse()
            return got.status, {k.lower(): v for k, v in got.getheaders()}, got.read().decode()
        finally:
            conn.close()


@pytest.fixture
def front(store: Store, emu: SlackEmulator) -> Iterator[Front]:
    running = Front(store, emu)
    yield running
    running.stop()


def _link(page: str) -> urllib.parse.SplitResult:
    found = re.search(r'<a href="([^"]+)"', page)
    assert found, page
    return urllib.parse.urlsplit(html.unescape(found.group(1)))


def test_the_install_page_its_cookie_and_what_a_callback_without_them_gets(
    front: Front, emu: SlackEmulator, store: Store
) -> None:
    status, headers, page = front.get("/slack/install")
    assert status == 200
    cookie, *flags = headers["set-cookie"].split("; ")
    name, _, state = cookie.partition("=")
    assert name == "slack-app-oauth-state" and state
    assert flags == ["Secure", "HttpOnly", "Path=/", "Max-Age=600"]
    link = _link(page)
    assert f"{link.scheme}://{link.netloc}/" == emu.api_url.removesuffix("api/")
    assert link.path == "/oauth/v2/authorize", "SLACK_API_URL's host, not slack.com"
    asked = urllib.parse.parse_qs(link.query)
    assert asked["state"] == [state] and asked["client_id"] == [emu.client_id]
    wanted = manifest_scopes((ROOT / "manifest.yml").read_text())
    assert asked["scope"] == [",".join(wanted)], "the manifest's bot scopes"
    assert Config.from_env({}).authorize_url == "https://slack.com/oauth/v2/authorize"
    # Slack approves and sends the browser back with a code and the state.
    status, headers, _ = front_get_emulator(emu, f"{link.path}?{link.query}&team=TA")
    assert status == 302
    back = urllib.parse.urlsplit(headers["location"])
    callback = f"{back.path}?{back.query}"
    status, _, text = front.get(callback)
    assert (status, "invalid_browser: " in text) == (400, True), "no state cookie"
    unknown = callback.replace(state, "unknown-state")
    status, _, text = front.get(unknown, "slack-app-oauth-state=unknown-state")
    assert (status, "invalid_state: " in text) == (401, True), "a state never issued"
    assert front.get(callback, cookie)[0] == 200, "installed"
    assert store.installation_for_team("TA") is not None
    status, _, text = front.get(callback, cookie)
    assert (status, "invalid_state: " in text) == (401, True), "a state is good once"


def front_get_emulator(emu: SlackEmulator, path: str) -> tuple[int, dict[str, str], str]:
    conn = http.client.HTTPConnection("127.0.0.1", emu.port, timeout=10)
    try:
        conn.request("GET", path)
        got = conn.getresponse()
        return got.status, {k.lower(): v for k, v in got.getheaders()}, got.read().decode()
    finally:
        conn.close()


def test_an_uninstalled_workspaces_requests_are_dropped_and_said_once_per_workspace(
    front: Front, emu: SlackEmulator, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    ta = EventSender(f"http://127.0.0.1:{front.port}/slack/events", SECRET, team_id="TA")
    _, _, page = front.get("/slack/install")
    link = _link(page)
    _, headers, _ = front_get_emulator(emu, f"{link.path}?{link.query}&team=TA")
    back = urllib.parse.urlsplit(headers["location"])
    cookie = f"slack-app-oauth-state={urllib.parse.parse_qs(link.query)['state'][0]}"
    assert front.get(f"{back.path}?{back.query}", cookie)[0] == 200
    assert ta.message("UA1", "hello").status == 200
    assert len(store.events("TA:UA1")) == 1
    caplog.set_level(logging.INFO)
    assert ta.event({"type": "app_uninstalled"}).status == 200
    caplog.clear()  # what follows the uninstall's own line
    never = EventSender(f"http://127.0.0.1:{front.port}/slack/events", SECRET, team_id="TZ")
    for i in range(5):
        assert ta.message("UA1", f"after {i}").status == 200
        assert never.message("UZ1", f"never {i}").status == 200
    command = ta.command("UA1", "status", response_url=emu.response_url_for("cmd"))
    assert command.status == 200
    assert len(store.events("TA:UA1")) == 1, "nothing more stored"
    assert store.events("TZ:UZ1") == []
    [told] = emu.responses("cmd")
    assert REINSTALL in str(told), told
    said = [
        (r.levelname, r.getMessage())
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.startswith(("wakeful", "slack"))
    ]
    assert [level for level, _ in said] == ["WARNING", "WARNING"], said
    assert said[0][1].startswith("workspace TA: ") and "(uninstalled " in said[0][1]
    assert said[1][1].startswith("workspace TZ has no installation of the app (never installed")
    assert all(
        m.endswith("its requests are acknowledged and not stored (said once per workspace)")
        for _, m in said
    )


def _wheel_layout(site: Path) -> None:
    """What `pip install wakeful-*.whl` puts in site-packages: the four packages under
    `wakeful/` (pyproject's package-dir), and no manifest.yml."""
    for folder, name in (("core", "core"), ("bot", "bot"), ("devtools", "devtools")):
        shutil.copytree(
            ROOT / folder, site / "wakeful" / name, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copytree(ROOT / "agents", site / "wakeful" / "agents")


def test_serve_asks_for_the_scopes_of_the_manifest_it_is_given_or_stops_in_one_line(
    tmp_path: Path,
) -> None:
    site, cwd = tmp_path / "site", tmp_path / "elsewhere"
    cwd.mkdir()
    _wheel_layout(site)
    # -S: no site-packages .pth files, so no editable install points back at this checkout;
    # the dependencies come from the test's own site-packages.
    deps = sysconfig.get_paths()["purelib"]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": f"{site}{os.pathsep}{deps}",
        "SLACK_CLIENT_ID": "1.2",
        "SLACK_CLIENT_SECRET": "client-secret",
        "SLACK_SIGNING_SECRET": SECRET,
        "WAKEFUL_TOKEN_KEY": Fernet.generate_key().decode(),
        "WAKEFUL_DB": str(tmp_path / "w.db"),
        "WAKEFUL_HOST": "127.0.0.1",
        "WAKEFUL_PORT": "0",
    }
    serve = [sys.executable, "-S", "-m", "wakeful.bot.commands.cli", "serve", "--no-loops"]

    def run(*more: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*serve, *more], env=env, cwd=cwd, capture_output=True, text=True, timeout=60
        )

    for more, says in (
        ((), "wakeful: distribution mode asks Slack for the bot scopes of your app's manifest"),
        (("--manifest", "nowhere.yml"), "wakeful: --manifest: no such file 'nowhere.yml'"),
    ):
        done = run(*more)
        assert done.returncode == 2, done.stderr
        [line] = done.stderr.splitlines()
        assert line.startswith(says), line
    assert "or name it with --manifest" in run().stderr
    started = subprocess.Popen(
        [*serve, "--manifest", str(ROOT / "manifest.yml")],
        env={**env, "WAKEFUL_LOG_LEVEL": "INFO"},
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert started.stdout is not None
        line = started.stdout.readline()
        assert LISTENING.match(line.strip()), line
    finally:
        started.terminate()
        _, err = started.communicate(timeout=30)
    where = subprocess.run(
        [sys.executable, "-S", "-c", "import wakeful.bot; print(*wakeful.bot.__path__)"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert where.stdout.strip() == str(site / "wakeful" / "bot"), "the wheel's copy ran"
    wanted = len(manifest_scopes((ROOT / "manifest.yml").read_text()))
    assert f"installs ask for the {wanted} bot scopes of {ROOT / 'manifest.yml'}" in err, err
