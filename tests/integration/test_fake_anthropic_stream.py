"""The fake Messages API's streamed answers (tests/support/fake_anthropic_stream.py), read by the
real anthropic SDK over real HTTP: the events and their shapes as the real API sends them, the
final message equal to the non-streamed one, the pace, the scripted faults and the hooks that let
a test act at a precise point.

The client's timeout only keeps a broken fake from hanging the suite: no assertion is timed.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import anthropic
import pydantic
import pytest
from anthropic.types import RawMessageStreamEvent, TextBlock, ToolUseBlock

from tests.support import fake_anthropic as api
from tests.support.fake_anthropic import FakeAnthropic, Scripted

MODEL = "claude-sonnet-4-5"
ASK: dict[str, Any] = {
    "model": MODEL,
    "max_tokens": 512,
    "messages": [{"role": "user", "content": "What is open this week?"}],
}
EVENT = pydantic.TypeAdapter[RawMessageStreamEvent](RawMessageStreamEvent)


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic()
    yield server
    server.close()
    assert server.unscripted == 0 and server.refused == []
    assert server.left == 0, "a scripted reply was never asked for"


def client(fake: FakeAnthropic) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=fake.base_url, api_key="x", max_retries=0, timeout=10)


@pytest.fixture
def sdk(fake: FakeAnthropic) -> Iterator[anthropic.Anthropic]:
    with client(fake) as real:
        yield real


def frames(sdk: anthropic.Anthropic, **ask: Any) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    """The content type and the (event, data) frames of a streamed answer, as sent on the wire."""
    with sdk.messages.with_streaming_response.create(**{**ASK, **ask}, stream=True) as response:
        body = b"".join(response.iter_bytes()).decode()
        kind = response.headers["content-type"]
    assert body.endswith("\n\n")
    out = []
    for raw in body.removesuffix("\n\n").split("\n\n"):
        event, data = raw.split("\n")
        assert event.startswith("event: ") and data.startswith("data: "), raw
        out.append((event.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return kind, out


def thinking(thought: str, signature: str, say: str) -> Scripted:
    content = [
        {"type": "thinking", "thinking": thought, "signature": signature},
        {"type": "text", "text": say},
    ]
    return Scripted(200, api.message(content))


def test_events_come_in_the_real_order_with_the_real_shapes(
    fake: FakeAnthropic, sdk: anthropic.Anthropic
) -> None:
    fake.script(api.tool_use("lookup", {"order": "A-17"}, "toolu_1", say="Checking A-17."))
    kind, got = frames(sdk)
    assert kind.startswith("text/event-stream")
    names = [name for name, _ in got]
    assert names == [
        "message_start",
        "content_block_start",
        "ping",
        *["content_block_delta"] * 4,  # "Chec" "king" " A-1" "7."
        "content_block_stop",
        "content_block_start",
        *["content_block_delta"] * 6,  # "" then '{"or' 'der"' ': "A' '-17"' '}'
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    for name, data in got:
        assert data["type"] == name
        if name != "ping":
            EVENT.validate_python(data)  # the SDK's own models accept every event
    start = got[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["stop_sequence"] is None and start["model"] == MODEL
    usage = fake.usages[0].body()
    assert start["usage"] == {**usage, "output_tokens": 1}
    assert got[1][1]["content_block"] == {"type": "text", "text": ""}
    texts = [d["delta"] for n, d in got[3:7]]
    assert texts == [{"type": "text_delta", "text": t} for t in ("Chec", "king", " A-1", "7.")]
    assert got[8][1] == {
        "type": "content_block_start",
        "index": 1,
        "content_block": {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}},
    }
    partial = [d["delta"] for n, d in got[9:15]]
    assert all(p["type"] == "input_json_delta" for p in partial)
    assert partial[0]["partial_json"] == ""
    assert json.loads("".join(p["partial_json"] for p in partial)) == {"order": "A-17"}
    assert got[15][1] == {"type": "content_block_stop", "index": 1}
    assert got[-2][1]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert got[-1][1] == {"type": "message_stop"}


def test_thinking_streams_its_text_then_its_signature(
    fake: FakeAnthropic, sdk: anthropic.Anthropic
) -> None:
    fake.script(thinking("Look at the refunds.", "sig==", "Two are open."))
    _, got = frames(sdk)
    assert got[1][1]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    deltas = [d["delta"] for n, d in got if n == "content_block_delta" and d["index"] == 0]
    assert [d["type"] for d in deltas] == ["thinking_delta"] * 5 + ["signature_delta"]
    assert "".join(d.get("thinking", "") for d in deltas) == "Look at the refunds."
    assert deltas[-1] == {"type": "signature_delta", "signature": "sig=="}


def test_message_delta_carries_the_usage(fake: FakeAnthropic, sdk: anthropic.Anthropic) -> None:
    system = [
        {
            "type": "text",
            "text": "You keep the books. " * 400,
            "cache_control": {"type": "ephemeral"},
        }
    ]
    for _ in range(2):  # the first writes the cache, the second reads it
        fake.script(api.text("Two refunds are open."))
        _, got = frames(sdk, system=system)
        usage = fake.usages[-1]
        delta = got[-2][1]
        assert delta["type"] == "message_delta"
        assert delta["usage"] == {
            "input_tokens": usage.input_tokens,
            "cache_creation_input_tokens": usage.cache_write,
            "cache_read_input_tokens": usage.cache_read,
            "output_tokens": usage.output_tokens,
        }
    assert fake.usages[0].cache_write > 0 and fake.usages[1].cache_read > 0


@pytest.mark.parametrize(
    "reply",
    [
        lambda: api.text("Two refunds are open: A-17 (€40) and B-2 (12 €)."),
        lambda: api.text(""),
        lambda: api.text("Stopped here", stop_reason="max_tokens"),
        lambda: api.tool_use("lookup", {"order": "A-17", "lines": [1, 2], "note": "é"}, "toolu_1"),
        lambda: api.tool_use("noop", {}, "toolu_2", say="Nothing to pass."),
        lambda: api.tool_uses(("a", {"x": 1}, "toolu_a"), ("b", {"y": [True, None]}, "toolu_b")),
        lambda: thinking("The user wants the open refunds; look them up.", "c2ln", "Two."),
        lambda: Scripted(200, api.message([{"type": "redacted_thinking", "data": "EmwK"}])),
    ],
    ids=["text", "empty", "max_tokens", "tool_use", "say_and_empty_input", "tool_uses",
         "thinking", "redacted_thinking"],
)  # fmt: skip
def test_the_final_message_equals_the_non_streamed_one(
    fake: FakeAnthropic, sdk: anthropic.Anthropic, reply: Any
) -> None:
    fake.script(reply())
    with sdk.messages.stream(**ASK) as stream:
        streamed = stream.get_final_message()
    fake.script(reply())
    plain = sdk.messages.create(**ASK)
    assert streamed.id != plain.id
    assert streamed.model_dump(exclude={"id"}) == plain.model_dump(exclude={"id"})
    assert fake.usages[0] == fake.usages[1]


def test_text_arrives_before_the_answer_ends(fake: FakeAnthropic, sdk: anthropic.Anthropic) -> None:
    hold = threading.Event()
    fake.script(api.text("Two refunds are open.", hold=hold, hold_after=1))
    with sdk.messages.stream(**ASK) as stream:
        texts = iter(stream.text_stream)
        assert next(texts) == "Two "
        assert fake.wait_deltas(1, timeout=10)  # counted once written and flushed
        assert fake.deltas.sent == [1]  # the rest is held back: the answer has not ended
        hold.set()
        assert "Two " + "".join(texts) == "Two refunds are open."
    assert fake.deltas.sent == [6]


def test_the_pace_spaces_the_deltas_and_a_reply_overrides_it() -> None:
    fake = FakeAnthropic(token_delay=600.0)
    try:
        with client(fake) as sdk:
            fake.script(api.text("Quick answer, no pace.", pace=0.0))
            with sdk.messages.stream(**ASK) as stream:
                assert stream.get_final_message().stop_reason == "end_turn"
            fake.script(api.text("Slow answer."))
            with sdk.messages.stream(**ASK) as stream:
                texts = iter(stream.text_stream)
                assert next(texts) == "Slow"
                assert fake.wait_deltas(1, timeout=10)
                assert not fake.wait_deltas(2, timeout=0.2)  # the next is 600 s away
                assert fake.deltas.sent == [6, 1]
                fake.close()  # the fake ends the wait: the client sees the connection drop
                with pytest.raises(anthropic.APIConnectionError):
                    list(texts)
    finally:
        fake.close()


def test_cut_after_ends_the_stream_without_a_stop_reason(
    fake: FakeAnthropic, sdk: anthropic.Anthropic
) -> None:
    fake.script(api.text("Two refunds are open.", cut_after=2))
    with sdk.messages.stream(**ASK) as stream:
        names = [event.type for event in stream]
        final = stream.get_final_message()
    assert "message_delta" not in names and "message_stop" not in names
    assert final.stop_reason is None
    assert len(final.content) == 1 and isinstance(final.content[0], TextBlock)
    assert final.content[0].text == "Two refu"
    fake.script(api.tool_use("lookup", {"order": "A-17"}, "toolu_1", cut_after=0))
    with sdk.messages.stream(**ASK) as stream:
        final = stream.get_final_message()
    assert final.stop_reason is None and isinstance(final.content[0], ToolUseBlock)
    assert final.content[0].input == {}
    assert fake.deltas.sent == [2, 0]


def test_drop_after_is_a_connection_error(fake: FakeAnthropic, sdk: anthropic.Anthropic) -> None:
    fake.script(api.text("Two refunds are open.", drop_after=3))
    seen: list[str] = []
    with pytest.raises(anthropic.APIConnectionError), sdk.messages.stream(**ASK) as stream:
        seen.extend(stream.text_stream)
    assert "".join(seen) == "Two refunds "


def test_error_after_raises_the_sdks_error(fake: FakeAnthropic, sdk: anthropic.Anthropic) -> None:
    fake.script(api.tool_use("lookup", {"order": "A-17"}, "toolu_1", say="Hi.", error_after=2))
    seen: list[str] = []
    with (
        pytest.raises(anthropic.APIStatusError) as raised,
        sdk.messages.stream(**ASK) as stream,
    ):
        seen.extend(event.type for event in stream)
    assert raised.value.body == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    }
    assert raised.value.type == "overloaded_error"
    assert seen.count("content_block_delta") == 2 and "message_delta" not in seen
    assert fake.deltas.sent == [2]


def test_on_request_runs_before_any_answer(fake: FakeAnthropic, sdk: anthropic.Anthropic) -> None:
    arrived, go, answered = threading.Event(), threading.Event(), threading.Event()
    seen: list[dict[str, Any]] = []

    def on_request(request: dict[str, Any]) -> None:
        seen.append(request)
        arrived.set()
        go.wait(10)

    def ask() -> None:
        with sdk.messages.stream(**ASK) as stream:
            stream.until_done()
        answered.set()

    fake.on_request = on_request
    fake.script(api.text("Two refunds are open."))
    thread = threading.Thread(target=ask)
    thread.start()
    assert arrived.wait(10)
    assert seen[0]["stream"] is True and seen[0]["messages"] == ASK["messages"]
    assert not answered.is_set() and fake.deltas.sent == [] and fake.usages == []
    go.set()
    thread.join(10)
    assert answered.is_set() and fake.deltas.sent == [6]
    fake.script(api.text("Plain."))
    sdk.messages.create(**ASK)  # a request not streamed is seen too
    assert len(seen) == 2 and "stream" not in seen[1]


def test_wait_deltas_names_a_reply(fake: FakeAnthropic, sdk: anthropic.Anthropic) -> None:
    holds = [threading.Event(), threading.Event()]
    fake.script(
        api.text("First answer.", hold=holds[0], hold_after=2),
        api.text("Second answer.", hold=holds[1], hold_after=1),
    )
    streams = [sdk.messages.stream(**ASK) for _ in holds]
    with streams[0] as first:
        texts = iter(first.text_stream)
        assert next(texts) == "Firs"
        assert fake.wait_deltas(2, timeout=10, reply=0)
        with streams[1] as second:
            assert next(iter(second.text_stream)) == "Seco"
            assert fake.wait_deltas(1, timeout=10) and fake.deltas.sent == [2, 1]
            assert not fake.wait_deltas(2, timeout=0.05)  # the latest reply is held after 1
            holds[1].set()
            assert second.get_final_message().content[0].type == "text"
        holds[0].set()
        assert "".join(texts) == "t answer."
    assert fake.deltas.sent == [4, 4]
