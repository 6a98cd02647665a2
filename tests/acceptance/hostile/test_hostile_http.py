"""Hostile HTTP against the real front: signatures and timestamps, sizes and depths, and
HTTP-level garbage (tests/acceptance/hostile/conftest.py has the rules)."""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import socket
import time
from typing import Any

import pytest

from tests.support.hostile import (
    CLIENT_TIMEOUT,
    JSON_CT,
    SECRET,
    Answer,
    Live,
    as_json,
    assert_nothing_stored,
    envelope,
    message_event,
    raw_exchange,
    read_until_closed,
    send,
    sign,
    signed,
    snapshot,
    status_of,
)
from wakeful.bot.front.wsgi import BODY_CAP, EVENTS_PATH
from wakeful.core.settings import MAX_PAYLOAD_BYTES

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
