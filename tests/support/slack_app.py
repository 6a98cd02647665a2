"""`wakeful serve` and its loops as Slack meets them, for the acceptance tests: the real command
as a subprocess on a real port (forked from a zygote, tests/support/forked_cli.py), Slack's side
played by the local emulator (Web API in, recorded calls out) and by `EventSender` (signed
events and clicks), and the helpers that read what came out (the emulator's calls, the store).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conftest import need_pg
from tests.support.forked_cli import popen_lines
from wakeful.core.errors import StoreUnavailable
from wakeful.core.records import StepRecord
from wakeful.core.store import Store, open_store
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
        store = reading_store(db)
    except BaseException:
        proc.stop()
        raise
    sender = EventSender(url, SECRET, team_id=TEAM, bot_user_id=emu.bot_user_id)
    return Wakeful(proc, url, db, emu, sender, store, backend)


def reading_store(db: str, patience: float = 15.0) -> Store:
    """The test's own store on the app's `db`, to read what it wrote: on PostgreSQL two
    connections at most, and a server momentarily at its connection limit (the suite's
    processes share one) waited for, as `wakeful serve` waits at start-up."""
    if "://" not in db:
        return open_store(db)
    deadline = time.monotonic() + patience
    while True:
        try:
            return open_store(db, pool_size=2)
        except StoreUnavailable:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.5)


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
