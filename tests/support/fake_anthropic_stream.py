"""The streamed answer of the fake Messages API (`fake_anthropic`): server-sent events as the
real API sends them for `"stream": true`, so the real SDK's `MessageStream` accumulates the same
`Message` the non-streamed answer returns.

The event shapes and their order follow the SDK's own recorded fixtures
(anthropic-sdk-python, tests/lib/streaming/fixtures): `message_start` (the message with empty
`content`, `stop_reason` null, the input usage and `output_tokens` 1), a `ping` after the first
`content_block_start`, per block its start, deltas and stop, then `message_delta` (stop reason and
cumulative usage: input, cache and output tokens) and `message_stop`. The body is chunked, each
frame flushed as it is written, so a client sees text before the answer ends.

Faults a test scripts on a reply (`StreamFaults`) count `content_block_delta` events: a pause
(`hold`), a clean early end (`cut_after`), a dropped connection (`drop_after`) and the mid-stream
`error` event the real API sends when it is overloaded (`error_after`).
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypedDict

PIECE = 4
"""Characters per delta: about one token."""
OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


class StreamFaults(TypedDict, total=False):
    """What a helper (`text`, `tool_use`, ...) passes on to its `Scripted` for a streamed answer."""

    pace: float | None
    cut_after: int | None
    drop_after: int | None
    error_after: int | None
    hold: threading.Event | None
    hold_after: int


def pieces(value: str, size: int = PIECE) -> list[str]:
    """`value` in pieces of `size` characters (one empty piece for an empty value)."""
    return [value[i : i + size] for i in range(0, len(value), size)] or [""]


def _block_events(index: int, block: dict[str, Any]) -> Iterator[dict[str, Any]]:
    kind = block.get("type")
    start = dict(block)
    deltas: list[dict[str, Any]] = []
    if kind == "text":
        start["text"] = ""
        deltas = [{"type": "text_delta", "text": p} for p in pieces(str(block["text"]))]
    elif kind in ("tool_use", "server_tool_use"):
        start["input"] = {}
        partial = json.dumps(block.get("input") or {}, ensure_ascii=False)
        deltas = [{"type": "input_json_delta", "partial_json": ""}]
        deltas += [{"type": "input_json_delta", "partial_json": p} for p in pieces(partial)]
    elif kind == "thinking":
        start.update(thinking="", signature="")
        deltas = [{"type": "thinking_delta", "thinking": p} for p in pieces(str(block["thinking"]))]
        deltas.append({"type": "signature_delta", "signature": block.get("signature", "")})
    # any other block (redacted_thinking, ...) arrives whole in its content_block_start
    yield {"type": "content_block_start", "index": index, "content_block": start}
    for delta in deltas:
        yield {"type": "content_block_delta", "index": index, "delta": delta}
    yield {"type": "content_block_stop", "index": index}


def stream_events(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The events of a complete answer (with its usage filled in), in the real API's order."""
    usage = answer["usage"]
    start = {**answer, "content": [], "stop_reason": None, "stop_sequence": None}
    start["usage"] = {**usage, "output_tokens": 1}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(answer.get("content") or []):
        events.extend(_block_events(index, block))
    events.insert(2 if len(events) > 1 else 1, {"type": "ping"})
    final = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    events.append(
        {
            "type": "message_delta",
            "delta": {
                "stop_reason": answer.get("stop_reason"),
                "stop_sequence": answer.get("stop_sequence"),
            },
            "usage": {**{k: usage[k] for k in final}, "output_tokens": usage["output_tokens"]},
        }
    )
    events.append({"type": "message_stop"})
    return events


def frame(event: dict[str, Any]) -> bytes:
    """One server-sent event: `event: <type>`, `data: <json>`, a blank line."""
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


class Deltas:
    """How many deltas each streamed reply has sent, so a test can wait for a precise point."""

    def __init__(self) -> None:
        self.sent: list[int] = []
        """Deltas sent by each streamed reply, in the order the replies started."""
        self._changed = threading.Condition()

    def start(self) -> int:
        with self._changed:
            self.sent.append(0)
            self._changed.notify_all()
            return len(self.sent) - 1

    def one_more(self, reply: int) -> None:
        with self._changed:
            self.sent[reply] += 1
            self._changed.notify_all()

    def wait(self, n: int, timeout: float, reply: int | None = None) -> bool:
        """True once reply `reply` (by default the latest started) has sent `n` deltas."""

        def reached() -> bool:
            at = len(self.sent) - 1 if reply is None else reply
            return 0 <= at < len(self.sent) and self.sent[at] >= n

        with self._changed:
            return self._changed.wait_for(reached, timeout)


class Writer:
    """Writes one streamed answer on a chunked HTTP/1.1 body, with the reply's pace and faults."""

    def __init__(
        self,
        out: io.BufferedIOBase,
        *,
        pace: float,
        closing: threading.Event,
        sent: Callable[[], None],
        faults: StreamFaults,
    ) -> None:
        self.out = out
        self.pace = pace
        self.closing = closing
        self.sent = sent
        self.faults = faults
        self.count = 0
        self.ended = False

    def _chunk(self, data: bytes) -> None:
        self.out.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.out.flush()

    def _end(self) -> None:
        self._chunk(b"")
        self.ended = True

    def _checkpoint(self) -> bool:
        """Act on a fault due after `count` deltas; False when the answer stops here."""
        f = self.faults
        hold = f.get("hold")
        if hold is not None and f.get("hold_after", 0) == self.count:
            while not hold.wait(0.05) and not self.closing.is_set():
                pass
        if f.get("drop_after") == self.count:
            return False  # no end chunk: the client sees the connection drop mid-body
        if f.get("error_after") == self.count:
            self._chunk(frame(OVERLOADED))
            self._end()
            return False
        if f.get("cut_after") == self.count:
            self._end()
            return False
        return not self.closing.is_set()

    def write(self, events: list[dict[str, Any]]) -> bool:
        """Writes `events`; True when the body was ended (complete, or cut short by a fault), so
        the connection can serve the next request; False when it dropped mid-body (`drop_after`,
        the client hung up, the fake closed), so it must be closed."""
        try:
            checked = False
            for event in events:
                is_delta = event["type"] == "content_block_delta"
                if not checked and event["type"] in ("content_block_delta", "message_delta"):
                    checked = True
                    if not self._checkpoint():
                        return self.ended
                if is_delta and self.count and self.pace > 0 and self.closing.wait(self.pace):
                    return self.ended
                self._chunk(frame(event))
                if is_delta:
                    self.count += 1
                    self.sent()
                    if not self._checkpoint():
                        return self.ended
            self._end()
            return True
        except OSError:
            return False  # the client gave up mid-answer
