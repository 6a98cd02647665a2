"""Slack's streamed messages: chat.startStream / appendStream / stopStream, the stop button a
person presses, chat.delete, and chat.update refused while a message streams.

As Slack's method pages (and slack_sdk's `ChatStream`) describe them: a stream is always a
reply in a thread; outside a DM it names the person it streams to (`recipient_team_id`,
`recipient_user_id`); one call carries at most 12,000 characters of markdown (`markdown_text`
and/or `markdown_text` chunks, the only chunk type the emulator knows); the stop's `blocks`
(at most 50) render after the text. A stream nobody stops expires `stream_ttl` seconds after
it started and keeps the text it had. Records: :meth:`StreamApi.streams` (every stream, even
deleted) and :meth:`StreamApi.open_streams` (the ones still streaming: dangling, if the app
is done with them).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from wakeful.devtools.emulator import checks
from wakeful.devtools.emulator.common import JsonDict, _json_field, _SlackError
from wakeful.devtools.emulator.methods import WebApi

CALL_TEXT_LIMIT = 12_000
"""Characters of markdown one stream call may carry (Slack's `markdown_text` limit)."""
STREAM_TTL = 300
STREAM_MAX_CHARS = 40_000
IN_PROGRESS, COMPLETED = "in_progress", "completed"


def streamed_text(params: Mapping[str, Any]) -> str:
    """The markdown one stream call adds: `markdown_text`, then each chunk's text, in order.

    Raises `_SlackError`: `invalid_arguments` (markdown_text not a string, chunks not a list),
    `invalid_chunks` (a chunk that is not `{"type": "markdown_text", "text": str}`)."""
    text = params.get("markdown_text")
    if text is not None and not isinstance(text, str):
        raise _SlackError("invalid_arguments")
    parts = [text or ""]
    chunks = _json_field(params, "chunks")
    if chunks is not None and not isinstance(chunks, list):
        raise _SlackError("invalid_arguments")
    for chunk in chunks or []:
        if (
            not isinstance(chunk, dict)
            or chunk.get("type") != "markdown_text"
            or not isinstance(chunk.get("text"), str)
        ):
            raise _SlackError("invalid_chunks")
        parts.append(chunk["text"])
    return "".join(parts)


class StreamApi(WebApi):
    """The streaming methods (mixed into SlackEmulator before WebApi, so its chat.update is
    the one that refuses a streaming message); called with the state's lock held."""

    stream_ttl: float
    """Seconds after its chat.startStream at which a stream expires (Slack: 5 minutes)."""
    stream_max_chars: int
    """Characters a streamed message may grow to over all its calls."""
    _streams: dict[tuple[str, str], JsonDict]
    """(channel, ts) -> {"message": the message dict, "started_at", "pressed",
    "stopped_by_user", "deleted"}."""

    # -- the methods -----------------------------------------------------------------------

    def _start_stream(self, params: JsonDict) -> JsonDict:
        thread_ts, to = params.get("thread_ts"), params.get("channel")
        if not _nonempty(to) or not _nonempty(thread_ts):
            raise _SlackError("invalid_arguments")  # Slack streams only replies
        direct = str(to).startswith("D")
        recipients = params.get("recipient_team_id"), params.get("recipient_user_id")
        if not direct and not all(_nonempty(r) for r in recipients):
            raise _SlackError("invalid_arguments")
        text = self._call_text(params, "")
        channel, msgs = self._channel(params)
        if channel in self._archived:
            raise _SlackError("is_archived")
        ts = self._next_ts()
        msg: JsonDict = {
            "type": "message",
            "user": self._me.bot_user_id,
            "bot_id": self._me.bot_id,
            "team": self._me.team_id,
            "text": text,
            "ts": ts,
            "thread_ts": thread_ts,
            "streaming_state": IN_PROGRESS,
        }
        for name, value in zip(("recipient_team_id", "recipient_user_id"), recipients, strict=True):
            if value is not None:
                msg[name] = value
        for parent in msgs:
            if parent["ts"] == thread_ts:
                parent["thread_ts"] = parent["ts"]
                parent["reply_count"] = parent.get("reply_count", 0) + 1
                parent["latest_reply"] = ts
        msgs.append(msg)
        self._streams[(channel, ts)] = {
            "message": msg,
            "started_at": self._clock(),
            "pressed": False,
            "stopped_by_user": False,
            "deleted": False,
        }
        return {"channel": channel, "ts": ts}

    def _append_stream(self, params: JsonDict) -> JsonDict:
        channel, stream = self._streaming(params)
        msg = stream["message"]
        msg["text"] += self._call_text(params, msg["text"])
        return {"channel": channel, "ts": msg["ts"]}

    def _stop_stream(self, params: JsonDict) -> JsonDict:
        blocks = _json_field(params, "blocks")
        if checks.blocks_error(blocks) is not None:
            raise _SlackError("invalid_blocks")
        metadata = _json_field(params, "metadata")
        channel, stream = self._streaming(params)
        msg = stream["message"]
        msg["text"] += self._call_text(params, msg["text"])
        if blocks:
            msg["blocks"] = blocks
        if metadata:
            msg["metadata"] = metadata
        msg["streaming_state"] = COMPLETED
        return {"channel": channel, "ts": msg["ts"], "message": copy.deepcopy(msg)}

    def _update(self, params: JsonDict) -> JsonDict:
        """Slack refuses to edit a message while it streams (`cant_update_message`)."""
        stream = self._streams.get((str(params.get("channel")), str(params.get("ts"))))
        if stream is not None and not stream["deleted"] and self._in_progress(stream):
            self._channel(params)  # a removed channel still answers channel_not_found
            raise _SlackError("cant_update_message")
        return super()._update(params)

    def _delete(self, params: JsonDict) -> JsonDict:
        """`chat.delete`: the bot's own message, streaming or not; its parent counts one
        reply less."""
        channel, msgs = self._channel(params)
        ts = params.get("ts")
        msg = next((m for m in msgs if m["ts"] == ts), None)
        if msg is None:
            raise _SlackError("message_not_found")
        if msg.get("user") != self._me.bot_user_id:
            raise _SlackError("cant_delete_message")
        msgs.remove(msg)
        thread = msg.get("thread_ts")
        if thread and thread != msg["ts"]:
            for parent in msgs:
                if parent["ts"] == thread:
                    parent["reply_count"] = max(parent.get("reply_count", 1) - 1, 0)
                    replies = [m["ts"] for m in msgs if m.get("thread_ts") == thread]
                    later = [r for r in replies if r != thread]
                    if later:
                        parent["latest_reply"] = later[-1]
                    else:
                        parent.pop("latest_reply", None)
        stream = self._streams.get((channel, str(ts)))
        if stream is not None:
            stream["deleted"] = True
        return {"channel": channel, "ts": ts}

    # -- scripting and records -------------------------------------------------------------

    def press_stop(self, channel: str, ts: str) -> None:
        """A person presses the stream's stop button: its next append (or stop) answers
        `stopped_by_user` and completes it. KeyError: no such stream; ValueError: it is not
        streaming (the button is gone)."""
        with self._cond:
            stream = self._streams.get((channel, ts))
            if stream is None or stream["deleted"]:
                raise KeyError(f"no stream {ts} in {channel}")
            if not self._in_progress(stream):
                raise ValueError(f"stream {ts} in {channel} is not streaming")
            stream["pressed"] = True

    def streams(self, channel: str | None = None) -> list[JsonDict]:
        """Every message chat.startStream made, oldest first, as it is now (`channel`,
        `deleted`, `stopped_by_user` and `started_at` added)."""
        with self._cond:
            self._expire_streams()
            return [
                self._record_of(key, s)
                for key, s in self._streams.items()
                if channel is None or key[0] == channel
            ]

    def open_streams(self) -> list[JsonDict]:
        """The streams still in progress (not stopped, expired or deleted): after the app is
        done, every one of them is a reply left dangling."""
        with self._cond:
            self._expire_streams()
            return [
                self._record_of(key, s)
                for key, s in self._streams.items()
                if not s["deleted"] and s["message"].get("streaming_state") == IN_PROGRESS
            ]

    # -- helpers ---------------------------------------------------------------------------

    def _streaming(self, params: JsonDict) -> tuple[str, JsonDict]:
        """The stream `params` name, still streaming; a pressed stop ends it here."""
        if not _nonempty(params.get("ts")):
            raise _SlackError("invalid_arguments")
        streamed_text(params)  # malformed arguments first, as Slack checks them
        channel, msgs = self._channel(params)
        msg = next((m for m in msgs if m["ts"] == params["ts"]), None)
        if msg is None:
            raise _SlackError("message_not_found")
        if msg.get("user") != self._me.bot_user_id:
            raise _SlackError("cant_update_message")
        stream = self._streams.get((channel, str(params["ts"])))
        if stream is None or not self._in_progress(stream):
            raise _SlackError("message_not_in_streaming_state")
        if stream["pressed"]:
            stream["stopped_by_user"] = True
            stream["message"]["streaming_state"] = COMPLETED
            raise _SlackError("stopped_by_user")
        return channel, stream

    def _call_text(self, params: JsonDict, before: str) -> str:
        """One call's text, within the per-call and per-message limits (`msg_too_long`)."""
        text = streamed_text(params)
        if len(text) > CALL_TEXT_LIMIT or len(before) + len(text) > self.stream_max_chars:
            raise _SlackError("msg_too_long")
        return text

    def _in_progress(self, stream: JsonDict) -> bool:
        """Still streaming; a stream past its ttl is completed here, with the text it had."""
        msg = stream["message"]
        if msg.get("streaming_state") != IN_PROGRESS:
            return False
        if self._clock() - stream["started_at"] >= self.stream_ttl:
            msg["streaming_state"] = COMPLETED
            return False
        return True

    def _expire_streams(self) -> None:
        for stream in self._streams.values():
            self._in_progress(stream)

    @staticmethod
    def _record_of(key: tuple[str, str], stream: JsonDict) -> JsonDict:
        record: JsonDict = copy.deepcopy(stream["message"])
        record.update(
            channel=key[0],
            deleted=stream["deleted"],
            stopped_by_user=stream["stopped_by_user"],
            started_at=stream["started_at"],
        )
        return record


def _nonempty(value: Any) -> bool:
    return isinstance(value, str) and bool(value)
