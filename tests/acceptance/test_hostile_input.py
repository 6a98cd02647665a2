"""Hostile input against the real HTTP front: `SlackFront` over a SQLite file, served by the
product's own waitress server (`http_server`), spoken to over real HTTP with `http.client`.

The rules under test (bot/front/wsgi.py, bot/front/payloads.py, bot/front/signature.py):
- signature and timestamp are checked before anything is parsed: a forged, stale, truncated or
  duplicated signature is a 401, and nothing reaches the store;
- a correctly signed body that is not what Slack sends is a 400 (a non-UTF-8 body is a 401:
  slack_sdk decodes the body as UTF-8 to compute the signature), and stores nothing;
- a correctly signed body of a kind this app does not handle is a 200 that stores nothing;
- a correctly signed body naming a user, team, org or conversation by something that is not a
  Slack id (`[A-Z0-9]{1,32}`: a newline, an escape, a colon...) is a 400 that stores nothing
  and that no log line quotes (issue 34, item 6 a);
- a body over BODY_CAP is a 413; HTTP-level garbage is a 4xx (404, 405, 400);
- never a 5xx, never a hang (client timeout CLIENT_TIMEOUT), never a dropped connection.

"Stores nothing" is checked on every table the front could touch (events, approvals and their
answers, outbox, recorded steps, timers, sessions) before and after each request.

The fuzz tests count the requests they send; the total is printed at the end (run with -s).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import hmac
import http.client
import json
import logging
import math
import socket
import sqlite3
import time
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.support.approvals import ApprovalRequest
from wakeful.bot.front import payloads
from wakeful.bot.front.listeners import Listeners
from wakeful.bot.front.wsgi import BODY_CAP, EVENTS_PATH, SlackFront
from wakeful.bot.process.runtime import http_server, serve_in_thread
from wakeful.bot.slack import blocks
from wakeful.core.effects import Effects
from wakeful.core.records import StoredEvent
from wakeful.core.settings import MAX_PAYLOAD_BYTES
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

FUZZ: Counter[str] = Counter()
"""Requests sent by each fuzz test (shrinking included); printed at module teardown."""

FUZZ_SETTINGS = {
    "deadline": None,
    "database": None,
    "print_blob": False,
    "suppress_health_check": [
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
}


# -- the server ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Live:
    store: Store
    port: int
    db: Path


@pytest.fixture(scope="module", autouse=True)
def fuzz_report() -> Iterator[None]:
    yield
    total = sum(FUZZ.values())
    detail = ", ".join(f"{name}={n}" for name, n in sorted(FUZZ.items()))
    print(f"\nhostile-input fuzz cases run: {total} ({detail})")


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    # Unhandled-request warnings and listener tracebacks would flood a failing fuzz test's
    # report; every assertion below carries the status and the start of the answer instead.
    quiet = {name: logging.getLogger(name).level for name in ("wakeful.bolt", "waitress")}
    for name in quiet:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    db = tmp_path_factory.mktemp("hostile") / "hostile.db"
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


# -- signature and timestamp ---------------------------------------------------------------


@pytest.mark.parametrize("age", [301, 3600, -301], ids=["301s-old", "1h-old", "301s-ahead"])
def test_replay_outside_five_minutes_is_401(live: Live, age: int) -> None:
    body = as_json(envelope(message_event("replayed")))
    before = snapshot(live)
    answer = send(live, body, signed(body, timestamp=math.floor(time.time()) - age))
    assert answer.status == 401, answer
    assert_nothing_stored(live, before, answer)


def test_request_299_seconds_old_is_accepted(live: Live) -> None:
    doc = envelope(message_event("late but in time"))
    body = as_json(doc)
    before = snapshot(live)
    # ceil: the request is at most 299 s old when signed, so a slow loop cannot push it past 300.
    answer = send(live, body, signed(body, timestamp=math.ceil(time.time()) - 299))
    assert answer.status == 200, answer
    stored = live.store.event_by_key("slack", doc["event_id"])
    assert stored is not None and stored.payload["text"] == "late but in time"
    assert snapshot(live).events == before.events + 1


@pytest.mark.parametrize("digits", [20, 308, 309, 400, 4300, 4301])
def test_huge_timestamp_is_401(live: Live, digits: int) -> None:
    """A timestamp of hundreds of digits is still just a stale timestamp: 401, even when the
    signature over it is right (it is computed here with the real secret)."""
    body = as_json(envelope(message_event("far future")))
    ts = "9" * digits
    headers = [
        ("X-Slack-Request-Timestamp", ts),
        ("X-Slack-Signature", sign(body, ts)),
        ("Content-Type", JSON_CT),
    ]
    before = snapshot(live)
    answer = send(live, body, headers)
    assert answer.status == 401, answer
    assert_nothing_stored(live, before, answer)


def test_body_signed_with_another_secret_is_401(live: Live) -> None:
    body = as_json(envelope(message_event("forged")))
    before = snapshot(live)
    answer = send(live, body, signed(body, secret=SECRET + "-other"))
    assert answer.status == 401, answer
    assert_nothing_stored(live, before, answer)


def test_truncated_body_with_matching_content_length_is_401(live: Live) -> None:
    """The signature covers the whole body Slack signed; a prefix of it is not signed."""
    body = as_json(envelope(message_event("cut short")))
    headers = signed(body)
    before = snapshot(live)
    for cut in (len(body) // 2, len(body) - 1, 0):
        answer = send(live, body[:cut], headers)
        assert answer.status == 401, f"cut at {cut}: {answer}"
    assert_nothing_stored(live, before, "truncated bodies")


def test_content_length_larger_than_body_never_reaches_the_app(live: Live) -> None:
    """HTTP cannot tell a short body from a slow one, so the server waits for the rest; what it
    must do: never hand an incomplete body to the app, never tie up a worker thread while waiting
    (20 stalled requests > 16 threads, and a valid request is still served), and close the
    connection when the client gives up, with no 5xx and nothing stored."""
    doc = envelope(message_event("never complete"))
    body = as_json(doc)
    ts = int(time.time())
    head = (
        f"POST {EVENTS_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {JSON_CT}\r\n"
        f"X-Slack-Request-Timestamp: {ts}\r\nX-Slack-Signature: {sign(body, ts)}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    before = snapshot(live)
    with contextlib.ExitStack() as stack:
        stalled = []
        for _ in range(20):
            sock = stack.enter_context(
                socket.create_connection(("127.0.0.1", live.port), timeout=CLIENT_TIMEOUT)
            )
            sock.sendall(head + body[: len(body) // 2])
            stalled.append(sock)
        other = envelope(message_event("served meanwhile"))
        answer = send(live, as_json(other), signed(as_json(other)))
        assert answer.status == 200, f"a valid request while 20 bodies stall: {answer}"
        for sock in stalled:
            sock.shutdown(socket.SHUT_WR)
        for sock in stalled:
            status = status_of(read_until_closed(sock))
            assert status is None or 400 <= status < 500, f"short body answered {status}"
    assert live.store.event_by_key("slack", doc["event_id"]) is None
    assert live.store.event_by_key("slack", other["event_id"]) is not None
    after = snapshot(live)
    assert (after.events, after.outbox, after.answered) == (
        before.events + 1,
        before.outbox,
        before.answered,
    )


# -- size and depth ------------------------------------------------------------------------


def _nested_text(depth: int) -> bytes:
    doc = envelope(message_event("PLACEHOLDER"))
    return as_json(doc).replace(b'"PLACEHOLDER"', b"[" * depth + b"]" * depth)


@pytest.mark.parametrize(
    "make_body",
    [
        lambda: b"[" * 100_000,
        lambda: b"[" * 100_000 + b"]" * 100_000,
        lambda: b'{"type":"event_callback","a":' + b'{"a":' * 100_000 + b"1" + b"}" * 100_001,
        lambda: _nested_text(100_000),
        lambda: as_json(envelope(message_event("x"))).replace(b"1700000000,", b"1" * 5000 + b","),
    ],
    ids=[
        "100k-open-brackets",
        "100k-closed-brackets",
        "100k-objects",
        "100k-in-text",
        "5000-digit",
    ],
)
def test_deep_nesting_and_huge_numbers_are_400(live: Live, make_body: Any) -> None:
    body = make_body()
    before = snapshot(live)
    answer = send(live, body, signed(body))
    assert answer.status == 400, answer
    assert_nothing_stored(live, before, answer)
    health = send(live, method="GET", path="/healthz")
    assert health.status == 200 and json.loads(health.body)["ok"] is True, health


@pytest.mark.parametrize("where", ["event.text", "event.blocks", "envelope.extra"])
def test_nesting_near_the_recursion_limit_is_never_5xx(live: Live, where: str) -> None:
    """Depths just under Python's recursion limit pass the front's first parse; whatever
    happens after (Bolt parses again, the store serialises) must still be a 4xx or a 200."""
    failures = []
    for depth in [*range(900, 1002, 2), 2000]:
        doc = envelope(message_event("hi"))
        if where == "event.blocks":
            doc["event"]["blocks"] = "PLACEHOLDER"
        elif where == "envelope.extra":
            doc["extra"] = "PLACEHOLDER"
        else:
            doc["event"]["text"] = "PLACEHOLDER"
        body = as_json(doc).replace(b'"PLACEHOLDER"', b"[" * depth + b"]" * depth)
        before = snapshot(live)
        answer = send(live, body, signed(body))
        if answer.status not in (200, 400):
            failures.append(f"depth {depth}: {answer}")
        elif answer.status == 400:
            assert_nothing_stored(live, before, answer)
    assert not failures, f"nesting in {where}:\n" + "\n".join(failures)


def _body_of_size(size: int) -> tuple[dict[str, Any], bytes]:
    doc = envelope(message_event(""))
    base = len(as_json(doc))
    doc["event"]["text"] = "x" * (size - base)
    body = as_json(doc)
    assert len(body) == size
    return doc, body


def test_body_over_the_cap_is_413_on_its_headers(live: Live) -> None:
    """Content-Length over the cap is refused on the headers alone, before a byte of the body is
    read. The client sends only the headers and reads the answer: a client that pushes a whole
    over-cap body at once may see its connection reset before it reads the 413 (waitress closes
    without draining), which says nothing about the server's decision."""
    before = snapshot(live)
    for length in (BODY_CAP + 1, 10**12):
        ts = int(time.time())
        raw = raw_exchange(
            live,
            (
                f"POST {EVENTS_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {JSON_CT}\r\n"
                f"X-Slack-Request-Timestamp: {ts}\r\nX-Slack-Signature: {sign(b'', ts)}\r\n"
                f"Content-Length: {length}\r\n\r\n"
            ).encode(),
        )
        assert status_of(raw) == 413, f"Content-Length {length}: {raw[:120]!r}"
    assert_nothing_stored(live, before, "over-cap Content-Length")


def test_chunked_body_over_the_cap_is_413(live: Live) -> None:
    _, body = _body_of_size(BODY_CAP + 1)
    before = snapshot(live)
    conn = http.client.HTTPConnection("127.0.0.1", live.port, timeout=CLIENT_TIMEOUT)
    try:
        chunks = iter([body[i : i + 65536] for i in range(0, len(body), 65536)])
        conn.request(
            "POST", EVENTS_PATH, body=chunks, headers=dict(signed(body)), encode_chunked=True
        )
        response = conn.getresponse()
        answer = Answer(response.status, response.read())
    except (ConnectionResetError, BrokenPipeError) as exc:
        # The server answered 413 and closed while chunks were still coming: TCP then drops
        # the answer on the client's side (a reset discards what was not read). Refused all
        # the same; what matters is that nothing was stored.
        answer = Answer(413, repr(exc).encode())
    finally:
        conn.close()
    assert answer.status == 413, answer
    assert_nothing_stored(live, before, answer)


@pytest.mark.parametrize("size", [BODY_CAP, BODY_CAP - 1], ids=["exactly-BODY_CAP", "BODY_CAP-1"])
def test_body_at_the_cap_is_read_then_refused_by_the_payload_cap(live: Live, size: int) -> None:
    """BODY_CAP is "the largest request body accepted" (413 only above it). A valid event that
    large is read and verified, then refused with 400: the stored payload would exceed the
    store's MAX_PAYLOAD_BYTES (256 KiB), which the listener reports as InvalidInput."""
    _, body = _body_of_size(size)
    before = snapshot(live)
    answer = send(live, body, signed(body))
    assert answer.status == 400, answer
    assert b"cap" in answer.body, answer
    assert_nothing_stored(live, before, answer)


@pytest.mark.parametrize(
    ("text_bytes", "expected"),
    [(200_000, 200), (MAX_PAYLOAD_BYTES, 400)],
    ids=["200kB-stored", "payload-cap-refused"],
)
def test_large_event_under_the_body_cap(live: Live, text_bytes: int, expected: int) -> None:
    """Under BODY_CAP the answer is decided by the payload cap: a 200 kB message is stored
    verbatim (200); one whose payload exceeds MAX_PAYLOAD_BYTES is a 400 that stores nothing."""
    doc = envelope(message_event("é" * (text_bytes // 2)))
    body = as_json(doc)
    assert len(body) < BODY_CAP
    before = snapshot(live)
    answer = send(live, body, signed(body))
    assert answer.status == expected, answer
    stored = live.store.event_by_key("slack", doc["event_id"])
    if expected == 200:
        assert stored is not None and stored.payload["text"] == doc["event"]["text"]
    else:
        assert stored is None
        assert_nothing_stored(live, before, answer)


# -- form bodies and clicks ----------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b"payload=not-json",
        b"payload=%7B%22type%22%3A",
        b"payload=%5B1%2C2%5D",
        b"payload=%22block_actions%22",
        b"payload=null",
        b"payload=42",
        b"payload=%7B%7D",
        b"payload=%7B%22type%22%3A5%7D",
        b"payload=",
        b"payload=%FF%FE",
        b"foo=bar",
        b"",
        b"a&b",
        b"payload",
        b"ssl_check=1&token=x",
    ],
)
def test_form_with_broken_payload_is_400(live: Live, body: bytes) -> None:
    before = snapshot(live)
    answer = send(live, body, signed(body, FORM_CT))
    assert answer.status == 400, answer
    assert_nothing_stored(live, before, answer)


@pytest.mark.parametrize("action", [blocks.APPROVE, blocks.DENY])
def test_click_on_another_users_approval_changes_nothing(live: Live, action: str) -> None:
    request_id = f"hx-{uuid.uuid4().hex[:12]}"
    owner = f"U0OWN{uuid.uuid4().hex[:6].upper()}"
    make_approval(live.store, request_id, owner, (APPROVER,))
    before = snapshot(live)
    body = as_form(click(INTRUDER, request_id, action))
    answer = send(live, body, signed(body, FORM_CT))
    assert answer.status == 200, answer
    state = live.store.approval(request_id)
    assert state is not None and state.answer is None, state
    assert live.store.event_by_key("approval", request_id) is None
    assert_only_ephemerals_for(live, before, INTRUDER, answer)
    # Control: the same click by the owner does answer, so the refusal above was a refusal.
    body = as_form(click(owner, request_id, action))
    answer = send(live, body, signed(body, FORM_CT))
    assert answer.status == 200, answer
    state = live.store.approval(request_id)
    expected = "yes" if action == blocks.APPROVE else "no"
    assert state is not None and (state.answer, state.answered_by) == (expected, owner), state
    assert live.store.event_by_key("approval", request_id) is not None


ODD_VALUES = {
    "unknown": lambda rid: f"hx-unknown-{uuid.uuid4().hex[:8]}",
    "empty": lambda rid: "",
    "10000-chars": lambda rid: "x" * 10_000,
    "10000-chars-prefixed": lambda rid: rid + "x" * 10_000,
    "sql-drop": lambda rid: "Robert'); DROP TABLE approvals;--",
    "sql-or": lambda rid: rid + "' OR '1'='1",
    "sql-like-wildcard": lambda rid: "%",
    "nul-suffix": lambda rid: rid + "\x00",
    "space-suffix": lambda rid: rid + " ",
    "upper-case": lambda rid: rid.upper(),
    "lone-surrogate": lambda rid: "\ud800",
    "rid-plus-surrogate": lambda rid: rid + "\udfff",
}


@pytest.mark.parametrize("odd", list(ODD_VALUES))
def test_click_with_odd_value_answers_nothing(live: Live, odd: str) -> None:
    """The clicker is the approval's own requester: only the value stands between the click
    and an answer, so any answer here means the value matched something it must not."""
    request_id = f"hx-{uuid.uuid4().hex[:12]}"
    owner = f"U0OWN{uuid.uuid4().hex[:6].upper()}"
    make_approval(live.store, request_id, owner, ())
    before = snapshot(live)
    body = as_form(click(owner, ODD_VALUES[odd](request_id)))
    answer = send(live, body, signed(body, FORM_CT))
    assert answer.status in (200, 400), answer
    state = live.store.approval(request_id)
    assert state is not None and state.answer is None, state
    assert_only_ephemerals_for(live, before, owner, answer)


# -- text round trip -----------------------------------------------------------------------

ROUND_TRIP = {
    "sql": "Robert'); DROP TABLE events;--",
    "sql-2": "1; DELETE FROM approvals WHERE 1=1; -- ' OR '1'='1",
    "emoji": "👍🏽 👨‍👩‍👧‍👦 🇩🇪 😀",
    "rtl": "שלום \u202eevil\u202c مرحبا",
    "nul": "before\x00after",
    "controls": "line1\nline2\r\n\ttab\x07\x1b[31m",
    "zero-width": "\ufeff\u200b\u200d",
    "combining": "e\u0301 n\u0303",
    "quotes-backslashes": '\\"\\u0000 "quoted" \\\\ \\ud800',
    "format-strings": "%s %d {0} ${x} {{x}} %(name)s",
    "edges": "\uffff\U0010ffff\x7f\x80",
}


@pytest.mark.parametrize("ensure_ascii", [True, False], ids=["escaped", "utf8"])
@pytest.mark.parametrize("name", list(ROUND_TRIP))
def test_dm_text_round_trips_verbatim(live: Live, name: str, ensure_ascii: bool) -> None:
    text = ROUND_TRIP[name]
    doc = envelope(message_event(text))
    body = json.dumps(doc, ensure_ascii=ensure_ascii).encode("utf-8")
    before = snapshot(live)
    answer = send(live, body, signed(body))
    assert answer.status == 200, answer
    stored = live.store.event_by_key("slack", doc["event_id"])
    assert stored is not None, "the DM was not stored"
    kept = text.replace("\x00", "\ufffd")  # the one character PostgreSQL cannot hold
    assert stored.payload["text"] == kept, (stored.payload["text"], kept)
    after = snapshot(live)  # every table is still there to count
    assert after.events == before.events + 1


@pytest.mark.parametrize("text", ["\ud800", "x\udfffy", "\ud83d", "ok \udc00\ud800 ok"])
def test_dm_with_lone_surrogate_is_stored_with_fffd_in_its_place(live: Live, text: str) -> None:
    """A lone surrogate (escaped, so the body is valid UTF-8 and valid JSON) cannot be stored as
    UTF-8 text on either store: the message is kept, each surrogate stored as U+FFFD."""
    doc = envelope(message_event(text))
    body = as_json(doc)
    assert b"\\ud" in body
    answer = send(live, body, signed(body))
    assert answer.status == 200, answer
    stored = live.store.event_by_key("slack", doc["event_id"])
    assert stored is not None, "the DM was not stored"
    kept = "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)
    assert stored.payload["text"] == kept


# -- HTTP-level garbage --------------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"])
def test_other_methods_are_405(live: Live, method: str) -> None:
    answer = send(live, method=method, content_length=method != "GET")
    assert answer.status == 405, answer


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/slack",
        "/slack/events/",
        "/slack/eventsX",
        "/SLACK/EVENTS",
        "/slack/events%00",
        "/slack/events/..",
        "/api/slack/events",
        "/healthz/../slack/events",
    ],
)
def test_unknown_paths_are_404(live: Live, path: str) -> None:
    body = as_json(envelope(message_event("wrong door")))
    before = snapshot(live)
    answer = send(live, body, signed(body), path=path)
    assert answer.status == 404, answer
    assert_nothing_stored(live, before, answer)


@pytest.mark.parametrize(
    "value", ["-1", "abc", "1e3", "+10", "0x10", "", "12, 12", "99999999999999999999x"]
)
def test_bad_content_length_is_400(live: Live, value: str) -> None:
    body = as_json(envelope(message_event("bad length")))
    before = snapshot(live)
    answer = send(live, body, [*signed(body), ("Content-Length", value)], content_length=False)
    assert answer.status == 400, answer
    assert_nothing_stored(live, before, answer)


def test_two_different_content_lengths_are_400(live: Live) -> None:
    body = as_json(envelope(message_event("smuggled")))
    before = snapshot(live)
    headers = [*signed(body), ("Content-Length", str(len(body))), ("Content-Length", "5")]
    answer = send(live, body, headers, content_length=False)
    assert answer.status == 400, answer
    assert_nothing_stored(live, before, answer)


def test_chunked_valid_event_is_accepted(live: Live) -> None:
    doc = envelope(message_event("sent in chunks"))
    body = as_json(doc)
    conn = http.client.HTTPConnection("127.0.0.1", live.port, timeout=CLIENT_TIMEOUT)
    try:
        chunks = iter([body[:7], body[7:50], body[50:]])
        conn.request(
            "POST", EVENTS_PATH, body=chunks, headers=dict(signed(body)), encode_chunked=True
        )
        response = conn.getresponse()
        answer = Answer(response.status, response.read())
    finally:
        conn.close()
    assert answer.status == 200, answer
    stored = live.store.event_by_key("slack", doc["event_id"])
    assert stored is not None and stored.payload["text"] == "sent in chunks"


@pytest.mark.parametrize(
    "chunked",
    [b"zz\r\nabc\r\n0\r\n\r\n", b"-5\r\nabc\r\n0\r\n\r\n", b"3\r\nabcdef\r\n0\r\n\r\n"],
    ids=["non-hex-size", "negative-size", "size-mismatch"],
)
def test_chunked_garbage_is_400(live: Live, chunked: bytes) -> None:
    ts = int(time.time())
    head = (
        f"POST {EVENTS_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {JSON_CT}\r\n"
        f"X-Slack-Request-Timestamp: {ts}\r\nX-Slack-Signature: {sign(b'abc', ts)}\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    ).encode()
    before = snapshot(live)
    raw = raw_exchange(live, head + chunked)
    assert status_of(raw) == 400, raw[:120]
    assert_nothing_stored(live, before, raw[:60].decode("latin-1"))


# -- signed bodies of the wrong shape ------------------------------------------------------


def _envelope_with(**changes: Any) -> bytes:
    doc = envelope(message_event("shape"))
    for path, value in changes.items():
        parent = doc
        keys = path.split("__")
        for key in keys[:-1]:
            parent = parent[key]
        parent[keys[-1]] = value
    return as_json(doc)


def _click_with(**changes: Any) -> bytes:
    doc = click(INTRUDER, STANDING)
    doc.update(changes)
    return as_form(doc)


WRONG_SHAPES: dict[str, tuple[bytes, str]] = {
    "event-null": (_envelope_with(event=None), JSON_CT),
    "event-string": (_envelope_with(event="message"), JSON_CT),
    "event-list": (_envelope_with(event=[1]), JSON_CT),
    "event-user-int": (_envelope_with(event__user=5), JSON_CT),
    "event-user-list": (_envelope_with(event__user=["U1"]), JSON_CT),
    "event-subtype-list": (_envelope_with(event__subtype=["x"]), JSON_CT),
    "event-text-int": (_envelope_with(event__text=5), JSON_CT),
    "event-thread_ts-object": (_envelope_with(event__thread_ts={"a": 1}), JSON_CT),
    "authorizations-string": (_envelope_with(authorizations="x"), JSON_CT),
    "authorizations-list-of-strings": (_envelope_with(authorizations=["x"]), JSON_CT),
    "click-user-string": (_click_with(user=INTRUDER), FORM_CT),
    "click-team-string": (_click_with(team=TEAM), FORM_CT),
    "click-channel-string": (_click_with(channel=DM_CHANNEL), FORM_CT),
    "click-actions-string": (_click_with(actions="approve"), FORM_CT),
    "click-actions-empty": (_click_with(actions=[]), FORM_CT),
    "click-actions-list-of-strings": (_click_with(actions=["approve"]), FORM_CT),
    "unhandled-type-user-int": (as_json({"type": "view_submission", "user": 5}), JSON_CT),
    "duplicate-payload-fields": (
        b"payload=" + urllib.parse.quote(json.dumps({"type": "shortcut"})).encode() + b"&payload=5",
        FORM_CT,
    ),
}


@pytest.mark.parametrize("shape", list(WRONG_SHAPES))
def test_signed_body_of_the_wrong_shape_is_refused_not_5xx(live: Live, shape: str) -> None:
    """Each of these is a JSON object with a string `type`, so it passes the front's first check;
    a field the app (or Bolt) reads has the wrong type. Rule: 400 (or 200, ignored), never a 5xx,
    and nothing stored but an ephemeral note to a clicker."""
    body, content_type = WRONG_SHAPES[shape]
    before = snapshot(live)
    answer = send(live, body, signed(body, content_type))
    assert answer.status in (200, 400), answer
    if content_type == FORM_CT:
        assert_only_ephemerals_for(live, before, INTRUDER, answer)
    else:
        assert_nothing_stored(live, before, answer)


# -- forged ids (issue 34, item 6 a) -------------------------------------------------------

FORGED_IDS = {
    "newline-log-line": "U0DM\n2026-01-01 00:00:00,000 INFO wakeful: \x1b[2Jall clear",
    "trailing-newline": "U0DM\n",
    "esc": "U0DM\x1b[31m",
    "carriage-return": "U0DM\rU0OWNER",
    "line-separator": "U0DM\u2028x",
    "nul": "U0DM\x00",
    "lower-case": "u0dm",
    "colon": "U0DM:U0OWNER",
    "slash": "U0DM/../x",
    "space": "U0 DM",
    "33-chars": "U" + "0" * 32,
    "fullwidth-digit": "U\uff10DM",
    "empty": "",
}
"""What a signed body once carried in `user` (a newline and an escape forged a log line and
became an inbox name), and the other ways a string can fail to be a Slack id."""


def _command_form(**changes: str) -> bytes:
    form = {
        "token": "verification-token",
        "team_id": TEAM,
        "team_domain": "hx",
        "channel_id": DM_CHANNEL,
        "channel_name": "directmessage",
        "user_id": DM_USER,
        "user_name": "dm",
        "command": "/wakeful",
        "text": "status",
        "api_app_id": "A0HX",
        "response_url": "https://hooks.slack.com/commands/T0HX/1/x",
        "trigger_id": "1.2.3",
        **changes,
    }
    return urllib.parse.urlencode(form).encode()


def _home_event(**changes: Any) -> dict[str, Any]:
    event = {"type": "app_home_opened", "user": DM_USER, "channel": DM_CHANNEL, "tab": "home"}
    return envelope({**event, "event_ts": "1700000000.000500", **changes})


def _thread_started(user: str = DM_USER, channel: str = DM_CHANNEL) -> dict[str, Any]:
    thread = {"user_id": user, "channel_id": channel, "thread_ts": "1700000000.000600"}
    return envelope({"type": "assistant_thread_started", "assistant_thread": thread})


def _owner_click(path: str, value: Any) -> dict[str, Any]:
    """OWNER's own Approve on the standing approval (it would answer it), one id forged."""
    doc = click(OWNER, STANDING)
    node = doc
    keys = path.split(".")
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value
    return doc


def _at(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    node: Any = doc
    keys = path.split(".")
    for key in keys[:-1]:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[keys[-1]] = value
    return doc


FORGED_FIELDS: dict[str, Any] = {
    "message.event.user": lambda v: (as_json(envelope(message_event(user=v))), JSON_CT),
    "message.event.channel": lambda v: (as_json(envelope(message_event(channel=v))), JSON_CT),
    "message.event.team": lambda v: (
        as_json(_at(envelope(message_event()), "event.team", v)),
        JSON_CT,
    ),
    "message.team_id": lambda v: (as_json(_at(envelope(message_event()), "team_id", v)), JSON_CT),
    "message.enterprise_id": lambda v: (
        as_json({**envelope(message_event()), "enterprise_id": v}),
        JSON_CT,
    ),
    "message.authorizations.team_id": lambda v: (
        as_json(_at(envelope(message_event()), "authorizations.0.team_id", v)),
        JSON_CT,
    ),
    "message.authorizations.enterprise_id": lambda v: (
        as_json(_at(envelope(message_event()), "authorizations.0.enterprise_id", v)),
        JSON_CT,
    ),
    "mention.event.user": lambda v: (as_json(envelope(mention_event(user=v))), JSON_CT),
    "home-opened.event.user": lambda v: (as_json(_home_event(user=v)), JSON_CT),
    "assistant-thread.user_id": lambda v: (as_json(_thread_started(user=v)), JSON_CT),
    "assistant-thread.channel_id": lambda v: (as_json(_thread_started(channel=v)), JSON_CT),
    "tokens-revoked.bot": lambda v: (
        as_json(envelope({"type": "tokens_revoked", "tokens": {"oauth": [], "bot": [v]}})),
        JSON_CT,
    ),
    "rate-limited.team_id": lambda v: (
        as_json({"type": "app_rate_limited", "team_id": v, "minute_rate_limited": 1}),
        JSON_CT,
    ),
    "click.user.id": lambda v: (as_form(_owner_click("user.id", v)), FORM_CT),
    "click.user.team_id": lambda v: (
        as_form({**_owner_click("user.team_id", v), "team": None}),
        FORM_CT,
    ),
    "click.team.id": lambda v: (as_form(_owner_click("team.id", v)), FORM_CT),
    "click.enterprise.id": lambda v: (
        as_form(_owner_click("enterprise", {"id": v, "name": "hx"})),
        FORM_CT,
    ),
    "click.channel.id": lambda v: (as_form(_owner_click("channel.id", v)), FORM_CT),
    "click.container.channel_id": lambda v: (
        as_form(_owner_click("container.channel_id", v)),
        FORM_CT,
    ),
    "home-requeue.user.id": lambda v: (
        as_form(
            {
                **click(v, "event:1", payloads.REQUEUE),
                "container": {"type": "view", "view_id": "V0HOME"},
            }
        ),
        FORM_CT,
    ),
    "command.user_id": lambda v: (_command_form(user_id=v), FORM_CT),
    "command.team_id": lambda v: (_command_form(team_id=v), FORM_CT),
    "command.channel_id": lambda v: (_command_form(channel_id=v), FORM_CT),
    "command.enterprise_id": lambda v: (_command_form(enterprise_id=v), FORM_CT),
}
"""Every place a handled body (and the one logged unhandled body) names a Slack id."""


class _Lines(logging.Handler):
    """Every log record's text, as written while a request is served."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.texts: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.texts.append(record.getMessage() + (record.exc_text or ""))


FORGED_CASES = [
    (field, forged)
    for field in FORGED_FIELDS
    for forged in FORGED_IDS
    # An empty org id is no org: Slack's own bodies outside Enterprise Grid may carry one.
    if not (forged == "empty" and field.endswith("enterprise_id"))
]


@pytest.mark.parametrize(("field", "forged"), FORGED_CASES)
def test_a_forged_slack_id_is_400_stored_nowhere_and_logged_nowhere(
    live: Live, field: str, forged: str
) -> None:
    """A signed body whose id is not `[A-Z0-9]{1,32}` is refused before anything reads it:
    400, nothing stored (no event, no inbox named after it, no note to a clicker, no answer
    to the standing approval OWNER's click would give), and no log line quotes it."""
    value = FORGED_IDS[forged]
    body, ctype = FORGED_FIELDS[field](value)
    lines = _Lines()
    root = logging.getLogger()
    loggers = [root, *(logging.getLogger(n) for n in ("wakeful", "wakeful.bolt", "waitress"))]
    levels = [logger.level for logger in loggers]
    root.addHandler(lines)
    for logger in loggers:  # every level: DEBUG lines quote requests too
        logger.setLevel(logging.DEBUG)
    before = snapshot(live)
    try:
        answer = send(live, body, signed(body, ctype))
    finally:
        root.removeHandler(lines)
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
    assert answer.status == 400, f"{field} = {value!r}: {answer}"
    assert b"not a Slack id" in answer.body, answer
    assert not value or value.encode() not in answer.body, answer
    assert_nothing_stored(live, before, answer)
    state = live.store.approval(STANDING)
    assert state is not None and state.answer is None, state
    if value:
        assert not [t for t in lines.texts if value in t], lines.texts


@pytest.mark.parametrize(
    "field", ["message.event.user", "command.user_id", "click.user.id", "message.team_id"]
)
def test_the_same_body_with_a_real_id_is_served(live: Live, field: str) -> None:
    """The control: the bodies above are served when their id is one (32 characters, the
    cap, included), so what refuses them is the id alone."""
    value = "T" + "0" * 31 if field.endswith("team_id") else "W" + "0" * 31
    body, ctype = FORGED_FIELDS[field](value)
    before = snapshot(live)
    answer = send(live, body, signed(body, ctype))
    assert answer.status == 200, f"{field} = {value!r}: {answer}"
    after = snapshot(live)
    assert after.events + after.outbox > before.events + before.outbox, answer


# -- fuzzing -------------------------------------------------------------------------------


class _Delete:
    def __repr__(self) -> str:
        return "DELETE"


DELETE = _Delete()

ODD_STRINGS = [
    "",
    " ",
    "\x00",
    "\ud800",
    "\udfff",
    "null",
    "0",
    "-1",
    "NaN",
    "Robert'); DROP TABLE events;--",
    "' OR 1=1 --",
    "👍🏽",
    "\u202eevil",
    "x" * 600,
    DM_USER,
    DM_CHANNEL,
    TEAM,
    INTRUDER,
    "message",
    "app_mention",
    "im",
    "channel",
    "bot_message",
    "file_share",
    blocks.APPROVE,
    blocks.DENY,
    "event_callback",
    "block_actions",
    "1700000000.000100",
]
SLACK_KEYS = [
    "type",
    "event",
    "event_id",
    "team_id",
    "team",
    "user",
    "id",
    "channel",
    "container",
    "actions",
    "action_id",
    "value",
    "text",
    "ts",
    "thread_ts",
    "subtype",
    "bot_id",
    "channel_type",
    "authorizations",
    "enterprise",
    "enterprise_id",
    "is_enterprise_install",
    "api_app_id",
    "token",
    "challenge",
    "view",
    "message",
    "response_url",
    "trigger_id",
    "state",
    "user_id",
    "channel_id",
    "callback_id",
    "message_ts",
]

odd_text = st.text(max_size=12) | st.sampled_from(ODD_STRINGS)
json_key = st.text(max_size=8) | st.sampled_from(SLACK_KEYS)
json_scalar = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | odd_text
)
json_value = st.recursive(
    json_scalar,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(json_key, kids, max_size=3),
    max_leaves=10,
)
header_text = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"),
    max_size=80,
)
"""What http.client will send and waitress will parse as a header value (VCHAR, SP, obs-text)."""
CONTENT_TYPES = [
    JSON_CT,
    "application/json; charset=utf-8",
    FORM_CT,
    f"{FORM_CT}; charset=utf-8",
    "text/plain",
    "multipart/form-data; boundary=hx",
    None,
    "garbage",
    "*/*",
    f"{JSON_CT}, {FORM_CT}",
]
content_type = st.sampled_from(CONTENT_TYPES) | header_text

MESSAGE_PATHS: list[tuple[str | int, ...]] = [
    ("type",),
    ("event_id",),
    ("team_id",),
    ("api_app_id",),
    ("authorizations",),
    ("authorizations", 0),
    ("authorizations", 0, "team_id"),
    ("authorizations", 0, "user_id"),
    ("authorizations", 0, "is_enterprise_install"),
    ("enterprise_id",),
    ("is_enterprise_install",),
    ("event",),
    ("event", "type"),
    ("event", "user"),
    ("event", "text"),
    ("event", "channel"),
    ("event", "channel_type"),
    ("event", "ts"),
    ("event", "thread_ts"),
    ("event", "subtype"),
    ("event", "bot_id"),
    ("event", "team"),
    ("event", "blocks"),
    ("event", "files"),
]
CLICK_PATHS: list[tuple[str | int, ...]] = [
    ("type",),
    ("user",),
    ("user", "id"),
    ("user", "team_id"),
    ("team",),
    ("team", "id"),
    ("enterprise",),
    ("is_enterprise_install",),
    ("channel",),
    ("channel", "id"),
    ("container",),
    ("container", "channel_id"),
    ("message",),
    ("actions",),
    ("actions", 0),
    ("actions", 0, "action_id"),
    ("actions", 0, "value"),
    ("actions", 0, "block_id"),
    ("api_app_id",),
    ("state",),
    ("response_url",),
]


def mutations(paths: list[tuple[str | int, ...]]) -> st.SearchStrategy[list[Any]]:
    change = st.tuples(st.sampled_from(paths), st.just(DELETE) | json_value)
    return st.lists(change, min_size=1, max_size=3)


def mutated(doc: dict[str, Any], changes: list[Any]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    for path, value in changes:
        parent: Any = out
        for key in path[:-1]:
            parent = _child(parent, key)
        key = path[-1]
        if isinstance(key, int):
            if isinstance(parent, list) and len(parent) > key:
                if value is DELETE:
                    del parent[key]
                else:
                    parent[key] = copy.deepcopy(value)
        elif isinstance(parent, dict):
            if value is DELETE:
                parent.pop(key, None)
            else:
                parent[key] = copy.deepcopy(value)
    return out


def _child(node: Any, key: str | int) -> Any:
    if isinstance(key, int):
        return node[key] if isinstance(node, list) and len(node) > key else None
    return node.get(key) if isinstance(node, dict) else None


def _clicker(doc: dict[str, Any]) -> Any:
    user = doc.get("user")
    return user.get("id") if isinstance(user, dict) else None


def _slack_object(body: bytes) -> bool:
    """True when `body` would pass the front's first check as JSON (to keep garbage garbage)."""
    try:
        value = json.loads(body.decode("utf-8"))
    except (ValueError, RecursionError):
        return False
    return isinstance(value, dict) and isinstance(value.get("type"), str)


def _utf8(body: bytes) -> bool:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# Forgeries: each recipe is applied at send time, against the clock of that moment.
forgery = st.one_of(
    st.tuples(st.just("no-signature"), st.none()),
    st.tuples(st.just("no-timestamp"), st.none()),
    st.tuples(st.just("no-headers"), st.none()),
    st.tuples(
        st.just("stale"),
        st.integers(301, 10**12) | st.integers(-(10**12), -301),
    ),
    st.tuples(
        st.just("bad-timestamp"),
        header_text.filter(lambda s: not s.strip(" \t").isdigit())
        | st.sampled_from(["-1", "+1700000000", "1e9", "1.7e9", "0x65", "1_700_000_000", "²³"]),
    ),
    st.tuples(st.just("huge-timestamp"), st.integers(10, 5000).map(lambda n: "9" * n)),
    st.tuples(
        st.just("wrong-secret"),
        st.text(min_size=1, max_size=40).filter(lambda s: s != SECRET)
        | st.sampled_from([SECRET + " ", SECRET.upper(), SECRET[:-1], " " + SECRET]),
    ),
    st.tuples(st.just("other-bytes"), st.binary(min_size=1, max_size=40)),
    st.tuples(st.just("shifted-timestamp"), st.integers(-300, 300).filter(bool)),
    st.tuples(st.just("truncated"), st.integers(0, 66)),
    st.tuples(
        st.just("prefix"),
        st.sampled_from(["v1=", "V0=", "v0:", "", "v0=v0=", "sha256=", "v00=", "v0 ="]),
    ),
    st.tuples(st.just("upper-hex"), st.none()),
    st.tuples(st.just("garbage-signature"), header_text),
    st.tuples(st.just("duplicate-signature"), st.none() | header_text),
    st.tuples(st.just("duplicate-timestamp"), st.none() | header_text),
    st.tuples(st.just("underscore-header"), st.none()),
)


def forged_headers(recipe: tuple[str, Any], body: bytes) -> list[tuple[str, str]]:
    kind, arg = recipe
    now = int(time.time())
    good = sign(body, now)
    ts, sig = ("X-Slack-Request-Timestamp", "X-Slack-Signature")
    if kind == "no-signature":
        return [(ts, str(now))]
    if kind == "no-timestamp":
        return [(sig, good)]
    if kind == "no-headers":
        return []
    if kind == "stale":
        return [(ts, str(now + arg)), (sig, sign(body, now + arg))]
    if kind in ("bad-timestamp", "huge-timestamp"):
        return [(ts, arg), (sig, sign(body, arg))]
    if kind == "wrong-secret":
        return [(ts, str(now)), (sig, sign(body, now, arg))]
    if kind == "other-bytes":
        return [(ts, str(now)), (sig, sign(body + arg, now))]
    if kind == "shifted-timestamp":
        return [(ts, str(now + arg)), (sig, good)]
    if kind == "truncated":
        return [(ts, str(now)), (sig, good[:arg])]
    if kind == "prefix":
        return [(ts, str(now)), (sig, arg + good[3:])]
    if kind == "upper-hex":
        return [(ts, str(now)), (sig, "v0=" + good[3:].upper())]
    if kind == "garbage-signature":
        return [(ts, str(now)), (sig, arg)]
    if kind == "duplicate-signature":
        return [(ts, str(now)), (sig, good), (sig, good if arg is None else arg)]
    if kind == "duplicate-timestamp":
        return [(ts, str(now)), (ts, str(now) if arg is None else arg), (sig, good)]
    if kind == "underscore-header":
        return [(ts, str(now)), ("X_Slack_Signature", good)]
    raise AssertionError(kind)


forged_body = st.one_of(
    st.sampled_from(["valid-event", "valid-mention", "owner-approves-standing"]),
    st.binary(max_size=300),
    json_value.map(lambda v: json.dumps(v).encode("utf-8")),
)


def materialise(body: str | bytes) -> tuple[bytes, str | None]:
    """A body recipe -> bytes and the content type it should carry when it is real."""
    if body == "valid-event":
        return as_json(envelope(message_event("forged"))), JSON_CT
    if body == "valid-mention":
        return as_json(envelope(mention_event("<@UBOT> forged"))), JSON_CT
    if body == "owner-approves-standing":
        return as_form(click(OWNER, STANDING)), FORM_CT
    assert isinstance(body, bytes)
    return body, None


@settings(max_examples=400, **FUZZ_SETTINGS)
@given(
    body=forged_body,
    recipe=forgery,
    ctype=st.none() | content_type,
)
def test_fuzz_forged_requests_are_401_and_store_nothing(
    live: Live, body: str | bytes, recipe: tuple[str, Any], ctype: str | None
) -> None:
    FUZZ["forged"] += 1
    data, natural_ct = materialise(body)
    headers = forged_headers(recipe, data)
    chosen = ctype or natural_ct
    if chosen is not None:
        headers.append(("Content-Type", chosen))
    before = snapshot(live)
    answer = send(live, data, headers)
    assert answer.status == 401, f"{recipe}: {answer}"
    assert_nothing_stored(live, before, answer)


garbage = st.one_of(
    st.tuples(st.just("bytes"), st.binary(max_size=400), content_type),
    st.tuples(
        st.just("json-not-object"),
        json_value.filter(lambda v: not isinstance(v, dict)).map(lambda v: json.dumps(v).encode()),
        content_type,
    ),
    st.tuples(
        st.just("object-without-string-type"),
        st.dictionaries(json_key, json_value, max_size=5)
        .filter(lambda d: not isinstance(d.get("type"), str))
        .map(lambda d: json.dumps(d).encode()),
        content_type,
    ),
    st.tuples(
        st.just("form-payload-not-an-object"),
        (odd_text | json_value.filter(lambda v: not isinstance(v, dict)).map(json.dumps)).map(
            lambda p: urllib.parse.urlencode({"payload": p}, errors="surrogatepass").encode()
        ),
        st.just(FORM_CT),
    ),
    st.tuples(
        st.just("form-without-payload"),
        st.dictionaries(
            json_key.filter(lambda k: k not in ("payload", "command")), odd_text, max_size=4
        ).map(lambda d: urllib.parse.urlencode(d, errors="surrogatepass").encode()),
        st.just(FORM_CT),
    ),
    st.tuples(st.just("event-as-form"), st.just(b"event"), st.just(FORM_CT)),
    st.tuples(
        st.just("click-as-json"),
        st.just(b"click"),
        st.sampled_from([JSON_CT, "text/plain", None, "multipart/form-data; boundary=hx"]),
    ),
    st.tuples(st.just("bom-event"), st.just(b"bom"), st.just(JSON_CT)),
    st.tuples(
        st.just("multipart"), st.just(b"multipart"), st.just("multipart/form-data; boundary=hx")
    ),
)


def materialise_garbage(kind: str, body: bytes) -> bytes:
    if kind == "event-as-form":
        return as_json(envelope(message_event("wrong content type")))
    if kind == "click-as-json":
        return as_form(click(OWNER, STANDING))
    if kind == "bom-event":
        return b"\xef\xbb\xbf" + as_json(envelope(message_event("bom")))
    if kind == "multipart":
        payload = json.dumps(click(OWNER, STANDING))
        return (
            f'--hx\r\nContent-Disposition: form-data; name="payload"\r\n\r\n{payload}\r\n--hx--\r\n'
        ).encode()
    return body


@settings(max_examples=300, **FUZZ_SETTINGS)
@given(case=garbage)
def test_fuzz_signed_garbage_is_refused_and_stores_nothing(
    live: Live, case: tuple[str, bytes, str | None]
) -> None:
    kind, recipe, ctype = case
    body = materialise_garbage(kind, recipe)
    if kind in ("bytes", "json-not-object", "object-without-string-type"):
        # A form body with a `payload` or `command` field, or a JSON object with a string
        # `type`, is not garbage; random bytes almost never are, but keep them out.
        assume(b"payload" not in body and b"command" not in body and not _slack_object(body))
    if kind == "form-payload-not-an-object":
        payload = urllib.parse.parse_qs(body.decode("ascii"), keep_blank_values=True)["payload"][0]
        assume(not _slack_object(payload.encode("utf-8", "surrogatepass")))
    FUZZ["signed-garbage"] += 1
    before = snapshot(live)
    answer = send(live, body, signed(body, ctype))
    # slack_sdk decodes the body as UTF-8 to sign it: bytes that are not UTF-8 cannot carry
    # a valid signature (401); everything else is signed and malformed (400).
    expected = 400 if _utf8(body) else 401
    assert answer.status == expected, f"{kind} as {ctype!r}: {answer}"
    assert_nothing_stored(live, before, answer)


unhandled_type = st.sampled_from(
    [
        "url_verification",
        "app_rate_limited",
        "view_submission",
        "view_closed",
        "shortcut",
        "message_action",
        "block_suggestion",
        "interactive_message",
        "dialog_submission",
        "ssl_check",
        "command",
        "",
        "EVENT_CALLBACK",
        "event_callback ",
        "block_actions\x00",
    ]
) | st.text(max_size=16).filter(lambda t: t not in ("event_callback", "block_actions"))


@settings(max_examples=200, **FUZZ_SETTINGS)
@given(
    kind=unhandled_type,
    extra=st.dictionaries(json_key.filter(lambda k: k != "type"), json_value, max_size=4),
    as_form_payload=st.booleans(),
)
def test_fuzz_signed_unhandled_types_store_nothing(
    live: Live, kind: str, extra: dict[str, Any], as_form_payload: bool
) -> None:
    FUZZ["unhandled-types"] += 1
    doc = {"type": kind, **extra}
    body, ctype = (as_form(doc), FORM_CT) if as_form_payload else (as_json(doc), JSON_CT)
    before = snapshot(live)
    answer = send(live, body, signed(body, ctype))
    assert answer.status in (200, 400), f"{doc!r}: {answer}"
    assert_nothing_stored(live, before, answer)


def _mutated_envelope(base: str, changes: list[Any]) -> dict[str, Any]:
    event = message_event("fuzz") if base == "message" else mention_event("<@UBOT> fuzz")
    return mutated(envelope(event), changes)


@settings(max_examples=200, **FUZZ_SETTINGS)
@given(base=st.sampled_from(["message", "mention"]), changes=mutations(MESSAGE_PATHS))
def test_fuzz_mutated_envelopes_are_never_5xx_and_store_only_well_typed_events(
    live: Live, base: str, changes: list[Any]
) -> None:
    """Two rules on each mutated envelope: the answer is 200 or 400 (a 400 stores nothing),
    and whatever is stored is one well-typed event and nothing else."""
    FUZZ["mutated-envelopes"] += 1
    doc = _mutated_envelope(base, changes)
    body = as_json(doc)
    before = snapshot(live)
    answer = send(live, body, signed(body))
    assert answer.status in (200, 400), f"{changes!r}: {answer}"
    if answer.status == 400:
        assert_nothing_stored(live, before, answer)
    after = snapshot(live)
    assert (after.outbox, after.approvals, after.answered, after.steps) == (
        before.outbox,
        before.approvals,
        before.answered,
        before.steps,
    ), f"{changes!r}: {answer}"
    stored = new_events(live, before)
    assert len(stored) <= 1, f"{changes!r}: one request stored {len(stored)} events"
    for event in stored:
        assert_well_typed(event, doc)


@settings(max_examples=300, **FUZZ_SETTINGS)
@given(action=st.sampled_from([blocks.APPROVE, blocks.DENY]), changes=mutations(CLICK_PATHS))
def test_fuzz_mutated_clicks_are_never_5xx_and_answer_nothing(
    live: Live, action: str, changes: list[Any]
) -> None:
    """An intruder's click on OWNER's standing approval, mutated: the answer is 200 or 400 (a
    400 stores nothing), the approval stays unanswered, and at most an ephemeral note to the
    clicker is written."""
    FUZZ["mutated-clicks"] += 1
    doc = mutated(click(INTRUDER, STANDING, action), changes)
    body = as_form(doc)
    before = snapshot(live)
    answer = send(live, body, signed(body, FORM_CT))
    assert answer.status in (200, 400), f"{changes!r}: {answer}"
    if answer.status == 400:
        assert_nothing_stored(live, before, answer)
    state = live.store.approval(STANDING)
    assert state is not None and state.answer is None, f"{changes!r} answered it: {state}"
    assert_only_ephemerals_for(live, before, _clicker(doc), answer)
