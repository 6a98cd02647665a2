"""Streamed replies in Slack: core's StreamSurface (core/streams.py) on `chat.startStream`,
`chat.appendStream` and `chat.stopStream`, through slack_sdk's `chat_stream` and its buffer.

A segment is opened empty (its ts is recorded by the engine before any text goes into it), the
first text is shown at once and the rest in flushes of `BUFFER` characters or every `FLUSH_EVERY`
seconds, whichever comes first. What waits in the buffer is known here, so when Slack ends a
segment (`message_not_in_streaming_state` after about five minutes, `msg_too_long`, or
`stopped_by_user` when the person pressed stop) the engine is told exactly which text it never
showed. The streams open in this process are kept by ts; one a killed process left is stopped
and deleted by its ts alone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.web.chat_stream import ChatStream

from wakeful.bot.slack.web_client import WithToken, error_code
from wakeful.core.inbox_id import InboxId
from wakeful.core.stream_edge import StreamEnded, StreamPlace

log = logging.getLogger("wakeful")

BUFFER = 256
"""Characters slack_sdk's buffer gathers before an appendStream (its default)."""
FLUSH_EVERY = 0.5
"""Seconds text may wait in the buffer: a slow model's words still show as they come."""
ENDED = {
    "message_not_in_streaming_state": "expired",
    "msg_too_long": "too_long",
    "stopped_by_user": "stopped",
}
"""Slack's errors that end a segment, as the engine names the reason."""
GONE = ("message_not_found", "message_not_in_streaming_state", "cant_delete_message")


@dataclass
class _Open:
    stream: ChatStream
    buffer: str = ""
    """What was appended and not yet shown (slack_sdk's buffer)."""
    flushed: float = 0.0
    shown: bool = False


class SlackStreams:
    """Implements core's StreamSurface for the worker's runs."""

    def __init__(
        self,
        client: WebClient,
        tokens: Callable[[str | None], str] | None = None,
        buffer_size: int = BUFFER,
        flush_every: float = FLUSH_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.tokens = tokens
        """Distribution mode: the bot token of the workspace a stream's inbox belongs to."""
        self.buffer_size = buffer_size
        self.flush_every = flush_every
        self._clock = clock
        self._open: dict[str, _Open] = {}
        self._lock = threading.Lock()

    def _client(self, place: StreamPlace) -> Any:
        if self.tokens is None:
            return self.client
        token = self.tokens(InboxId(place.inbox).team)
        return WithToken(self.client, token)

    def start(self, place: StreamPlace) -> str:
        stream = self._client(place).chat_stream(
            channel=place.channel,
            thread_ts=place.thread_ts,
            recipient_team_id=place.team,
            recipient_user_id=place.user,
            buffer_size=self.buffer_size,
        )
        stream.append(chunks=[])  # chat.startStream, empty: its ts is recorded before any text
        ts = stream.ts
        if not ts:
            raise RuntimeError("chat.startStream answered without a ts")
        with self._lock:
            self._open[ts] = _Open(stream, flushed=self._clock())
        return str(ts)

    def append(self, place: StreamPlace, ts: str, text: str) -> None:
        held = self._held(ts)
        held.buffer += text
        now = self._clock()
        due = not held.shown or now - held.flushed >= self.flush_every
        try:
            if due:  # the first words at once, then at least every FLUSH_EVERY
                held.stream.append(markdown_text=text, chunks=[])
                self._shown(held, now)
            elif held.stream.append(markdown_text=text) is not None:
                self._shown(held, now)
        except SlackApiError as exc:
            raise self._ended(ts, held, exc) from exc

    def flush(self, place: StreamPlace, ts: str) -> None:
        held = self._held(ts)
        if not held.buffer:
            return
        try:
            held.stream.append(markdown_text="", chunks=[])
            self._shown(held, self._clock())
        except SlackApiError as exc:
            raise self._ended(ts, held, exc) from exc

    def end(self, place: StreamPlace, ts: str) -> None:
        with self._lock:
            held = self._open.pop(ts, None)
        try:
            if held is None:
                self._client(place).chat_stopStream(channel=place.channel, ts=ts)
            else:
                held.stream.stop()
        except SlackApiError as exc:
            raise self._ended(ts, held, exc) from exc

    def take_back(self, place: StreamPlace, ts: str) -> None:
        with self._lock:
            self._open.pop(ts, None)
        client = self._client(place)
        for call in (client.chat_stopStream, client.chat_delete):
            try:
                call(channel=place.channel, ts=ts)
            except SlackApiError as exc:
                if error_code(exc) not in GONE:
                    raise

    def orphans(self, place: StreamPlace, since: float) -> list[str]:
        answer = self._client(place).conversations_replies(
            channel=place.channel, ts=place.thread_ts, oldest=f"{since:.6f}", limit=100
        )
        return [
            str(m["ts"])
            for m in answer.get("messages") or []
            if m.get("bot_id")
            and m.get("ts") != place.thread_ts
            and not m.get("text")
            and not m.get("blocks")
        ]

    def _held(self, ts: str) -> _Open:
        with self._lock:
            held = self._open.get(ts)
        if held is None:
            raise StreamEnded("expired")  # not this process's: a new segment goes on
        return held

    @staticmethod
    def _shown(held: _Open, now: float) -> None:
        held.buffer, held.flushed, held.shown = "", now, True

    def _ended(self, ts: str, held: _Open | None, exc: SlackApiError) -> StreamEnded:
        """The segment is over for Slack (or its call failed): what it never showed. A
        failure that is not Slack ending it (rate limited, 5xx) ends it too: the engine goes
        on in a new segment, and the outbox stops this one after the finish."""
        with self._lock:
            self._open.pop(ts, None)
        error = error_code(exc)
        reason = ENDED.get(error, "expired")
        if error not in ENDED:
            log.warning("streamed message %s: Slack answered %s; going on in a new one", ts, error)
        return StreamEnded(reason, held.buffer if held is not None else "")  # type: ignore[arg-type]


STOPPED_LINE = "Stopped."
"""The line under a reply the person stopped (what streamed stays above it)."""


def stopped_note() -> dict[str, Any]:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": STOPPED_LINE}]}


def end_segment(client: Any, channel: str, ts: str, text: str, blocks: Any, facts: Any) -> str:
    """The outbox's end of a streamed segment (kind `stream`), after the run's finish: stopped
    with the blocks shown under its text; one Slack had ended already (expired, stopped by
    the person) is rewritten whole, the blocks under it, when it is the reply's last; one
    taken back (gone) has nothing left to end."""
    facts = facts if isinstance(facts, dict) else {}
    final, stopped = bool(facts.get("final")), bool(facts.get("stopped"))
    under = [*([stopped_note()] if stopped else []), *(blocks or [])]
    try:
        client.chat_stopStream(channel=channel, ts=ts, blocks=under or None)
        return ts
    except SlackApiError as exc:
        error = error_code(exc)
        if error == "message_not_found":
            log.info("streamed message %s is gone; nothing to end", ts)
            return ts
        if error != "message_not_in_streaming_state":
            raise
    if not (final or stopped):
        return ts  # an earlier segment: it shows what it was given
    shown = [{"type": "markdown", "text": text}] if text else []
    if shown or under:
        client.chat_update(
            channel=channel, ts=ts, text=text or STOPPED_LINE, blocks=[*shown, *under]
        )
    return ts
