"""The hostile-input tests' server, requests and checks (tests/acceptance/hostile/): the real
HTTP front (`SlackFront` over a SQLite file, served by the product's own waitress server), what
the tests send it over real HTTP with `http.client`, and the store's tables before and after.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.client
import json
import logging
import socket
import sqlite3
import time
import urllib.parse
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.approvals import ApprovalRequest
from wakeful.bot.front import payloads
from wakeful.bot.front.listeners import Listeners
from wakeful.bot.front.wsgi import EVENTS_PATH, SlackFront
from wakeful.bot.process.runtime import http_server, serve_in_thread
from wakeful.bot.slack import blocks
from wakeful.core.effects import Effects
from wakeful.core.records import StoredEvent
from wakeful.core.store import Store, open_store

SECRET = "hostile-input-signing-secret"
TEAM = "T0HX"
BOT_USER, BOT_ID = "UBOT", "BBOT"
DM_USER, DM_CHANNEL = "U0DM", "D0DM"
OWNER, APPROVER, INTRUDER = "U0OWNER", "U0APPROVER", "U0INTRUDER"
STANDING = "hx-standing-approval"
"""An unanswered approval of OWNER's that lives for the whole module: any forged or mutated click
that answers it breaks a rule."""
CLIENT_TIMEOUT = 5.0
JSON_CT = "application/json"
FORM_CT = "application/x-www-form-urlencoded"


# -- the server ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Live:
    store: Store
    port: int
    db: Path


@contextlib.contextmanager
def start_live(tmp: Path) -> Iterator[Live]:
    """The front on a new store under `tmp`, with the standing approval; stopped after."""
    # Unhandled-request warnings and listener tracebacks would flood a failing fuzz test's
    # report; every assertion below carries the status and the start of the answer instead.
    quiet = {name: logging.getLogger(name).level for name in ("wakeful.bolt", "waitress")}
    for name in quiet:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    db = tmp / "hostile.db"
    store = open_store(db)
    front = SlackFront(Listeners(store, SECRET, bot_user_id=BOT_USER, bot_id=BOT_ID))
    server = http_server(front, "127.0.0.1", 0)
    stop = serve_in_thread(server)
    try:
        make_approval(store, STANDING, OWNER, (APPROVER,))
        yield Live(store=store, port=int(server.effective_port), db=db)
    finally:
        stop()
        store.close()
        for name, level in quiet.items():
            logging.getLogger(name).setLevel(level)


def make_approval(store: Store, request_id: str, requester: str, approvers: Sequence[str]) -> None:
    """An unanswered approval, written the way a run writes it (ingest, claim, finish)."""
    now = int(time.time())
    inbox = f"{TEAM}:{requester}"
    store.ingest(inbox, "hx-setup", f"setup:{request_id}", {"setup": request_id}, now)
    claim = store.acquire_and_claim(inbox, f"hx-setup-{request_id}", now)
    assert claim is not None and claim.events, "setup: could not claim the setup event"
    request = ApprovalRequest(
        id=request_id,
        tool="refund",
        args={"order": "42", "amount": 10},
        requester=requester,
        deadline=now + 3600,
        approvers=tuple(approvers),
    )
    assert store.finish(claim, Effects(approvals=[request]), now, release=True)
    state = store.approval(request_id)
    assert state is not None and state.answer is None


# -- HTTP ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes

    def __str__(self) -> str:
        return f"HTTP {self.status} {self.body[:160]!r}"


Headers = Sequence[tuple[str, str]]


def send(
    live: Live,
    body: bytes = b"",
    headers: Headers = (),
    *,
    method: str = "POST",
    path: str = EVENTS_PATH,
    content_length: bool = True,
) -> Answer:
    """One request on a fresh connection. No answer within CLIENT_TIMEOUT, or a connection
    dropped before the answer, fails the test."""
    conn = http.client.HTTPConnection("127.0.0.1", live.port, timeout=CLIENT_TIMEOUT)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for name, value in headers:
            conn.putheader(name, value)
        if content_length:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body or None)
        response = conn.getresponse()
        return Answer(response.status, response.read())
    except (OSError, http.client.HTTPException) as exc:
        raise AssertionError(f"{method} {path}: no HTTP answer ({exc!r})") from exc
    finally:
        conn.close()


def raw_exchange(live: Live, data: bytes) -> bytes:
    """Send raw bytes, then read until the server closes (Connection: close on errors)."""
    with socket.create_connection(("127.0.0.1", live.port), timeout=CLIENT_TIMEOUT) as sock:
        sock.sendall(data)
        return read_until_closed(sock)


def read_until_closed(sock: socket.socket) -> bytes:
    chunks: list[bytes] = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except TimeoutError as exc:
        raise AssertionError(
            f"the server neither answered nor closed in {CLIENT_TIMEOUT} s"
        ) from exc
    return b"".join(chunks)


def status_of(raw: bytes) -> int | None:
    """The status code of a raw HTTP answer, or None when the server closed without one."""
    if not raw:
        return None
    line = raw.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split(" ")
    assert len(parts) >= 2 and parts[0].startswith("HTTP/"), f"not an HTTP answer: {raw[:80]!r}"
    return int(parts[1])


def sign(body: bytes, timestamp: str | int, secret: str = SECRET) -> str:
    """Slack's v0 signature: HMAC-SHA256 of `v0:<timestamp>:<body>`, hex, `v0=` prefix."""
    base = b"v0:" + str(timestamp).encode("utf-8") + b":" + body
    return "v0=" + hmac.new(secret.encode("utf-8"), base, hashlib.sha256).hexdigest()


def signed(
    body: bytes,
    content_type: str | None = JSON_CT,
    *,
    timestamp: int | None = None,
    secret: str = SECRET,
) -> list[tuple[str, str]]:
    ts = int(time.time()) if timestamp is None else timestamp
    headers = [
        ("X-Slack-Request-Timestamp", str(ts)),
        ("X-Slack-Signature", sign(body, ts, secret)),
    ]
    if content_type is not None:
        headers.append(("Content-Type", content_type))
    return headers


# -- Slack bodies --------------------------------------------------------------------------


def fresh_id() -> str:
    return "Ev" + uuid.uuid4().hex[:16].upper()


def message_event(
    text: str = "hello", user: str = DM_USER, channel: str = DM_CHANNEL
) -> dict[str, Any]:
    return {
        "type": "message",
        "user": user,
        "text": text,
        "ts": "1700000000.000100",
        "channel": channel,
        "channel_type": "im",
        "event_ts": "1700000000.000100",
        "team": TEAM,
    }


def mention_event(text: str = "<@UBOT> hi", user: str = DM_USER) -> dict[str, Any]:
    return {
        "type": "app_mention",
        "user": user,
        "text": text,
        "ts": "1700000000.000200",
        "channel": "C0HX",
        "event_ts": "1700000000.000200",
        "team": TEAM,
    }


def envelope(event: dict[str, Any], event_id: str | None = None) -> dict[str, Any]:
    return {
        "token": "verification-token",
        "team_id": TEAM,
        "api_app_id": "A0HX",
        "event": event,
        "type": "event_callback",
        "event_id": event_id or fresh_id(),
        "event_time": 1700000000,
        "authorizations": [
            {
                "enterprise_id": None,
                "team_id": TEAM,
                "user_id": BOT_USER,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
        "is_ext_shared_channel": False,
    }


def click(user: str, value: str, action: str = blocks.APPROVE) -> dict[str, Any]:
    return {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower(), "team_id": TEAM},
        "api_app_id": "A0HX",
        "token": "verification-token",
        "container": {
            "type": "message",
            "message_ts": "1700000000.000300",
            "channel_id": DM_CHANNEL,
            "is_ephemeral": False,
        },
        "trigger_id": "1.2.3",
        "team": {"id": TEAM, "domain": "hx"},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": DM_CHANNEL, "name": "hx"},
        "message": {"type": "message", "ts": "1700000000.000300"},
        "state": {"values": {}},
        "actions": [
            {
                "action_id": action,
                "block_id": "actions",
                "value": value,
                "type": "button",
                "action_ts": "1700000000.000400",
            }
        ],
    }


def as_json(doc: Any) -> bytes:
    return json.dumps(doc).encode("utf-8")


def as_form(payload: Any) -> bytes:
    return urllib.parse.urlencode({"payload": json.dumps(payload)}).encode("ascii")


# -- the store -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    events: int
    outbox: int
    steps: int
    approvals: int
    answered: int
    timers: int
    sessions: int
    last_event: int
    last_outbox: int


def snapshot(live: Live) -> Snapshot:
    """Counts read with SQL from a read-only connection: a few hundred requests into a module,
    reading every row back as records twice a request was most of a fuzz test's time."""
    uri = f"file:{live.db}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:

        def count(sql: str) -> int:
            return int(db.execute(sql).fetchone()[0])

        return Snapshot(
            events=count("SELECT count(*) FROM events"),
            outbox=count("SELECT count(*) FROM outbox"),
            steps=count("SELECT count(*) FROM steps"),
            approvals=count("SELECT count(*) FROM approvals"),
            answered=count("SELECT count(*) FROM approvals WHERE answer IS NOT NULL"),
            timers=count("SELECT count(*) FROM timers"),
            sessions=count("SELECT count(*) FROM sessions"),
            last_event=count("SELECT coalesce(max(id), 0) FROM events"),
            last_outbox=count("SELECT coalesce(max(id), 0) FROM outbox"),
        )


def new_events(live: Live, before: Snapshot) -> list[StoredEvent]:
    uri = f"file:{live.db}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
        ids = [
            int(r[0])
            for r in db.execute("SELECT id FROM events WHERE id > ?", (before.last_event,))
        ]
    found = [live.store.event(i) for i in ids]
    return [e for e in found if e is not None]


def assert_nothing_stored(live: Live, before: Snapshot, answer: Answer | str) -> None:
    after = snapshot(live)
    assert after == before, f"the store changed after {answer}:\n before {before}\n after  {after}"


def assert_only_ephemerals_for(live: Live, before: Snapshot, clicker: Any, answer: Answer) -> None:
    """A click that changes nothing may leave one thing: an ephemeral note to the clicker."""
    after = snapshot(live)
    unchanged = ("events", "steps", "approvals", "answered", "timers", "sessions")
    for name in unchanged:
        assert getattr(after, name) == getattr(before, name), (
            f"{name} changed after {answer}: {getattr(before, name)} -> {getattr(after, name)}"
        )
    rows = [r for r in live.store.outbox() if r.id > before.last_outbox]
    assert len(rows) <= 1, f"{len(rows)} outbox rows after one click ({answer})"
    for row in rows:
        assert row.kind == "ephemeral" and row.user == clicker, (
            f"a click wrote a {row.kind} row for {row.user!r} (clicker {clicker!r}): {row}"
        )


def assert_well_typed(event: StoredEvent, sent: dict[str, Any]) -> None:
    """What the front stores is what every agent is promised: strings where Slack sends them."""
    p = event.payload
    assert event.source == "slack" and event.source_id == sent.get("event_id"), event
    assert p["kind"] in ("message", "mention"), p
    for name in ("text", "channel", "user", "team"):
        assert isinstance(p[name], str), f"stored {name} is {type(p[name]).__name__}: {p}"
    for name in ("channel", "user", "team"):
        assert payloads.SLACK_ID.fullmatch(p[name]), f"stored {name} is no Slack id: {p}"
    for name in ("ts", "thread_ts", "channel_type"):
        assert p[name] is None or isinstance(p[name], str), (
            f"stored {name} is {type(p[name]).__name__}: {p}"
        )
    assert event.inbox == f"{p['team']}:{p['user']}", event
