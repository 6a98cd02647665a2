"""The Slack emulator must behave like Slack to a real ``slack_sdk.WebClient`` and sign
requests like Slack does, or every test built on it proves nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier

from wakeful.devtools.emulator import Call, EventSender, RemoteEmulator, SlackEmulator

TOKEN = "xoxb-test-token"
SECRET = "shh-signing-secret"


@pytest.fixture
def emu() -> Iterator[SlackEmulator]:
    users: dict[str, dict[str, Any]] = {
        "U1": {"tz": "Europe/Paris"},
        "U2": {"tz": "America/New_York", "is_bot": False},
    }
    with SlackEmulator(bot_token=TOKEN, users=users) as e:
        yield e


@pytest.fixture
def client(emu: SlackEmulator) -> WebClient:
    return WebClient(token=TOKEN, base_url=emu.api_url)


def error_of(exc: pytest.ExceptionInfo[SlackApiError]) -> Any:
    return exc.value.response["error"]


# -- Web API against a real WebClient ------------------------------------------------------


def test_api_url_is_what_webclient_joins_methods_onto(
    emu: SlackEmulator, client: WebClient
) -> None:
    assert emu.api_url == f"http://127.0.0.1:{emu.port}/api/"
    auth = client.auth_test()
    assert (auth["user_id"], auth["team_id"], auth["bot_id"]) == ("UBOT", "T1", "BBOT")
    assert emu.calls()[0].method == "auth.test"


def test_post_then_history_returns_metadata_only_when_asked(
    emu: SlackEmulator, client: WebClient
) -> None:
    meta = {"event_type": "wakeful_outbox", "event_payload": {"key": "k-1", "n": 3}}
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": "*hi*"}}]
    posted = client.chat_postMessage(channel="C9", text="hi", blocks=blocks, metadata=meta)
    assert posted["channel"] == "C9"
    assert posted["message"]["text"] == "hi"

    plain = client.conversations_history(channel="C9")
    assert [m["ts"] for m in plain["messages"]] == [posted["ts"]]
    assert plain["messages"][0]["blocks"] == blocks
    assert "metadata" not in plain["messages"][0]

    full = client.conversations_history(channel="C9", include_all_metadata=True)
    assert full["messages"][0]["metadata"] == meta
    assert emu.messages("C9")[0]["metadata"] == meta


def test_form_encoded_metadata_string_is_parsed(emu: SlackEmulator, client: WebClient) -> None:
    meta = {"event_type": "e", "event_payload": {"a": 1}}
    # api_call with params= sends a form body, so metadata arrives as a JSON string.
    client.api_call(
        "chat.postMessage", params={"channel": "C1", "text": "x", "metadata": json.dumps(meta)}
    )
    call = emu.calls("chat.postMessage")[0]
    assert isinstance(call.params["metadata"], str)
    assert call.headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert emu.messages("C1")[0]["metadata"] == meta


def test_timestamps_strictly_increase(emu: SlackEmulator, client: WebClient) -> None:
    ts = [client.chat_postMessage(channel="C1", text=str(i))["ts"] for i in range(5)]
    assert all(len(t.split(".")[1]) == 6 for t in ts)
    assert ts == sorted(ts, key=lambda t: tuple(map(int, t.split(".")))) and len(set(ts)) == 5


def test_update_changes_text_and_unknown_ts_fails(emu: SlackEmulator, client: WebClient) -> None:
    ts = client.chat_postMessage(channel="C1", text="before")["ts"]
    updated = client.chat_update(channel="C1", ts=ts, text="after")
    assert updated["text"] == "after"
    assert [m["text"] for m in emu.messages("C1")] == ["after"]
    assert client.conversations_history(channel="C1")["messages"][0]["text"] == "after"
    with pytest.raises(SlackApiError) as exc:
        client.chat_update(channel="C1", ts="1.000001", text="x")
    assert error_of(exc) == "message_not_found"


def test_ephemeral_is_recorded_but_not_in_history(emu: SlackEmulator, client: WebClient) -> None:
    resp = client.chat_postEphemeral(channel="C1", user="U1", text="only you")
    assert resp["message_ts"]
    assert client.conversations_history(channel="C1")["messages"] == []
    [eph] = emu.ephemerals("C1")
    assert (eph["user"], eph["text"]) == ("U1", "only you")
    assert emu.ephemerals(user="U2") == []


def test_users_info_gives_timezone(emu: SlackEmulator, client: WebClient) -> None:
    paris = client.users_info(user="U1")["user"]
    assert paris["tz"] == "Europe/Paris" and paris["tz_offset"] in (3600, 7200)
    assert paris["is_bot"] is False
    assert client.users_info(user="UBOT")["user"]["is_bot"] is True
    emu.add_user("U3")
    assert client.users_info(user="U3")["user"]["tz"] == "UTC"
    with pytest.raises(SlackApiError) as exc:
        client.users_info(user="UNOPE")
    assert error_of(exc) == "user_not_found"


@pytest.mark.parametrize("token", ["xoxb-wrong", None])
def test_wrong_or_missing_token_is_invalid_auth(emu: SlackEmulator, token: str | None) -> None:
    bad = WebClient(token=token, base_url=emu.api_url)
    with pytest.raises(SlackApiError) as exc:
        bad.chat_postMessage(channel="C1", text="x")
    assert exc.value.response.status_code == 200
    assert error_of(exc) == "invalid_auth"
    assert emu.messages("C1") == []


def test_auth_revoke_ends_the_token_and_its_test_mode_does_not(client: WebClient) -> None:
    """auth.revoke as Slack documents it: `test=1` only says the token would go (revoked:
    false, still good); without it the token is revoked and Slack answers token_revoked."""
    assert client.auth_revoke(test=True)["revoked"] is False
    assert client.auth_test()["ok"] is True
    assert client.auth_revoke()["revoked"] is True
    with pytest.raises(SlackApiError) as exc:
        client.auth_test()
    assert error_of(exc) == "token_revoked"


def test_unknown_method(client: WebClient) -> None:
    with pytest.raises(SlackApiError) as exc:
        client.api_call("chat.frobnicate")
    assert error_of(exc) == "unknown_method"


def test_fault_429_has_retry_after_and_stores_nothing(
    emu: SlackEmulator, client: WebClient
) -> None:
    emu.fault("chat.postMessage", status=429, retry_after=2)
    with pytest.raises(SlackApiError) as exc:
        client.chat_postMessage(channel="C1", text="x")
    assert exc.value.response.status_code == 429
    assert exc.value.response.headers["Retry-After"] == "2"
    assert error_of(exc) == "ratelimited"
    assert emu.messages("C1") == []
    [call] = emu.calls("chat.postMessage")
    assert call.status == 429 and call.response["error"] == "ratelimited"
    # times=1: the fault is spent and the next call succeeds.
    client.chat_postMessage(channel="C1", text="y")
    assert [m["text"] for m in emu.messages("C1")] == ["y"]


def test_fault_500_and_times(emu: SlackEmulator, client: WebClient) -> None:
    emu.fault("chat.update", status=500, times=2)
    ts = client.chat_postMessage(channel="C1", text="a")["ts"]
    for _ in range(2):
        with pytest.raises(SlackApiError) as exc:
            client.chat_update(channel="C1", ts=ts, text="b")
        assert exc.value.response.status_code == 500
    assert emu.messages("C1")[0]["text"] == "a"
    client.chat_update(channel="C1", ts=ts, text="b")
    assert emu.messages("C1")[0]["text"] == "b"


def test_fault_error_answers_200_ok_false(emu: SlackEmulator, client: WebClient) -> None:
    emu.fault("chat.postMessage", error="channel_not_found")
    with pytest.raises(SlackApiError) as exc:
        client.chat_postMessage(channel="C1", text="x")
    assert (exc.value.response.status_code, error_of(exc)) == (200, "channel_not_found")
    assert emu.messages("C1") == []


def test_clear_faults(emu: SlackEmulator, client: WebClient) -> None:
    emu.fault("chat.postMessage", status=500, times=3)
    emu.clear_faults()
    client.chat_postMessage(channel="C1", text="x")
    with pytest.raises(ValueError):
        emu.fault("chat.postMessage")


def test_fault_delay_times_out_client_but_slack_did_the_work(emu: SlackEmulator) -> None:
    slow = WebClient(token=TOKEN, base_url=emu.api_url, timeout=1)
    emu.fault("chat.postMessage", delay=5)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        slow.chat_postMessage(channel="C1", text="x")
    assert time.monotonic() - started < 4
    # A delay-only fault models "processed, answer lost": the message exists.
    assert [m["text"] for m in emu.messages("C1")] == ["x"]


def test_stop_releases_answers_held_by_a_delay() -> None:
    emu = SlackEmulator(TOKEN).start()
    patient = WebClient(token=TOKEN, base_url=emu.api_url, timeout=30)
    emu.fault("chat.postMessage", delay=30)
    result: list[Any] = []
    worker = threading.Thread(
        target=lambda: result.append(patient.chat_postMessage(channel="C1", text="x")["ok"])
    )
    worker.start()
    assert emu.wait_for(lambda e: bool(e.calls("chat.postMessage")), timeout=5)
    started = time.monotonic()
    emu.stop()
    worker.join(timeout=5)
    assert not worker.is_alive() and result == [True]
    assert time.monotonic() - started < 3


def test_remove_channel_then_channel_not_found(emu: SlackEmulator, client: WebClient) -> None:
    client.chat_postMessage(channel="C1", text="x")
    emu.remove_channel("C1")
    attempts: list[Callable[[], object]] = [
        lambda: client.chat_postMessage(channel="C1", text="y"),
        lambda: client.conversations_history(channel="C1"),
    ]
    for call in attempts:
        with pytest.raises(SlackApiError) as exc:
            call()
        assert error_of(exc) == "channel_not_found"
    assert len(emu.messages("C1")) == 1


def test_known_channels_only_when_auto_channels_off() -> None:
    with SlackEmulator(TOKEN, auto_channels=False, channels=("CKNOWN",)) as e:
        c = WebClient(token=TOKEN, base_url=e.api_url)
        c.chat_postMessage(channel="CKNOWN", text="x")
        with pytest.raises(SlackApiError) as exc:
            c.chat_postMessage(channel="COTHER", text="x")
        assert error_of(exc) == "channel_not_found"


def test_history_pagination_newest_first(client: WebClient) -> None:
    posted = [client.chat_postMessage(channel="C1", text=f"m{i}")["ts"] for i in range(5)]
    seen: list[str] = []
    cursor = None
    pages = 0
    while pages < 10:  # bounded: a broken cursor must fail, not hang
        pages += 1
        page = client.conversations_history(channel="C1", limit=2, cursor=cursor)
        seen += [m["ts"] for m in page["messages"]]
        if not page["has_more"]:
            assert "response_metadata" not in page.data
            break
        cursor = page["response_metadata"]["next_cursor"]
    assert pages == 3
    assert seen == list(reversed(posted))
    window = client.conversations_history(channel="C1", oldest=posted[1], latest=posted[3])
    assert [m["ts"] for m in window["messages"]] == [posted[2]]


def test_thread_replies_are_not_in_history(emu: SlackEmulator, client: WebClient) -> None:
    parent = client.chat_postMessage(channel="C1", text="parent")["ts"]
    client.chat_postMessage(channel="C1", text="reply", thread_ts=parent)
    history = client.conversations_history(channel="C1")["messages"]
    assert [m["text"] for m in history] == ["parent"]
    assert history[0]["reply_count"] == 1
    replies = client.conversations_replies(channel="C1", ts=parent)["messages"]
    assert [m["text"] for m in replies] == ["parent", "reply"]
    assert len(emu.messages("C1")) == 2


def test_parallel_emulators_are_isolated() -> None:
    with SlackEmulator(TOKEN) as a, SlackEmulator(TOKEN) as b:
        assert a.port != b.port
        WebClient(token=TOKEN, base_url=a.api_url).chat_postMessage(channel="C1", text="a")
        assert len(a.messages("C1")) == 1 and b.messages("C1") == []


def test_response_url_posts_are_recorded(emu: SlackEmulator) -> None:
    from slack_sdk.webhook import WebhookClient

    url = emu.response_url_for("approval/1")
    resp = WebhookClient(url).send(text="approved", replace_original=True)
    assert (resp.status_code, resp.body) == (200, "ok")
    assert emu.responses("approval/1") == [{"text": "approved", "replace_original": True}]
    emu.fault("response_url", status=404, error="expired_url")
    assert WebhookClient(url).send(text="late").status_code == 404
    assert len(emu.responses("approval/1")) == 1


def test_calls_recorded_with_headers_and_hook(emu: SlackEmulator, client: WebClient) -> None:
    seen: list[Call] = []
    emu.on_call = seen.append
    client.chat_postMessage(channel="C1", text="x")
    client.users_info(user="U1")
    assert [c.method for c in seen] == ["chat.postMessage", "users.info"]
    [post] = emu.calls("chat.postMessage")
    assert post.headers["Authorization"] == f"Bearer {TOKEN}"
    assert post.params["channel"] == "C1" and post.status == 200 and post.response["ok"]
    emu.clear()
    assert emu.calls() == [] and emu.messages("C1") == []


def test_wait_for_wakes_on_a_call_and_times_out(emu: SlackEmulator, client: WebClient) -> None:
    assert emu.wait_for(lambda e: bool(e.messages("C1")), timeout=0.05) is False
    poster = threading.Timer(0.1, lambda: client.chat_postMessage(channel="C1", text="x"))
    started = time.monotonic()
    poster.start()
    try:
        assert emu.wait_for(lambda e: bool(e.messages("C1")), timeout=5)
        assert time.monotonic() - started < 2  # woken by the call, not by the timeout
    finally:
        poster.join()


def test_what_slack_sdk_sends(emu: SlackEmulator, client: WebClient) -> None:
    """Pins the wire formats the emulator must accept (slack_sdk always POSTs)."""
    client.auth_test()
    client.chat_postMessage(channel="C1", text="x")
    client.conversations_history(channel="C1", include_all_metadata=True)
    ctypes = {c.method: c.headers.get("Content-Type", "") for c in emu.calls()}
    assert ctypes["chat.postMessage"].startswith("application/json")
    assert ctypes["conversations.history"] == "application/x-www-form-urlencoded"
    assert emu.calls("conversations.history")[0].params["include_all_metadata"] == "1"


# -- subprocess mode -------------------------------------------------------------------------


def test_subprocess_mode_serves_and_admin_endpoints_work() -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "wakeful.devtools.emulator", "--port", "0", "--token", TOKEN],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        api_url = proc.stdout.readline().strip()
        assert api_url.startswith("http://127.0.0.1:") and api_url.endswith("/api/")
        client = WebClient(token=TOKEN, base_url=api_url)
        client.chat_postMessage(channel="C7", text="over the wire")
        remote = RemoteEmulator(api_url.removesuffix("api/"))
        assert [m["text"] for m in remote.messages("C7")] == ["over the wire"]
        assert [c.method for c in remote.calls("chat.postMessage")] == ["chat.postMessage"]

        remote.fault("chat.postMessage", status=429, retry_after=1)
        with pytest.raises(SlackApiError) as exc:
            client.chat_postMessage(channel="C7", text="limited")
        assert exc.value.response.status_code == 429
        remote.remove_channel("C7")
        with pytest.raises(SlackApiError) as exc:
            client.chat_postMessage(channel="C7", text="gone")
        assert error_of(exc) == "channel_not_found"
        assert len(remote.messages("C7")) == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
    assert code == 0


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
