"""The Slack emulator must behave like Slack to a real ``slack_sdk.WebClient``, or every test
built on it proves nothing: the Web API, faults, and the emulator as a subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from tests.support.emulator_fixtures import (
    TOKEN,
    client,
    emu,
    error_of,
)
from wakeful.devtools.emulator import Call, RemoteEmulator, SlackEmulator

__all__ = ["client", "emu"]  # the fixtures of tests/support/emulator_fixtures.py, used here


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
