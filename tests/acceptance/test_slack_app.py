"""`wakeful serve` driven the way Slack meets it.

The real command runs as a subprocess on a real port; Slack's side is played by the local
emulator (Web API in, recorded calls out) and by `EventSender` (signed events and clicks). Every
assertion is on something observable from outside: HTTP statuses, what the emulator received,
and the store read from the test process while the app runs.

One app process per backend is shared by most tests; each test uses its own users and channels.
Tests that need other processes (config errors, loops split over four processes) start their own.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import json
import os
import queue
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import need_pg
from tests.support.forked_cli import popen_lines
from wakeful.bot.front.wsgi import BODY_CAP
from wakeful.core.events import Message, decode
from wakeful.core.records import StepRecord
from wakeful.core.store import Store, open_store
from wakeful.devtools.audit import count_events
from wakeful.devtools.emulator import EventSender, SlackEmulator

REPO = Path(__file__).resolve().parents[2]
TOKEN = "xoxb-acceptance"
SECRET = "acceptance-signing-secret"
TEAM = "T1"
BOT_USER = "UBOT"
APPROVER = "U0APPROVER"
APPROVAL_TTL = 4
OUTBOX_GAP = 1
BATCH_WINDOW = 0.5
LISTENING = re.compile(
    r'^(?:wakeful: |\{.*"message": ")listening on http://127\.0\.0\.1:(\d+)/slack/events(?:"\})?$'
)
"""serve's first stdout line, as text or (WAKEFUL_LOG_FORMAT=json) as a JSON object."""
START_TIMEOUT = 60.0
"""Patience for a process's first line (and its SIGTERM stop): an upper bound only, which a
machine whose cores are busy with other work needs (issue 36)."""
SETTLE = 0.3
"""The one short settle of a check that something must NOT happen (`settle`)."""
APP_SETTINGS = {
    "WAKEFUL_OUTBOX_GAP": str(OUTBOX_GAP),
    "WAKEFUL_APPROVAL_TTL": str(APPROVAL_TTL),
    "WAKEFUL_APPROVERS": APPROVER,
    "WAKEFUL_BATCH_WINDOW": str(BATCH_WINDOW),
}
QUICK_WINDOW = 0.1
"""The batch window of apps whose tests send no burst: every reply and click waits it out, and
the default's half second, paid some forty times a module, is most of what they wait on.
Still a window, so runs go through its path as in production."""
QUICK_SETTINGS = {**APP_SETTINGS, "WAKEFUL_BATCH_WINDOW": str(QUICK_WINDOW)}


# -- processes -------------------------------------------------------------------------------


def wakeful_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "wakeful.bot.commands.cli", *args]


def child_env(**settings: str) -> dict[str, str]:
    """The test's environment minus every wakeful/Slack setting and proxy, plus `settings`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLACK_", "WAKEFUL_", "ANTHROPIC_"))
        and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")
    }
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(settings)
    return env


class Proc:
    """A `wakeful` process: stdout lines gathered by a thread, stderr in a log file.

    A `wakeful_cmd` is forked from the test process's zygote (tests/support/forked_cli.py): a
    process of its own as the script's is (its environment, folder, stdio, signals, exit),
    without the interpreter's start and imports each time, which were a fifth of the suite's
    CPU. `fork=False` runs the real script: for what only a fresh exec shows (the environment
    the kernel keeps in /proc/<pid>/environ)."""

    def __init__(
        self, args: Sequence[str], env: Mapping[str, str], cwd: Path, log: Path, fork: bool = True
    ) -> None:
        self.args = list(args)
        self.log = log
        script = wakeful_cmd()
        with open(log, "wb") as err:
            self.popen: Any
            if fork and self.args[: len(script)] == script:
                rest = self.args[len(script) :]
                self.popen = popen_lines(rest, env=env, cwd=cwd, stderr=err.fileno())
            else:
                self.popen = subprocess.Popen(
                    self.args,
                    env=dict(env),
                    cwd=cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    text=True,
                )
        self.lines: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.lines.put(line.rstrip("\n"))

    def next_line(self, timeout: float = START_TIMEOUT) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                return self.lines.get(timeout=0.05)
            except queue.Empty:
                if self.popen.poll() is not None:
                    self._reader.join(1)
                    if self.lines.empty():
                        raise AssertionError(
                            f"{self.args[3:]} exited {self.popen.returncode} before printing; "
                            f"stderr:\n{self.tail()}"
                        ) from None
        raise AssertionError(f"{self.args[3:]} printed nothing in {timeout} s:\n{self.tail()}")

    def tail(self, n: int = 40) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-n:])

    def stop(self, timeout: float = START_TIMEOUT) -> int | None:
        """SIGTERM, then wait; returns the exit code (None if it had to be killed)."""
        code: int | None
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
        try:
            code = self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
            code = None
        self._reader.join(5)
        if self.popen.stdout is not None:
            self.popen.stdout.close()
        return code


@dataclass
class Wakeful:
    """One running `wakeful serve`, the emulator it posts to, a signed sender, the store."""

    proc: Proc
    url: str
    db: str
    emu: SlackEmulator
    sender: EventSender
    store: Store
    backend: str

    @property
    def port(self) -> int:
        return int(urllib.parse.urlsplit(self.url).port or 0)

    def posts(self, channel: str, needle: str = "") -> list[dict[str, Any]]:
        return [m for m in self.emu.messages(channel) if needle in str(m.get("text", ""))]

    def wait_post(self, channel: str, needle: str, timeout: float = 10.0, count: int = 1) -> None:
        ok = self.emu.wait_for(
            lambda e: sum(needle in str(m.get("text", "")) for m in e.messages(channel)) >= count,
            timeout,
        )
        assert ok, (
            f"no post containing {needle!r} in {channel} within {timeout} s; seen: "
            f"{[m.get('text') for m in self.emu.messages(channel)]}\n--- app log:\n{self.tail()}"
        )

    def tail(self) -> str:
        return self.proc.tail()


def launch(
    tmp: Path,
    emu: SlackEmulator,
    db: str,
    settings: Mapping[str, str] | None = None,
    args: Sequence[str] = ("serve",),
    backend: str = "sqlite",
    fork: bool = True,
) -> Wakeful:
    env = child_env(
        SLACK_BOT_TOKEN=emu.bot_token,
        SLACK_SIGNING_SECRET=SECRET,
        SLACK_API_URL=emu.api_url,
        WAKEFUL_DB=db,
        WAKEFUL_HOST="127.0.0.1",
        WAKEFUL_PORT="0",
        **dict(settings or {}),
    )
    proc = Proc(wakeful_cmd(*args), env, tmp, tmp / f"serve-{uuid.uuid4().hex[:6]}.log", fork)
    try:
        line = proc.next_line()
        match = LISTENING.match(line)
        assert match, f"unexpected first line {line!r}; stderr:\n{proc.tail()}"
        url = f"http://127.0.0.1:{match.group(1)}/slack/events"
        store = open_store(db)
    except BaseException:
        proc.stop()
        raise
    sender = EventSender(url, SECRET, team_id=TEAM, bot_user_id=emu.bot_user_id)
    return Wakeful(proc, url, db, emu, sender, store, backend)


def shut_down(app: Wakeful) -> None:
    app.store.close()
    code = app.proc.stop()
    assert code == 0, f"wakeful serve exited {code} on SIGTERM:\n{app.tail()}"


@contextmanager
def pg_schema_url() -> Iterator[str]:
    """A fresh schema, named in the DSN through libpq's `options=-csearch_path=<schema>`."""
    dsn = need_pg("the PostgreSQL app run")
    import psycopg

    schema = f"wakeful_acc_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in dsn else "?"
    try:
        yield f"{dsn}{sep}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@contextmanager
def serving(
    backend: str,
    tmp: Path,
    settings: Mapping[str, str] | None = None,
    channels: Sequence[str] = (),
) -> Iterator[Wakeful]:
    """`wakeful serve` on `backend` (sqlite: a file in `tmp`; postgres: a fresh schema) with
    an emulator of its own (and `channels` added to it), shut down cleanly afterwards."""
    with SlackEmulator(bot_token=TOKEN, bot_user_id=BOT_USER, team_id=TEAM) as emu:
        for channel in channels:
            emu.add_channel(channel)
        with contextlib.ExitStack() as stack:
            if backend == "sqlite":
                db = str(tmp / "wakeful.db")
            else:
                db = stack.enter_context(pg_schema_url())
            running = launch(tmp, emu, db, settings or APP_SETTINGS, backend=backend)
            try:
                yield running
            finally:
                shut_down(running)


# -- small helpers -----------------------------------------------------------------------------


def inbox(user: str) -> str:
    return f"{TEAM}:{user}"


def dm(user: str) -> str:
    """EventSender's default DM channel for a user: U42 -> D42."""
    return "D" + user.removeprefix("U")


def eventually(predicate: Callable[[], bool], timeout: float = 10.0, every: float = 0.05) -> bool:
    """Poll a condition the emulator cannot signal (store contents)."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(every)


def settle(app: Wakeful, *inboxes: str, timeout: float = 15.0) -> None:
    """Before a check that nothing else happens: wait until each inbox has nothing left to do
    (no pending or running event, no post waiting in its outbox), then SETTLE seconds more.
    Everything the app would still do for these inboxes is in the store before it does it (an
    event before its 200, a post in the outbox before it goes out), so once they are idle what
    must not happen has had its chance; the settle is for what is on its way."""

    def idle() -> bool:
        for key in inboxes:
            if any(e.status in ("pending", "running") for e in app.store.events(key)):
                return False
            if any(r.status in ("pending", "sending") for r in app.store.outbox(inbox=key)):
                return False
        return True

    assert eventually(idle, timeout), f"{inboxes} never went idle:\n{app.tail()}"
    time.sleep(SETTLE)


def json_field(value: Any) -> Any:
    """Web API params arrive as objects (JSON body) or JSON strings (form body)."""
    if isinstance(value, str):
        return json.loads(value) if value else None
    return value


def find_prompt(app: Wakeful, channel: str, order: str) -> tuple[str, str] | None:
    """(prompt ts, request id) of the approval prompt for `order`, once posted."""
    for m in app.emu.messages(channel):
        if f"refund order {order} for" not in str(m.get("text", "")):
            continue
        for block in m.get("blocks") or []:
            if block.get("type") == "actions":
                return str(m["ts"]), str(block["elements"][0]["value"])
    return None


def wait_prompt(app: Wakeful, channel: str, order: str, timeout: float = 10.0) -> tuple[str, str]:
    ok = app.emu.wait_for(lambda _e: find_prompt(app, channel, order) is not None, timeout)
    assert ok, f"no approval prompt for order {order} in {channel}:\n{app.tail()}"
    found = find_prompt(app, channel, order)
    assert found is not None
    return found


def message_at(app: Wakeful, channel: str, ts: str) -> dict[str, Any]:
    return next(m for m in app.emu.messages(channel) if m.get("ts") == ts)


def refund_calls(app: Wakeful, key: str) -> list[StepRecord]:
    return [r for r in app.store.recorded_steps(name="refund_order") if r.key == key]


def http_request(
    app: Wakeful,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, bytes, dict[str, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", app.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=dict(headers or {}))
        resp = conn.getresponse()
        return resp.status, resp.read(), {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()


def message_body(app: Wakeful, user: str, text: str) -> tuple[bytes, str]:
    """A well-formed message.im envelope (body, event_id) for hand-made requests."""
    event_id = f"Ev{uuid.uuid4().hex[:16].upper()}"
    ts = app.sender.next_ts()
    envelope = {
        "type": "event_callback",
        "team_id": TEAM,
        "api_app_id": "AEMULATOR",
        "event_id": event_id,
        "event_time": int(time.time()),
        "event": {
            "type": "message",
            "user": user,
            "text": text,
            "ts": ts,
            "channel": dm(user),
            "channel_type": "im",
            "event_ts": ts,
        },
    }
    return json.dumps(envelope).encode(), event_id


# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wakeful]:
    """The shared `wakeful serve` on a SQLite file, with the quick batch window (bursts have
    `burst_app`)."""
    tmp = tmp_path_factory.mktemp("serve-sqlite")
    with SlackEmulator(bot_token=TOKEN, bot_user_id=BOT_USER, team_id=TEAM) as emu:
        # Digests every second (test_digest_every_and_off), as the demo allows.
        settings = {**QUICK_SETTINGS, "WAKEFUL_MIN_DIGEST_PERIOD": "1"}
        running = launch(tmp, emu, str(tmp / "wakeful.db"), settings)
        try:
            yield running
        finally:
            shut_down(running)


@pytest.fixture(scope="module")
def pg_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wakeful]:
    """The same, on a fresh PostgreSQL schema."""
    tmp = tmp_path_factory.mktemp("serve-pg")
    with (
        pg_schema_url() as url,
        SlackEmulator(bot_token=TOKEN, bot_user_id=BOT_USER, team_id=TEAM) as emu,
    ):
        running = launch(tmp, emu, url, QUICK_SETTINGS, backend="postgres")
        try:
            yield running
        finally:
            shut_down(running)


@pytest.fixture(scope="module")
def burst_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wakeful]:
    """A `wakeful serve` with the default batch window (BATCH_WINDOW), for the bursts: three
    quick messages must land in it however slow a loaded machine makes each request."""
    with serving("sqlite", tmp_path_factory.mktemp("serve-burst")) as running:
        yield running


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.pg)])
def core_app(request: pytest.FixtureRequest) -> Wakeful:
    """The core subset runs on both backends."""
    name = "app" if request.param == "sqlite" else "pg_app"
    running: Wakeful = request.getfixturevalue(name)
    return running


# -- 1. events become inbox rows, stored before the 200 ----------------------------------------


def test_dm_and_mention_are_stored_before_the_ack(core_app: Wakeful) -> None:
    app = core_app
    thread = app.sender.next_ts()
    ts = app.sender.next_ts()
    reply = app.sender.message("U1001", "hello there", ts=ts, thread_ts=thread)
    # Read at the moment the 200 arrives: the insert must already be committed.
    stored = app.store.event_by_key("slack", str(reply.event_id))
    assert reply.status == 200, reply.body
    assert stored is not None, "the 200 left before the event was committed"
    assert stored.inbox == inbox("U1001")
    assert stored.source == "slack"
    assert stored.source_id == reply.event_id
    p = stored.payload
    assert (p["text"], p["channel"], p["ts"], p["thread_ts"], p["user"]) == (
        "hello there",
        "D1001",
        ts,
        thread,
        "U1001",
    )

    mts = app.sender.next_ts()
    mention = app.sender.mention("U1002", "what's up?", channel="C1002", ts=mts)
    stored = app.store.event_by_key("slack", str(mention.event_id))
    assert mention.status == 200, mention.body
    assert stored is not None, "the 200 left before the mention was committed"
    assert (stored.inbox, stored.source, stored.source_id) == (
        inbox("U1002"),
        "slack",
        mention.event_id,
    )
    p = stored.payload
    assert (p["channel"], p["ts"], p["thread_ts"], p["user"]) == ("C1002", mts, None, "U1002")
    # What the person wrote to the agent, and the whole text as Slack sent it.
    said = decode(p, source="slack")
    assert isinstance(said, Message)
    assert (said.text, said.raw_text) == ("what's up?", f"<@{BOT_USER}> what's up?")
    assert p["raw_prefix"] == f"<@{BOT_USER}> ", "only what was removed is stored beside it"

    app.wait_post("D1001", "Handled 1 message.")
    app.wait_post("C1002", "Handled 1 message.")


def test_the_ack_waits_for_the_commit(core_app: Wakeful) -> None:
    """With the store's writes held back for a moment, the 200 waits for them: it is never sent
    before the row is committed."""
    app = core_app
    hold = 0.5
    with hold_writes(app, hold) as released:
        started = time.monotonic()
        reply = app.sender.message("U1003", "slow disk today")
        took = time.monotonic() - started
        stored = app.store.event_by_key("slack", str(reply.event_id))
    assert reply.status == 200, reply.body
    assert released.is_set() and took >= hold - 0.1, f"acknowledged after {took:.2f} s"
    assert stored is not None, "the 200 left before the event was committed"
    app.wait_post("D1003", "Handled 1 message.")


@contextmanager
def hold_writes(app: Wakeful, seconds: float) -> Iterator[threading.Event]:
    """Block every write to the events table for `seconds` from another connection (SQLite:
    the write lock; PostgreSQL: a SHARE lock on `events`), released by a timer."""
    released = threading.Event()
    if app.backend == "sqlite":
        lite = sqlite3.connect(app.db, timeout=10, isolation_level=None, check_same_thread=False)
        lite.execute("BEGIN IMMEDIATE")

        def release() -> None:
            lite.execute("ROLLBACK")
            released.set()

        closer: Callable[[], None] = lite.close
    else:
        import psycopg

        pg = psycopg.connect(app.db)
        pg.execute("LOCK TABLE events IN SHARE MODE")

        def release() -> None:
            pg.rollback()
            released.set()

        closer = pg.close
    timer = threading.Timer(seconds, release)
    timer.start()
    try:
        yield released
    finally:
        timer.join()
        closer()


# -- 2. a retry stores nothing new and gets no second reply ------------------------------------


def test_a_retried_delivery_is_stored_and_answered_once(core_app: Wakeful) -> None:
    app = core_app
    ts = app.sender.next_ts()
    first = app.sender.message("U2001", "are you there?", ts=ts)
    assert first.status == 200, first.body
    again = app.sender.message(
        "U2001",
        "are you there?",
        ts=ts,
        event_id=first.event_id,
        retry_num=1,
        retry_reason="http_timeout",
    )
    assert again.status == 200, again.body
    assert len(app.store.events(inbox("U2001"))) == 1
    app.wait_post("D2001", "Handled 1 message.")
    late = app.sender.message(
        "U2001", "are you there?", ts=ts, event_id=first.event_id, retry_num=2
    )
    assert late.status == 200, late.body
    settle(app, inbox("U2001"))
    assert [m["text"] for m in app.posts("D2001")] == ["Handled 1 message."]
    assert len(app.store.events(inbox("U2001"))) == 1


# -- 3. what is ignored --------------------------------------------------------------------------


def test_own_bot_and_edited_messages_are_acknowledged_and_ignored(app: Wakeful) -> None:
    user, channel = "U3001", "D3001"
    ignored = [
        app.sender.message(BOT_USER, "I am the bot", channel=channel),
        app.sender.message(user, "from an integration", bot_id="B0OTHER"),
        app.sender.message(user, "edited", subtype="message_changed"),
        app.sender.message(user, "deleted", subtype="message_deleted"),
        app.sender.message(user, "a bot says", subtype="bot_message", bot_id="B0OTHER"),
    ]
    for reply in ignored:
        assert reply.status == 200, reply.body
        assert app.store.event_by_key("slack", str(reply.event_id)) is None
    assert app.store.events(inbox(BOT_USER)) == []

    reaction_ts = app.sender.next_ts()
    reaction = app.sender.event(
        {
            "type": "reaction_added",
            "user": user,
            "reaction": "thumbsup",
            "item": {"type": "message", "channel": channel, "ts": reaction_ts},
            "event_ts": reaction_ts,
        }
    )
    assert reaction.status == 200, f"unhandled event type answered {reaction.status}"
    assert app.store.event_by_key("slack", str(reaction.event_id)) is None

    shortcut = {
        "type": "shortcut",
        "token": "emulator-verification-token",
        "callback_id": "not_ours",
        "trigger_id": "1.2.3",
        "user": {"id": user, "team_id": TEAM},
        "team": {"id": TEAM, "domain": "emulator"},
    }
    body = urllib.parse.urlencode({"payload": json.dumps(shortcut)}).encode()
    reply = app.sender.raw(body, {"Content-Type": "application/x-www-form-urlencoded"})
    assert reply.status == 200, f"unhandled interactivity answered {reply.status}"

    # Positive marker: a real DM afterwards is answered alone.
    marker = app.sender.message(user, "a real question")
    assert marker.status == 200
    app.wait_post(channel, "Handled")
    settle(app, inbox(user))
    assert [m["text"] for m in app.posts(channel)] == ["Handled 1 message."]
    assert [e.source_id for e in app.store.events(inbox(user))] == [marker.event_id]
    assert app.store.events(inbox(BOT_USER)) == []
    assert app.emu.ephemerals(channel=channel) == []


# -- 4. hostile and odd HTTP ---------------------------------------------------------------------


def test_bad_signatures_are_refused_and_store_nothing(app: Wakeful) -> None:
    user = "U4001"
    json_ct = {"Content-Type": "application/json"}
    now = int(time.time())
    cases: list[tuple[str, Callable[[bytes], Any]]] = [
        (
            "wrong signature",
            lambda b: app.sender.raw(b, {**json_ct, "X-Slack-Signature": "v0=" + "0" * 64}),
        ),
        ("no signature headers", lambda b: app.sender.raw(b, json_ct, sign=False)),
        (
            "signature without timestamp",
            lambda b: app.sender.raw(
                b, {**json_ct, "X-Slack-Signature": app.sender.sign(b, now)}, sign=False
            ),
        ),
        ("replayed 6 minutes later", lambda b: app.sender.raw(b, json_ct, timestamp=now - 360)),
        ("signed with another secret", lambda b: app.sender.raw(b, json_ct, secret="not-it")),
        (
            "non-numeric timestamp",
            lambda b: app.sender.raw(b, {**json_ct, "X-Slack-Request-Timestamp": "soon"}),
        ),
    ]
    for name, send in cases:
        body, event_id = message_body(app, user, f"forged: {name}")
        reply = send(body)
        assert reply.status == 401, f"{name}: {reply.status} {reply.body}"
        assert app.store.event_by_key("slack", event_id) is None, name
    assert app.store.events(inbox(user)) == []


def test_malformed_and_oversized_bodies(app: Wakeful) -> None:
    json_ct = {"Content-Type": "application/json"}
    form_ct = {"Content-Type": "application/x-www-form-urlencoded"}
    whole, event_id = message_body(app, "U4002", "cut short")
    for name, body, headers in [
        ("malformed JSON", b'{"type": "event_callback", "event": {', json_ct),
        ("JSON that is not an object", b'["event_callback"]', json_ct),
        ("form with a broken payload", b"payload=%7B%22type%22%3A+%22block_act", form_ct),
        ("form payload without a type", b"payload=%7B%22a%22%3A1%7D", form_ct),
        ("form without a payload", b"nothing=here", form_ct),
        ("truncated body", whole[: len(whole) // 2], json_ct),
    ]:
        reply = app.sender.raw(body, headers)
        assert reply.status == 400, f"{name}: {reply.status} {reply.body}"
    assert app.store.event_by_key("slack", event_id) is None
    # Bytes that are not UTF-8 cannot be Slack's: refused (the verifier decodes before hashing).
    reply = app.sender.raw(b'{"type": "\xff\xfe"}', json_ct)
    assert reply.status in (400, 401), reply

    # Over the cap: 413, without reading (or buffering) the body.
    assert oversized_status(app) == 413
    # Just under the cap is not "too large" (an unhandled event type: 200, nothing stored).
    pad = "x" * (BODY_CAP - 400)
    near = {"type": "event_callback", "team_id": TEAM, "event_id": "EvNEARCAP", "pad": pad}
    near["event"] = {"type": "reaction_added", "user": "U4002", "event_ts": "1.0"}
    body = json.dumps(near).encode()
    assert len(body) <= BODY_CAP
    assert app.sender.raw(body, json_ct).status == 200
    assert app.store.event_by_key("slack", "EvNEARCAP") is None


def oversized_status(app: Wakeful) -> int:
    """POST a body over BODY_CAP and read the status line the app answers with. The headers go
    first: an app that answers 413 on them may close before a client finishes writing the body,
    and reading after that would race a connection reset. Only if no answer comes on the headers
    alone is the body sent."""
    head = (
        f"POST /slack/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {BODY_CAP + 1}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", app.port), timeout=2) as sock:
        sock.sendall(head)
        try:
            answer = sock.recv(4096)
        except TimeoutError:
            sock.settimeout(10)
            with suppress(OSError):
                sock.sendall(b"x" * (BODY_CAP + 1))
            answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 "), answer[:200]
    return int(answer.split()[1])


def test_health_method_and_url_verification(app: Wakeful) -> None:
    status, body, headers = http_request(app, "GET", "/healthz")
    assert status == 200
    assert headers.get("content-type", "").startswith("application/json")
    assert json.loads(body)["ok"] is True

    for method in ("GET", "PUT", "DELETE"):
        status, _, _ = http_request(app, method, "/slack/events")
        assert status == 405, f"{method} /slack/events -> {status}"

    challenge = f"challenge-{uuid.uuid4().hex}"
    reply = app.sender.url_verification(challenge)
    assert reply.status == 200
    assert challenge in reply.body
    assert json.loads(reply.body) == {"challenge": challenge}


# -- 5. the store cannot take the write --------------------------------------------------------


def test_a_locked_store_answers_503_and_the_retry_is_stored_once(app: Wakeful) -> None:
    """Fault chosen: a second SQLite connection holds the write lock (BEGIN IMMEDIATE) longer
    than the app's 5 s busy timeout. The test runs as root, so making the file or directory
    read-only would not stop the app's writes; the lock is the honest, portable fault."""
    user = "U5001"
    ts = app.sender.next_ts()
    blocker = sqlite3.connect(app.db, timeout=10, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        started = time.monotonic()
        refused = app.sender.message(user, "anyone?", ts=ts)
        waited = time.monotonic() - started
    finally:
        if blocker.in_transaction:
            blocker.execute("ROLLBACK")
        blocker.close()
    assert refused.status == 503, f"{refused.status} {refused.body}\n{app.tail()}"
    assert waited < 9, f"the 503 took {waited:.1f} s"
    assert app.store.event_by_key("slack", str(refused.event_id)) is None
    assert app.store.events(inbox(user)) == []

    retried = app.sender.message(
        user, "anyone?", ts=ts, event_id=refused.event_id, retry_num=1, retry_reason="http_error"
    )
    assert retried.status == 200, retried.body
    events = app.store.events(inbox(user))
    assert [e.source_id for e in events] == [refused.event_id]
    app.wait_post(dm(user), "Handled 1 message.")


# -- 6. a burst is one run -----------------------------------------------------------------------


def wait_idle(app: Wakeful) -> None:
    """Nothing open in the store, then longer than the worker's batch window: the worker sits in
    its idle wait, so the next message starts a fresh window. (A window already running for
    another inbox can end mid-burst: the next test shows that case.)"""

    def idle() -> bool:
        open_events = count_events(app.store, "pending") + count_events(app.store, "running")
        unsent = app.store.outbox("pending") + app.store.outbox("sending")
        return open_events == 0 and not unsent

    assert eventually(idle, 15), f"the app never went idle:\n{app.tail()}"
    time.sleep(BATCH_WINDOW + 0.2)


def test_three_quick_messages_get_one_reply(burst_app: Wakeful) -> None:
    app, user, channel = burst_app, "U6001", "D6001"
    wait_idle(app)
    for text in ("hi", "I have a question", "about my order"):
        assert app.sender.message(user, text).status == 200
    app.wait_post(channel, "Handled 3 messages.")
    settle(app, inbox(user))
    assert [m["text"] for m in app.posts(channel)] == ["Handled 3 messages."]
    rows = app.store.outbox(inbox=inbox(user))
    assert [(r.text, r.priority) for r in rows] == [("Handled 3 messages.", "urgent")]
    assert {e.status for e in app.store.events(inbox(user))} == {"done"}


def test_three_quick_messages_get_one_reply_while_another_user_is_answered(
    burst_app: Wakeful,
) -> None:
    """The batch window belongs to the burst, not to whatever woke the worker: another user's
    message just before must not cut this user's three quick messages into two runs."""
    app, user, channel = burst_app, "U6002", "D6002"
    wait_idle(app)
    app.sender.message("U6003", "hello from someone else")
    time.sleep(BATCH_WINDOW - 0.05)
    for text in ("hi", "one more thing", "and another"):
        assert app.sender.message(user, text).status == 200
        time.sleep(0.03)
    app.wait_post("D6003", "Handled 1 message.")
    app.wait_post(channel, "Handled")
    settle(app, inbox(user), inbox("U6003"))
    assert [m["text"] for m in app.posts(channel)] == ["Handled 3 messages."]


# -- 7. approvals --------------------------------------------------------------------------------


def test_refund_prompt_then_approve(core_app: Wakeful) -> None:
    app = core_app
    user, channel = "U7001", "D7001"
    app.sender.message(user, "please refund order 77")
    prompt_ts, rid = wait_prompt(app, channel, "77")
    prompt = message_at(app, channel, prompt_ts)
    actions = next(b for b in prompt["blocks"] if b["type"] == "actions")
    assert {(e["action_id"], e["value"]) for e in actions["elements"]} == {
        ("approve", rid),
        ("deny", rid),
    }
    state = app.store.approval(rid)
    assert state is not None and state.requester == user and state.answer is None
    assert refund_calls(app, rid) == []

    click = app.sender.block_action(user, "approve", rid, channel=channel, message_ts=prompt_ts)
    assert click.status == 200, click.body
    app.wait_post(channel, "Refunded order 77.")
    ok = app.emu.wait_for(
        lambda e: f"Approved by <@{user}>" in json.dumps(message_at(app, channel, prompt_ts)), 10
    )
    assert ok, f"prompt not rewritten: {message_at(app, channel, prompt_ts)}"
    updates = [c for c in app.emu.calls("chat.update") if c.params.get("ts") == prompt_ts]
    assert updates and updates[-1].params["channel"] == channel
    rewritten = message_at(app, channel, prompt_ts)
    assert not any(b.get("type") == "actions" for b in rewritten.get("blocks") or [])
    settle(app, inbox(user))
    assert len(app.posts(channel, "Refunded order 77.")) == 1
    calls = refund_calls(app, rid)
    assert len(calls) == 1
    assert calls[0].args["order_id"] == "77" and calls[0].result["refunded"] is True
    answered = app.store.approval(rid)
    assert answered is not None and (answered.answer, answered.answered_by) == ("yes", user)


def test_a_click_from_an_org_wide_install_with_team_null_is_answered(app: Wakeful) -> None:
    # Enterprise Grid org-wide installs send interactions with "team": null; the clicker's
    # team is in user.team_id. The click must count, not be refused as malformed.
    user, channel = "U7010", "D7010"
    app.sender.message(user, "refund order 710")
    prompt_ts, rid = wait_prompt(app, channel, "710")
    click = app.sender.block_action(
        user, "deny", rid, channel=channel, message_ts=prompt_ts, org_install=True
    )
    assert click.status == 200, click.body
    app.wait_post(channel, "Refund for order 710 denied; nothing was done.")
    answered = app.store.approval(rid)
    assert answered is not None and (answered.answer, answered.answered_by) == ("no", user)


def test_refund_denied(app: Wakeful) -> None:
    user, channel = "U7002", "D7002"
    app.sender.message(user, "refund order 78")
    prompt_ts, rid = wait_prompt(app, channel, "78")
    click = app.sender.block_action(user, "deny", rid, channel=channel, message_ts=prompt_ts)
    assert click.status == 200
    app.wait_post(channel, "Refund for order 78 denied; nothing was done.")
    ok = app.emu.wait_for(
        lambda e: f"Denied by <@{user}>" in json.dumps(message_at(app, channel, prompt_ts)), 10
    )
    assert ok, message_at(app, channel, prompt_ts)
    assert refund_calls(app, rid) == []
    assert app.posts(channel, "Refunded") == []


def test_refund_request_expires(app: Wakeful) -> None:
    user, channel = "U7003", "D7003"
    app.sender.message(user, "refund order 79")
    prompt_ts, rid = wait_prompt(app, channel, "79")
    app.wait_post(
        channel, "Refund request for order 79 expired; nothing was done.", APPROVAL_TTL + 10
    )
    ok = app.emu.wait_for(
        lambda e: "Expired" in json.dumps(message_at(app, channel, prompt_ts)), 10
    )
    assert ok, message_at(app, channel, prompt_ts)
    state = app.store.approval(rid)
    assert state is not None and state.answer == "expired"
    assert refund_calls(app, rid) == []
    # A tap after the expiry changes nothing.
    late = app.sender.block_action(user, "approve", rid, channel=channel, message_ts=prompt_ts)
    assert late.status == 200
    assert app.emu.wait_for(lambda e: bool(e.ephemerals(channel=channel, user=user)), 10)
    assert refund_calls(app, rid) == []
    assert app.posts(channel, "Refunded") == []


def test_a_click_by_someone_else_is_refused(app: Wakeful) -> None:
    user, other, channel = "U7004", "U7999", "D7004"
    app.sender.message(user, "refund order 80")
    prompt_ts, rid = wait_prompt(app, channel, "80")
    click = app.sender.block_action(other, "approve", rid, channel=channel, message_ts=prompt_ts)
    assert click.status == 200
    ok = app.emu.wait_for(
        lambda e: any(
            "not yours to answer" in str(x["text"]) for x in e.ephemerals(channel, other)
        ),
        10,
    )
    assert ok, f"no ephemeral refusal for {other}: {app.emu.ephemerals()}"
    state = app.store.approval(rid)
    assert state is not None and state.answer is None
    assert app.store.event_by_key("approval", rid) is None
    assert refund_calls(app, rid) == []
    assert app.emu.ephemerals(channel, user) == []
    # The requester may still answer.
    app.sender.block_action(user, "deny", rid, channel=channel, message_ts=prompt_ts)
    app.wait_post(channel, "Refund for order 80 denied; nothing was done.")
    assert app.posts(channel, "Refunded") == []


def test_a_second_tap_changes_nothing(app: Wakeful) -> None:
    user, channel = "U7005", "D7005"
    app.sender.message(user, "refund order 81")
    prompt_ts, rid = wait_prompt(app, channel, "81")
    app.sender.block_action(user, "approve", rid, channel=channel, message_ts=prompt_ts)
    app.wait_post(channel, "Refunded order 81.")
    events_before = len(app.store.events(inbox(user)))
    again = app.sender.block_action(user, "deny", rid, channel=channel, message_ts=prompt_ts)
    assert again.status == 200
    ok = app.emu.wait_for(lambda e: bool(e.ephemerals(channel, user)), 10)
    assert ok, "the second tap got no ephemeral"
    note = app.emu.ephemerals(channel, user)[-1]["text"]
    assert f"Approved by <@{user}>" in note, note
    settle(app, inbox(user))
    assert len(app.store.events(inbox(user))) == events_before
    assert app.posts(channel, "denied") == []
    assert len(app.posts(channel, "Refunded order 81.")) == 1
    assert len(refund_calls(app, rid)) == 1
    state = app.store.approval(rid)
    assert state is not None and state.answer == "yes"


def test_a_click_with_an_unknown_request_id_stores_nothing(app: Wakeful) -> None:
    user, channel = "U7006", "D7006"
    app.sender.message(user, "refund order 83")
    prompt_ts, rid = wait_prompt(app, channel, "83")
    events_before = len(app.store.events(inbox(user)))
    tampered = [rid + "x", "refund-999999-0", "x" * 300, ""]
    for value in tampered:
        reply = app.sender.block_action(
            user, "approve", value, channel=channel, message_ts=prompt_ts
        )
        assert reply.status == 200, f"{value[:20]!r}: {reply.status} {reply.body}"
        if value:
            assert app.store.event_by_key("approval", value) is None
    assert app.store.approval(rid) is not None
    assert app.store.approval(rid).answer is None  # type: ignore[union-attr]
    assert len(app.store.events(inbox(user))) == events_before
    assert refund_calls(app, rid) == []
    assert all(r.key not in tampered for r in app.store.recorded_steps())
    app.sender.block_action(user, "deny", rid, channel=channel, message_ts=prompt_ts)
    app.wait_post(channel, "Refund for order 83 denied")
    assert app.posts(channel, "Refunded") == []


def test_a_configured_approver_may_answer(app: Wakeful) -> None:
    user, channel = "U7007", "D7007"
    app.sender.message(user, "refund order 82")
    prompt_ts, rid = wait_prompt(app, channel, "82")
    click = app.sender.block_action(APPROVER, "approve", rid, channel=channel, message_ts=prompt_ts)
    assert click.status == 200
    app.wait_post(channel, "Refunded order 82.")
    ok = app.emu.wait_for(
        lambda e: f"Approved by <@{APPROVER}>" in json.dumps(message_at(app, channel, prompt_ts)),
        10,
    )
    assert ok, message_at(app, channel, prompt_ts)
    assert app.emu.ephemerals(channel, APPROVER) == []
    assert len(refund_calls(app, rid)) == 1


# -- 8. reminders, digests, status -----------------------------------------------------------


def test_reminder(app: Wakeful) -> None:
    user, channel = "U8001", "D8001"
    app.sender.message(user, "remind me in 1 seconds to stretch")
    app.wait_post(channel, "I'll remind you in 1 seconds: stretch")
    app.wait_post(channel, "Reminder: stretch", timeout=8)


def test_digest_every_and_off(app: Wakeful) -> None:
    user, channel = "U8002", "D8002"
    app.sender.message(user, "digest every 1 seconds")
    app.wait_post(channel, "Digest set: every 1 seconds.")
    app.wait_post(channel, "Digest since", timeout=10)
    digest = app.posts(channel, "Digest since")[0]["text"]
    assert "- messages handled: 1" in digest, digest
    rows = [r for r in app.store.outbox(inbox=inbox(user)) if "Digest since" in r.text]
    assert rows and {r.priority for r in rows} == {"normal"}

    app.sender.message(user, "digest off")
    app.wait_post(channel, "Digest off.")

    def settled() -> bool:
        no_timer = not any(t.id.endswith("/digest") for t in app.store.timers(inbox(user)))
        idle = not app.store.events(inbox(user), "open")
        drained = all(r.status == "sent" for r in app.store.outbox(inbox=inbox(user)))
        return no_timer and idle and drained

    assert eventually(settled, 10), "the digest timer survived `digest off`"
    seen = len(app.posts(channel, "Digest since"))
    settle(app, inbox(user))
    assert len(app.posts(channel, "Digest since")) == seen


def test_status(app: Wakeful) -> None:
    user, channel = "U8003", "D8003"
    app.sender.message(user, "refund order 84, and digest every 1 hours")
    prompt_ts, rid = wait_prompt(app, channel, "84")
    app.wait_post(channel, "Digest set: every 1 hours.")
    app.sender.message(user, "status")
    app.wait_post(channel, "Status:")
    status = app.posts(channel, "Status:")[0]["text"]
    assert "Status: 0 pending events, 0 dead" in status, status
    assert f"Open approvals: {rid} (refund_order 84, expires " in status, status
    assert re.search(r"Next digest: \d{4}-\d\d-\d\d \d\d:\d\d UTC", status), status

    app.sender.block_action(user, "deny", rid, channel=channel, message_ts=prompt_ts)
    app.sender.message(user, "digest off")
    app.wait_post(channel, "Refund for order 84 denied")
    app.wait_post(channel, "Digest off.")
    app.sender.message(user, "status")
    app.wait_post(channel, "Status:", count=2)
    status = app.posts(channel, "Status:")[1]["text"]
    assert "Open approvals: none" in status, status
    assert "Next digest: none scheduled" in status, status


# -- 9. outbound -------------------------------------------------------------------------------


def test_every_post_carries_its_dispatch_id(app: Wakeful) -> None:
    user, channel = "U9001", "D9001"
    app.sender.message(user, "hello")
    app.wait_post(channel, "Handled 1 message.")
    posts = app.emu.calls("chat.postMessage")
    assert posts
    for call in posts:
        meta = json_field(call.params.get("metadata"))
        assert meta and meta.get("event_type") == "wakeful_dispatch", call.params
        assert meta["event_payload"].get("dispatch_id"), call.params
    mine = [c for c in posts if c.params.get("channel") == channel and c.response.get("ok")]
    rows = app.store.outbox(inbox=inbox(user))
    assert len(mine) == 1 and len(rows) == 1
    meta = json_field(mine[0].params["metadata"])
    assert meta["event_payload"]["dispatch_id"] == rows[0].dispatch_id


def test_a_rate_limited_post_is_delivered_after_retry_after(app: Wakeful) -> None:
    user, channel = "U9002", "D9002"
    app.emu.fault("chat.postMessage", status=429, retry_after=1)
    # Send at a fixed phase of the wall-clock second, so that (after the batch window) the 429
    # lands late in a second: a clock that rounds down must not shorten the wait then.
    time.sleep((0.7 - QUICK_WINDOW - time.time() % 1.0) % 1.0)  # the 429 at .7 of a second
    app.sender.message(user, "are we rate limited?")
    ok = app.emu.wait_for(
        lambda e: any(c.status == 429 for c in e.calls("chat.postMessage")), timeout=10
    )
    assert ok, "the fault was never hit"
    limited = next(c for c in app.emu.calls("chat.postMessage") if c.status == 429)
    assert limited.params["channel"] == channel

    def delivered() -> list[Any]:
        return [
            c
            for c in app.emu.calls("chat.postMessage")
            if c.params.get("channel") == channel and c.response.get("ok")
        ]

    # Other traffic keeps waking the dispatcher meanwhile, as it would in production, until
    # the post is delivered (longer than the Retry-After).
    for i in range(18):
        if delivered():
            break
        app.sender.message("U9003", f"busy {i}")
        time.sleep(0.15)
    app.wait_post(channel, "Handled 1 message.", timeout=10)
    assert len(delivered()) == 1
    waited = delivered()[0].at - limited.at
    assert waited >= 0.95, f"re-posted {waited:.2f} s after a 429 with Retry-After: 1"
    settle(app, inbox(user))
    assert len(app.posts(channel)) == 1


def test_a_permanent_failure_is_parked_and_requeued(app: Wakeful, tmp_path: Path) -> None:
    user, channel = "U9004", "D9004"
    app.emu.remove_channel(channel)
    app.sender.message(user, "is anyone home?")

    def failed_rows() -> list[Any]:
        return [r for r in app.store.dead_letters().outbox if r.channel == channel]

    assert eventually(failed_rows, 10), f"no failed outbox row:\n{app.tail()}"
    row = failed_rows()[0]
    assert row.status == "failed" and "channel_not_found" in str(row.error)
    assert app.posts(channel) == []

    env = child_env()
    listed = subprocess.run(
        wakeful_cmd("dead-letters", "--db", app.db),
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert listed.returncode == 0, listed.stderr
    line = next((ln for ln in listed.stdout.splitlines() if f"outbox {row.id} " in ln), "")
    assert f"channel {channel}" in line and "channel_not_found" in line, listed.stdout

    app.emu.add_channel(channel)
    requeued = subprocess.run(
        wakeful_cmd("requeue", "--db", app.db, "outbox", str(row.id)),
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert requeued.returncode == 0, requeued.stderr
    assert f"requeued outbox {row.id}" in requeued.stdout
    app.wait_post(channel, "Handled 1 message.", timeout=10)
    assert not failed_rows()
    again = subprocess.run(
        wakeful_cmd("requeue", "--db", app.db, "outbox", str(row.id)),
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert again.returncode == 1 and f"with id {row.id}" in again.stderr


def test_posts_to_one_channel_are_a_second_apart(app: Wakeful) -> None:
    user, channel = "U9005", "D9005"
    # One run yields two posts to this DM (the reply and the prompt): the sender must pace them.
    app.sender.message(user, "refund order 90, and remind me in 10 minutes to check")
    wait_prompt(app, channel, "90")
    app.wait_post(channel, "Handled 1 message.\nI'll remind you in 10 minutes: check")
    assert len(app.posts(channel)) == 2
    by_channel: dict[str, list[float]] = {}
    for call in app.emu.calls("chat.postMessage"):
        if call.response.get("ok"):
            by_channel.setdefault(str(call.params.get("channel")), []).append(call.at)
    assert len(by_channel.get(channel, [])) == 2
    for ch, times in by_channel.items():
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert all(g >= 0.95 for g in gaps), f"{ch}: posts {[round(g, 3) for g in gaps]} s apart"


# -- 10. configuration --------------------------------------------------------------------------


def test_bad_configuration_stops_start_up_with_one_line(tmp_path: Path) -> None:
    with SlackEmulator(bot_token=TOKEN) as emu:
        good = {
            "SLACK_BOT_TOKEN": TOKEN,
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_API_URL": emu.api_url,
            "WAKEFUL_HOST": "127.0.0.1",
            "WAKEFUL_PORT": "0",
        }
        cases: dict[str, tuple[dict[str, str | None], str]] = {
            "no token": ({"SLACK_BOT_TOKEN": None}, "SLACK_BOT_TOKEN"),
            "no secret": ({"SLACK_SIGNING_SECRET": None}, "SLACK_SIGNING_SECRET"),
            "port not a number": ({"WAKEFUL_PORT": "eighty"}, "WAKEFUL_PORT"),
            "gap not a duration": ({"WAKEFUL_OUTBOX_GAP": "1 hour"}, "WAKEFUL_OUTBOX_GAP"),
            "approvers": ({"WAKEFUL_APPROVERS": "U0OK,alice"}, "WAKEFUL_APPROVERS"),
            "agent": ({"WAKEFUL_AGENT": "skynet"}, "WAKEFUL_AGENT"),
            "api url": ({"SLACK_API_URL": "not a url"}, "SLACK_API_URL"),
            "rejected token": ({"SLACK_BOT_TOKEN": "xoxb-wrong"}, "invalid_auth"),
        }
        procs: dict[str, tuple[subprocess.Popen[str], float, Path]] = {}
        for n, (name, (change, _)) in enumerate(cases.items()):
            settings = {**good, "WAKEFUL_DB": str(tmp_path / f"case-{n}.db")}
            for key, value in change.items():
                if value is None:
                    settings.pop(key)
                else:
                    settings[key] = value
            procs[name] = (
                subprocess.Popen(
                    wakeful_cmd("serve"),
                    env=child_env(**settings),
                    cwd=tmp_path,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                ),
                time.monotonic(),
                tmp_path / f"case-{n}.db",
            )
        failures: list[str] = []
        for name, (proc, started, db) in procs.items():
            try:
                out, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
                failures.append(f"{name}: still running after 30 s (stdout {out!r})")
                continue
            took = time.monotonic() - started
            lines = [ln for ln in err.splitlines() if ln.strip()]
            needle = cases[name][1]
            if proc.returncode == 0:
                failures.append(f"{name}: exited 0")
            if len(lines) != 1 or needle not in lines[0]:
                failures.append(f"{name}: stderr should be one line naming {needle}: {lines}")
            if "listening" in out:
                failures.append(f"{name}: listened before failing: {out!r}")
            if took > 20:
                failures.append(f"{name}: took {took:.1f} s to fail")
            if needle != "invalid_auth" and db.exists():
                failures.append(f"{name}: wrote the store before checking its settings")
        assert not failures, "\n".join(failures)


# -- 11. loops in their own processes ----------------------------------------------------------


def test_serve_without_loops_and_three_loop_processes(tmp_path: Path) -> None:
    db = str(tmp_path / "shared.db")
    user, channel = "U1101", "D1101"
    with SlackEmulator(bot_token=TOKEN, bot_user_id=BOT_USER, team_id=TEAM) as emu:
        app = launch(tmp_path, emu, db, QUICK_SETTINGS, args=("serve", "--no-loops"))
        loops: list[Proc] = []
        try:
            env = child_env(
                SLACK_BOT_TOKEN=TOKEN,
                SLACK_API_URL=emu.api_url,
                WAKEFUL_DB=db,
                **QUICK_SETTINGS,
            )
            for role in ("worker", "scheduler", "dispatcher"):
                loops.append(
                    Proc(wakeful_cmd(role, "--poll", "0.2"), env, tmp_path, tmp_path / role)
                )
            for role, proc in zip(("worker", "scheduler", "dispatcher"), loops, strict=True):
                assert proc.next_line() == f"wakeful: {role} running on {db}"

            reply = app.sender.message(user, "remind me in 1 seconds to hydrate")
            assert reply.status == 200
            assert app.store.event_by_key("slack", str(reply.event_id)) is not None
            app.wait_post(channel, "Handled 1 message.", timeout=10)
            app.wait_post(channel, "Reminder: hydrate", timeout=10)
            settle(app, inbox(user))
            assert [m["text"] for m in app.posts(channel)] == [
                "Handled 1 message.\nI'll remind you in 1 seconds: hydrate",
                "Reminder: hydrate",
            ]
        finally:
            codes = {p.args[3]: p.stop() for p in loops}
            shut_down(app)
        assert codes == {"worker": 0, "scheduler": 0, "dispatcher": 0}, {
            p.args[3]: p.tail() for p in loops
        }
