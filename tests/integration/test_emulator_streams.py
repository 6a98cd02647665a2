"""The emulator's streamed messages must refuse what Slack refuses (limits, expiry, the stop
button, edits while streaming) to a real ``slack_sdk.WebClient`` and its ``chat_stream``
helper, or a test of wakeful's streaming proves nothing."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from wakeful.devtools.emulator import SlackEmulator
from wakeful.devtools.emulator.common import _no_proxy_opener

TOKEN = "xoxb-stream-test"
CHANNEL = "C1"
TO: dict[str, Any] = {"recipient_team_id": "T1", "recipient_user_id": "U1"}


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def emu(clock: Clock) -> Iterator[SlackEmulator]:
    with SlackEmulator(bot_token=TOKEN, clock=clock) as e:
        yield e


@pytest.fixture
def client(emu: SlackEmulator) -> WebClient:
    return WebClient(token=TOKEN, base_url=emu.api_url)


def error(call: Any, **kwargs: Any) -> str:
    """The Slack error `call(**kwargs)` answers (it must fail)."""
    with pytest.raises(SlackApiError) as exc:
        call(**kwargs)
    return str(exc.value.response["error"])


def start(emu: SlackEmulator, client: WebClient, text: str = "Hello", **kw: Any) -> str:
    parent = emu.add_message(CHANNEL, "U1", "a question")
    args: dict[str, Any] = {"channel": CHANNEL, "thread_ts": parent, **TO, **kw}
    return str(client.chat_startStream(markdown_text=text, **args)["ts"])


def message(emu: SlackEmulator, ts: str, channel: str = CHANNEL) -> dict[str, Any]:
    return next(m for m in emu.messages(channel) if m["ts"] == ts)


def admin(emu: SlackEmulator, action: str, **query: str) -> Any:
    url = f"{emu.base_url}_emulator/{action}?{urllib.parse.urlencode(query)}"
    with _no_proxy_opener().open(url, timeout=5) as resp:
        return json.loads(resp.read())


# -- the happy path through slack_sdk's helper -----------------------------------------------


def test_chat_stream_builds_one_threaded_reply_as_it_streams(
    emu: SlackEmulator, client: WebClient
) -> None:
    parent = emu.add_message(CHANNEL, "U1", "a question")
    stream = client.chat_stream(channel=CHANNEL, thread_ts=parent, buffer_size=4, **TO)
    stream.append(markdown_text="Hel")  # buffered: no call yet
    assert emu.calls("chat.startStream") == []
    stream.append(markdown_text="lo, ")
    assert stream.ts is not None
    live = message(emu, stream.ts)
    assert live["text"] == "Hello, "
    assert live["streaming_state"] == "in_progress"
    assert (live["user"], live["bot_id"], live["team"]) == ("UBOT", "BBOT", "T1")
    assert (live["recipient_team_id"], live["recipient_user_id"]) == ("T1", "U1")
    assert live["thread_ts"] == parent
    top = message(emu, parent)
    assert (top["reply_count"], top["latest_reply"]) == (1, stream.ts)
    assert [s["ts"] for s in emu.open_streams()] == [stream.ts]
    stream.append(markdown_text="world")
    assert message(emu, stream.ts)["text"] == "Hello, world"
    done = stream.stop(markdown_text="!", blocks=[{"type": "divider"}])
    assert done["message"]["text"] == "Hello, world!"
    assert done["message"]["streaming_state"] == "completed"
    assert done["message"]["blocks"] == [{"type": "divider"}]
    assert message(emu, stream.ts) == done["message"]
    assert emu.open_streams() == []
    assert [c.method for c in emu.calls() if c.method.endswith("Stream")] == [
        "chat.startStream",
        "chat.appendStream",
        "chat.stopStream",
    ]


# -- chat.startStream --------------------------------------------------------------------------


def test_a_stream_is_always_a_reply(emu: SlackEmulator, client: WebClient) -> None:
    assert error(client.chat_startStream, channel=CHANNEL, thread_ts="", **TO) == (
        "invalid_arguments"
    )
    no_channel = {"thread_ts": "1.1", **TO}
    assert error(client.api_call, api_method="chat.startStream", json=no_channel) == (
        "invalid_arguments"
    )
    assert emu.streams() == []


def test_outside_a_dm_a_stream_names_its_recipient(emu: SlackEmulator, client: WebClient) -> None:
    for missing in ("recipient_team_id", "recipient_user_id"):
        args = {k: v for k, v in TO.items() if k != missing}
        got = error(client.chat_startStream, channel=CHANNEL, thread_ts="1.1", **args)
        assert got == "invalid_arguments"
    dm = client.chat_startStream(channel="D1", thread_ts="1.1", markdown_text="hi")
    assert message(emu, str(dm["ts"]), "D1")["text"] == "hi"


def test_a_stream_may_start_empty(emu: SlackEmulator, client: WebClient) -> None:
    ts = client.chat_startStream(channel="D1", thread_ts="1.1")["ts"]
    assert message(emu, str(ts), "D1")["text"] == ""


def test_no_stream_in_an_archived_channel(emu: SlackEmulator, client: WebClient) -> None:
    emu.archive_channel(CHANNEL)
    got = error(client.chat_startStream, channel=CHANNEL, thread_ts="1.1", **TO)
    assert got == "is_archived"


def test_every_stream_method_needs_chat_write(emu: SlackEmulator, client: WebClient) -> None:
    ts = start(emu, client)
    emu.scopes = [s for s in emu.scopes if s != "chat:write"]
    calls = [
        (client.chat_startStream, {"channel": "D1", "thread_ts": "1.1"}),
        (client.chat_appendStream, {"channel": CHANNEL, "ts": ts, "markdown_text": "x"}),
        (client.chat_stopStream, {"channel": CHANNEL, "ts": ts}),
        (client.chat_delete, {"channel": CHANNEL, "ts": ts}),
    ]
    for call, kwargs in calls:
        assert error(call, **kwargs) == "missing_scope"
    assert message(emu, ts)["text"] == "Hello"


# -- the text of a call ------------------------------------------------------------------------


def test_text_comes_as_markdown_text_then_markdown_chunks(
    emu: SlackEmulator, client: WebClient
) -> None:
    ts = start(emu, client, text="a")
    chunks = [{"type": "markdown_text", "text": "c"}, {"type": "markdown_text", "text": "d"}]
    client.chat_appendStream(channel=CHANNEL, ts=ts, markdown_text="b", chunks=chunks)
    assert message(emu, ts)["text"] == "abcd"
    plan = [{"type": "plan_update", "title": "x"}]
    assert error(client.chat_appendStream, channel=CHANNEL, ts=ts, chunks=plan) == (
        "invalid_chunks"
    )
    untyped = [{"text": "e"}]
    assert error(client.chat_appendStream, channel=CHANNEL, ts=ts, chunks=untyped) == (
        "invalid_chunks"
    )
    not_a_list = {"channel": CHANNEL, "ts": ts, "chunks": {"type": "markdown_text"}}
    assert error(client.api_call, api_method="chat.appendStream", json=not_a_list) == (
        "invalid_arguments"
    )
    assert message(emu, ts)["text"] == "abcd"


def test_one_call_carries_at_most_12000_characters(emu: SlackEmulator, client: WebClient) -> None:
    ts = start(emu, client, text="")
    half = [{"type": "markdown_text", "text": "y" * 6_000}]
    too_long = {"markdown_text": "x" * 6_001, "chunks": half}
    assert error(client.chat_appendStream, channel=CHANNEL, ts=ts, **too_long) == "msg_too_long"
    assert message(emu, ts)["text"] == ""
    client.chat_appendStream(channel=CHANNEL, ts=ts, markdown_text="x" * 12_000)
    assert len(message(emu, ts)["text"]) == 12_000
    got = error(client.chat_stopStream, channel=CHANNEL, ts=ts, markdown_text="x" * 12_001)
    assert got == "msg_too_long"
    assert message(emu, ts)["streaming_state"] == "in_progress"
    parent = emu.add_message(CHANNEL, "U1", "again")
    got = error(
        client.chat_startStream,
        channel=CHANNEL,
        thread_ts=parent,
        markdown_text="x" * 12_001,
        **TO,
    )
    assert got == "msg_too_long"
    assert len(emu.streams()) == 1


def test_a_streamed_message_grows_to_stream_max_chars(clock: Clock) -> None:
    with SlackEmulator(bot_token=TOKEN, clock=clock, stream_max_chars=10) as emu:
        client = WebClient(token=TOKEN, base_url=emu.api_url)
        ts = start(emu, client, text="12345")
        client.chat_appendStream(channel=CHANNEL, ts=ts, markdown_text="67890")
        got = error(client.chat_appendStream, channel=CHANNEL, ts=ts, markdown_text="!")
        assert got == "msg_too_long"
        assert error(client.chat_stopStream, channel=CHANNEL, ts=ts, markdown_text="!") == (
            "msg_too_long"
        )
        assert message(emu, ts)["text"] == "1234567890"
        client.chat_stopStream(channel=CHANNEL, ts=ts)
        assert message(emu, ts)["streaming_state"] == "completed"


# -- chat.appendStream / chat.stopStream ---------------------------------------------------------


def test_only_the_bots_streaming_message_takes_more(emu: SlackEmulator, client: WebClient) -> None:
    append = client.chat_appendStream
    assert error(append, channel=CHANNEL, ts="9.9", markdown_text="x") == "message_not_found"
    theirs = emu.add_message(CHANNEL, "U1", "mine")
    assert error(append, channel=CHANNEL, ts=theirs, markdown_text="x") == "cant_update_message"
    posted = str(client.chat_postMessage(channel=CHANNEL, text="plain")["ts"])
    got = error(append, channel=CHANNEL, ts=posted, markdown_text="x")
    assert got == "message_not_in_streaming_state"
    ts = start(emu, client)
    client.chat_stopStream(channel=CHANNEL, ts=ts)
    got = error(append, channel=CHANNEL, ts=ts, markdown_text="x")
    assert got == "message_not_in_streaming_state"
    got = error(client.chat_stopStream, channel=CHANNEL, ts=ts)
    assert got == "message_not_in_streaming_state"
    assert error(client.chat_stopStream, channel=CHANNEL, ts=theirs) == "cant_update_message"


def test_the_stop_blocks_are_checked_and_kept_after_the_text(
    emu: SlackEmulator, client: WebClient
) -> None:
    ts = start(emu, client)
    too_many = [{"type": "divider"}] * 51
    assert error(client.chat_stopStream, channel=CHANNEL, ts=ts, blocks=too_many) == (
        "invalid_blocks"
    )
    long = [{"type": "markdown", "text": "x" * 12_001}]
    assert error(client.chat_stopStream, channel=CHANNEL, ts=ts, blocks=long) == ("invalid_blocks")
    assert message(emu, ts)["streaming_state"] == "in_progress"
    blocks = [{"type": "markdown", "text": "**sources**"}, {"type": "divider"}] + [
        {"type": "divider"}
    ] * 48
    meta = {"event_type": "reply", "event_payload": {"id": "1"}}
    client.chat_stopStream(channel=CHANNEL, ts=ts, blocks=blocks, metadata=meta)
    done = message(emu, ts)
    assert (done["text"], done["blocks"], done["streaming_state"]) == (
        "Hello",
        blocks,
        "completed",
    )
    assert done["metadata"] == meta


def test_a_markdown_block_is_a_block_slack_takes(emu: SlackEmulator, client: WebClient) -> None:
    client.chat_postMessage(channel=CHANNEL, text="t", blocks=[{"type": "markdown", "text": "*"}])
    long = [{"type": "markdown", "text": "x" * 12_001}]
    assert error(client.chat_postMessage, channel=CHANNEL, text="t", blocks=long) == (
        "invalid_blocks"
    )
    not_text = [{"type": "markdown", "text": {"type": "mrkdwn", "text": "x"}}]
    assert error(client.chat_postMessage, channel=CHANNEL, text="t", blocks=not_text) == (
        "invalid_blocks"
    )


# -- expiry, the stop button -------------------------------------------------------------------


def test_a_stream_expires_stream_ttl_after_its_start_keeping_its_text(
    emu: SlackEmulator, client: WebClient, clock: Clock
) -> None:
    assert emu.stream_ttl == 300
    ts = start(emu, client)
    clock.now += 299
    client.chat_appendStream(channel=CHANNEL, ts=ts, markdown_text=" there")
    clock.now += 1
    assert emu.open_streams() == []
    expired = message(emu, ts)
    assert (expired["text"], expired["streaming_state"]) == ("Hello there", "completed")
    got = error(client.chat_appendStream, channel=CHANNEL, ts=ts, markdown_text="x")
    assert got == "message_not_in_streaming_state"
    assert error(client.chat_stopStream, channel=CHANNEL, ts=ts) == (
        "message_not_in_streaming_state"
    )
    assert message(emu, ts)["text"] == "Hello there"


def test_stop_pressed_answers_the_next_append_and_ends_the_stream(
    emu: SlackEmulator, client: WebClient
) -> None:
    ts = start(emu, client)
    emu.press_stop(CHANNEL, ts)
    got = error(client.chat_appendStream, channel=CHANNEL, ts=ts, markdown_text=" more")
    assert got == "stopped_by_user"
    stopped = emu.streams(CHANNEL)[0]
    assert (stopped["text"], stopped["streaming_state"]) == ("Hello", "completed")
    assert stopped["stopped_by_user"] is True
    got = error(client.chat_appendStream, channel=CHANNEL, ts=ts, markdown_text=" more")
    assert got == "message_not_in_streaming_state"
    assert error(client.chat_stopStream, channel=CHANNEL, ts=ts) == (
        "message_not_in_streaming_state"
    )
    with pytest.raises(ValueError, match="not streaming"):
        emu.press_stop(CHANNEL, ts)
    with pytest.raises(KeyError):
        emu.press_stop(CHANNEL, "9.9")


def test_stop_pressed_before_the_stop_call_answers_it_too(
    emu: SlackEmulator, client: WebClient
) -> None:
    ts = start(emu, client)
    emu.press_stop(CHANNEL, ts)
    assert error(client.chat_stopStream, channel=CHANNEL, ts=ts, markdown_text="!") == (
        "stopped_by_user"
    )
    assert message(emu, ts)["text"] == "Hello"
    assert message(emu, ts)["streaming_state"] == "completed"


# -- chat.update, chat.delete ------------------------------------------------------------------


def test_a_streaming_message_cannot_be_updated_until_it_completes(
    emu: SlackEmulator, client: WebClient, clock: Clock
) -> None:
    ts = start(emu, client)
    assert error(client.chat_update, channel=CHANNEL, ts=ts, text="edited") == (
        "cant_update_message"
    )
    assert message(emu, ts)["text"] == "Hello"
    client.chat_stopStream(channel=CHANNEL, ts=ts)
    client.chat_update(channel=CHANNEL, ts=ts, text="edited", blocks=[{"type": "divider"}])
    assert (message(emu, ts)["text"], message(emu, ts)["blocks"]) == (
        "edited",
        [{"type": "divider"}],
    )
    expiring = start(emu, client)
    clock.now += 300
    client.chat_update(channel=CHANNEL, ts=expiring, text="after the ttl")
    assert message(emu, expiring)["text"] == "after the ttl"


def test_delete_removes_the_bots_message_streaming_or_not(
    emu: SlackEmulator, client: WebClient
) -> None:
    parent = emu.add_message(CHANNEL, "U1", "a question")
    first = str(client.chat_postMessage(channel=CHANNEL, thread_ts=parent, text="one")["ts"])
    ts = str(client.chat_startStream(channel=CHANNEL, thread_ts=parent, **TO)["ts"])
    assert (message(emu, parent)["reply_count"], message(emu, parent)["latest_reply"]) == (2, ts)
    assert client.chat_delete(channel=CHANNEL, ts=ts)["ts"] == ts
    assert [m["ts"] for m in emu.messages(CHANNEL)] == [parent, first]
    assert (message(emu, parent)["reply_count"], message(emu, parent)["latest_reply"]) == (
        1,
        first,
    )
    assert emu.streams()[0]["deleted"] is True
    assert emu.open_streams() == []
    got = error(client.chat_appendStream, channel=CHANNEL, ts=ts, markdown_text="x")
    assert got == "message_not_found"
    assert error(client.chat_delete, channel=CHANNEL, ts=ts) == "message_not_found"
    assert error(client.chat_delete, channel=CHANNEL, ts=parent) == "cant_delete_message"
    client.chat_delete(channel=CHANNEL, ts=first)
    assert message(emu, parent)["reply_count"] == 0
    assert "latest_reply" not in message(emu, parent)


# -- records and the admin API -----------------------------------------------------------------


def test_streams_and_open_streams_over_the_admin_api(emu: SlackEmulator, client: WebClient) -> None:
    dangling = start(emu, client, text="left open")
    finished = start(emu, client, text="done")
    client.chat_stopStream(channel=CHANNEL, ts=finished)
    client.chat_startStream(channel="D1", thread_ts="1.1", markdown_text="dm")
    assert [s["ts"] for s in admin(emu, "streams", channel=CHANNEL)] == [dangling, finished]
    assert len(admin(emu, "streams")) == 3
    assert [s["text"] for s in admin(emu, "open_streams")] == ["left open", "dm"]
    assert admin(emu, "press_stop", channel=CHANNEL, ts=dangling) == {"ok": True}
    got = error(client.chat_appendStream, channel=CHANNEL, ts=dangling, markdown_text="x")
    assert got == "stopped_by_user"
    assert [s["text"] for s in admin(emu, "open_streams")] == ["dm"]
    req = urllib.request.Request(f"{emu.base_url}_emulator/press_stop?channel=C1")
    with pytest.raises(urllib.error.HTTPError) as exc:
        _no_proxy_opener().open(req, timeout=5)
    exc.value.close()  # the error is the response: closed, as a read one would be
    assert exc.value.code == 400
    emu.clear()
    assert emu.streams() == []
