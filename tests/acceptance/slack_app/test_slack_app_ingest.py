"""`wakeful serve` as Slack meets it: events stored before the ack, retries, what is ignored,
hostile HTTP, a store that cannot take the write, bursts, and the approval round trip; the
module with the tests run on both stores, so one PostgreSQL app serves them
(slack_app/conftest.py)."""

from __future__ import annotations

import json
import socket
import sqlite3
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from tests.support.slack_app import (
    BATCH_WINDOW,
    BOT_USER,
    TEAM,
    Wakeful,
    dm,
    eventually,
    http_request,
    inbox,
    message_at,
    message_body,
    refund_calls,
    settle,
    wait_prompt,
)
from wakeful.bot.front.wsgi import BODY_CAP
from wakeful.core.events import Message, decode
from wakeful.devtools.audit import count_events

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


# -- 7. the approval round trip, on both stores (the rest of 7: test_slack_app_work.py) ----


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
