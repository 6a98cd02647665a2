"""The Slack emulator must sign requests like Slack does and show what Slack shows, or every
test built on it proves nothing: EventSender against a verifying server and a real Bolt app,
and the Agent messaging experience (statuses, suggested prompts, feedback buttons)."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier

from tests.support.emulator_fixtures import (
    SECRET,
    TOKEN,
    client,
    emu,
    error_of,
)
from wakeful.devtools.emulator import EventSender, SlackEmulator

__all__ = ["client", "emu"]  # the fixtures of tests/support/emulator_fixtures.py, used here


# -- EventSender -------------------------------------------------------------------------------


class _Received:
    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], bytes, bool]] = []


class _VerifyingHandler(BaseHTTPRequestHandler):
    """A stand-in app that checks signatures with slack_sdk's own verifier."""

    received: _Received

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k: v for k, v in self.headers.items()}
        valid = SignatureVerifier(SECRET).is_valid_request(body, headers)
        self.received.requests.append((headers, body, valid))
        status = 200 if valid else 401
        out = b'{"ok": true}' if valid else b"invalid signature"
        self.send_response(status)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def app() -> Iterator[tuple[str, _Received]]:
    received = _Received()
    handler = type("H", (_VerifyingHandler,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/slack/events", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def last_json(received: _Received) -> tuple[dict[str, str], dict[str, Any], bool]:
    headers, body, valid = received.requests[-1]
    return headers, json.loads(body), valid


def test_message_envelope_is_signed_and_complete(app: tuple[str, _Received]) -> None:
    url, received = app
    sender = EventSender(url, SECRET, bot_user_id="UBOT")
    reply = sender.message("U42", "hello")
    assert reply.status == 200 and reply.json() == {"ok": True}
    headers, env, valid = last_json(received)
    assert valid
    assert headers["Content-Type"] == "application/json"
    assert headers["X-Slack-Signature"].startswith("v0=")
    assert "X-Slack-Retry-Num" not in headers
    assert env["type"] == "event_callback" and env["team_id"] == "T1"
    assert env["event_id"] == reply.event_id and env["event_id"].startswith("Ev")
    assert {"token", "api_app_id", "event_time", "authorizations"} <= env.keys()
    assert env["authorizations"][0]["user_id"] == "UBOT"
    event = env["event"]
    assert event["type"] == "message" and event["user"] == "U42" and event["text"] == "hello"
    assert (event["channel"], event["channel_type"]) == ("D42", "im")
    assert event["ts"] == event["event_ts"]
    assert sender.message("U42", "again").event_id != reply.event_id


def test_retry_reuses_event_id_and_sets_retry_headers(app: tuple[str, _Received]) -> None:
    url, received = app
    sender = EventSender(url, SECRET)
    first = sender.message("U1", "hi", event_id="EvFIXED", ts="1700000000.000100")
    again = sender.message("U1", "hi", event_id=first.event_id, ts="1700000000.000100", retry_num=1)
    headers, env, valid = last_json(received)
    assert valid and again.event_id == "EvFIXED" == env["event_id"]
    assert headers["X-Slack-Retry-Num"] == "1"
    assert headers["X-Slack-Retry-Reason"] == "http_timeout"


def test_mention_thread_and_bot_fields(app: tuple[str, _Received]) -> None:
    url, received = app
    sender = EventSender(url, SECRET)
    sender.mention("U1", "do it", thread_ts="1.000001")
    _, env, valid = last_json(received)
    assert valid and env["event"]["type"] == "app_mention"
    assert env["event"]["text"] == "<@UBOT> do it" and env["event"]["channel"] == "C1"
    assert env["event"]["thread_ts"] == "1.000001"
    sender.message("U1", "beep", subtype="bot_message", bot_id="B9", channel="C2")
    _, env, _ = last_json(received)
    assert (env["event"]["subtype"], env["event"]["bot_id"]) == ("bot_message", "B9")
    sender.event({"type": "reaction_added", "user": "U1", "reaction": "+1"})
    _, env, _ = last_json(received)
    assert env["event"]["type"] == "reaction_added"


def test_block_action_is_form_encoded_payload(app: tuple[str, _Received]) -> None:
    url, received = app
    sender = EventSender(url, SECRET)
    reply = sender.block_action(
        "U1", "approve", "req-7", "C3", "1700.000001", response_url="http://127.0.0.1:1/r"
    )
    assert reply.status == 200
    headers, body, valid = received.requests[-1]
    assert valid and headers["Content-Type"] == "application/x-www-form-urlencoded"
    payload = json.loads(urllib.parse.parse_qs(body.decode())["payload"][0])
    assert payload["type"] == "block_actions"
    assert payload["user"]["id"] == "U1" and payload["team"]["id"] == "T1"
    action = payload["actions"][0]
    assert (action["action_id"], action["value"], action["type"]) == ("approve", "req-7", "button")
    assert action["block_id"] and action["action_ts"]
    assert payload["container"]["message_ts"] == "1700.000001"
    assert payload["container"]["channel_id"] == "C3" == payload["channel"]["id"]
    assert payload["message"]["ts"] == "1700.000001"
    assert payload["response_url"] == "http://127.0.0.1:1/r"


def test_url_verification(app: tuple[str, _Received]) -> None:
    url, received = app
    EventSender(url, SECRET).url_verification("chal-1")
    _, env, valid = last_json(received)
    assert valid and env == {**env, "type": "url_verification", "challenge": "chal-1"}


def test_wrong_secret_and_stale_timestamp_fail_verification(app: tuple[str, _Received]) -> None:
    url, received = app
    sender = EventSender(url, SECRET)
    body, headers = b'{"type": "event_callback"}', {"Content-Type": "application/json"}
    assert sender.raw(body, headers).status == 200
    assert sender.raw(body, headers, secret="not-the-secret").status == 401
    assert sender.raw(body, headers, timestamp=int(time.time()) - 600).status == 401
    assert sender.raw(body, headers, sign=False).status == 401
    assert [valid for _, _, valid in received.requests] == [True, False, False, False]
    # A sender whose clock is 10 minutes off produces stale (rejected) signatures.
    skewed = EventSender(url, SECRET, clock=lambda: time.time() - 600)
    assert skewed.message("U1", "x").status == 401


def test_round_trip_through_a_real_bolt_app(emu: SlackEmulator) -> None:
    """EventSender → Bolt (verifies signatures) → say()/respond() → emulator."""
    from slack_bolt import Ack, App, Respond, Say
    from slack_bolt.request import BoltRequest

    bolt = App(signing_secret=SECRET, client=WebClient(token=TOKEN, base_url=emu.api_url))

    @bolt.event("message")
    def on_message(event: dict[str, Any], say: Say) -> None:
        say(text=f"echo: {event['text']}")

    @bolt.action("approve")
    def on_approve(ack: Ack, respond: Respond, body: dict[str, Any]) -> None:
        ack()
        respond(text=f"approved {body['actions'][0]['value']}")

    class Bridge(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
            resp = bolt.dispatch(BoltRequest(body=body, headers=dict(self.headers.items())))
            out = (resp.body or "").encode()
            self.send_response(resp.status)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Bridge)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/slack/events"
        sender = EventSender(url, SECRET)
        assert sender.message("U5", "ping").status == 200
        assert emu.wait_for(lambda e: bool(e.messages("D5")), timeout=5)
        assert emu.messages("D5")[0]["text"] == "echo: ping"

        resp_url = emu.response_url_for("k1")
        reply = sender.block_action("U5", "approve", "r-1", "D5", "1.000001", response_url=resp_url)
        assert reply.status == 200
        assert emu.wait_for(lambda e: bool(e.responses("k1")), timeout=5)
        assert emu.responses("k1")[0]["text"] == "approved r-1"

        assert EventSender(url, "wrong-secret").message("U5", "x").status == 401
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


# -- the Agent messaging experience (issue 24) ----------------------------------------------


def test_status_is_set_in_any_conversation_with_at_most_ten_loading_messages_and_clears(
    emu: SlackEmulator, client: WebClient
) -> None:
    """`assistant.threads.setStatus` takes `chat:write` and shows in channels too; it needs a
    thread; Slack removes it when the app posts in that thread, or after 2 minutes."""
    lines = [f"line {i}" for i in range(10)]
    client.assistant_threads_setStatus(
        channel_id="C1", thread_ts="1.000001", status="is thinking…", loading_messages=lines
    )
    assert emu.shown_status("C1", "1.000001") == "is thinking…"
    assert emu.statuses("C1")[0]["loading_messages"] == lines
    with pytest.raises(SlackApiError) as too_many:
        client.assistant_threads_setStatus(
            channel_id="C1", thread_ts="1.000001", status="x", loading_messages=[*lines, "11"]
        )
    assert error_of(too_many) == "invalid_arguments"
    with pytest.raises(SlackApiError) as no_thread:
        client.api_call("assistant.threads.setStatus", json={"channel_id": "C1", "status": "x"})
    assert error_of(no_thread) == "invalid_arguments"
    client.chat_postMessage(channel="C1", text="the answer", thread_ts="1.000001")
    assert emu.shown_status("C1", "1.000001") == ""  # the reply took it away
    emu.remove_channel("C9")
    with pytest.raises(SlackApiError) as gone:
        client.assistant_threads_setStatus(channel_id="C9", thread_ts="1.1", status="x")
    assert error_of(gone) == "channel_not_found"


def test_a_status_no_message_follows_is_gone_after_two_minutes() -> None:
    now = [1_000.0]
    with SlackEmulator(bot_token=TOKEN, clock=lambda: now[0]) as emu:
        client = WebClient(token=TOKEN, base_url=emu.api_url)
        client.assistant_threads_setStatus(channel_id="D1", thread_ts="9.1", status="thinking")
        now[0] += 120
        assert emu.shown_status("D1", "9.1") == "thinking"
        now[0] += 1
        assert emu.shown_status("D1", "9.1") == ""


def test_suggested_prompts_pin_to_the_messages_tab_without_a_thread_only_in_the_dm(
    emu: SlackEmulator, client: WebClient
) -> None:
    prompts = [{"title": "Status", "message": "status"}]
    client.assistant_threads_setSuggestedPrompts(channel_id="D1", prompts=prompts, title="Try")
    assert emu.suggested_prompts("D1") == [
        {"channel_id": "D1", "thread_ts": None, "title": "Try", "prompts": prompts}
    ]
    with pytest.raises(SlackApiError) as channel:
        client.assistant_threads_setSuggestedPrompts(channel_id="C1", prompts=prompts)
    assert error_of(channel) == "not_allowed"
    with pytest.raises(SlackApiError) as five:
        client.assistant_threads_setSuggestedPrompts(channel_id="D1", prompts=prompts * 5)
    assert error_of(five) == "invalid_arguments"


def test_feedback_buttons_are_checked_as_the_block_kit_reference_says(
    emu: SlackEmulator, client: WebClient
) -> None:
    from wakeful.bot.slack.blocks import feedback_blocks

    good = feedback_blocks("Hello " * 1001)  # cut into sections of at most 3,000 characters
    assert [b["type"] for b in good] == ["section", "section", "section", "context_actions"]
    client.chat_postMessage(channel="C1", text="hello", blocks=good)
    broken = [dict(good[-1], elements=[{"type": "feedback_buttons", "action_id": "x"}])]
    with pytest.raises(SlackApiError) as refused:
        client.chat_postMessage(channel="C1", text="hello", blocks=broken)
    assert error_of(refused) == "invalid_blocks"
    six = [dict(good[-1], elements=good[-1]["elements"] * 6)]
    with pytest.raises(SlackApiError) as many:
        client.chat_postMessage(channel="C1", text="hello", blocks=six)
    assert error_of(many) == "invalid_blocks"


def test_the_sender_sends_the_messages_tab_and_feedback_clicks_as_slack_does(
    emu: SlackEmulator,
) -> None:
    got: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"])).decode()
            got.append(
                json.loads(urllib.parse.parse_qs(body)["payload"][0])
                if body.startswith("payload=")
                else json.loads(body)
            )
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    try:
        sender = EventSender(f"http://127.0.0.1:{server.server_address[1]}/", SECRET)
        sender.messages_tab_opened("U7")
        sender.feedback("U7", "positive", "D7", "1.000007", thread_ts="1.000001")
    finally:
        server.shutdown()
        server.server_close()
    opened, click = got
    assert opened["event"] == {
        "type": "app_home_opened",
        "user": "U7",
        "channel": "D7",
        "tab": "messages",
        "event_ts": opened["event"]["event_ts"],
    }
    [action] = click["actions"]
    assert (action["type"], action["action_id"], action["value"]) == (
        "feedback_buttons",
        "wakeful_feedback",
        "positive",
    )
    assert click["container"]["thread_ts"] == "1.000001"
