"""What the edge does for a streamed reply (bot/slack/streams.py on Slack's streaming methods),
and how it tells the engine's books (core/streams.py) that the destination ended a message."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

Reason = Literal["expired", "too_long", "stopped"]


class StreamEnded(Exception):
    """The destination ended a segment: `expired` (too old), `too_long`, or `stopped` (the
    person pressed stop). `undelivered`: the end of what was handed over that it never
    showed, to go on in the next segment (or nowhere, when stopped)."""

    def __init__(self, reason: Reason, undelivered: str = "") -> None:
        super().__init__(reason)
        self.reason: Reason = reason
        self.undelivered = undelivered


@dataclass(frozen=True, slots=True)
class StreamPlace:
    """Where a streamed reply goes: under the message it answers, for the person who wrote."""

    channel: str
    thread_ts: str
    """The ts of the message it answers (Slack streams only replies), or its thread's."""
    team: str
    user: str
    inbox: str
    """Whose workspace the calls are made in."""


class StreamSurface(Protocol):
    """What the edge does for a stream (bot/slack/streams.py)."""

    def start(self, place: StreamPlace) -> str:
        """Open a new, empty segment; its message's ts."""
        ...

    def append(self, place: StreamPlace, ts: str, text: str) -> None:
        """Add text (it may wait in a buffer); StreamEnded when the segment has ended."""
        ...

    def flush(self, place: StreamPlace, ts: str) -> None:
        """Show what waits in the buffer now; StreamEnded as `append`."""
        ...

    def end(self, place: StreamPlace, ts: str) -> None:
        """End the segment (its buffer shown first); StreamEnded when it had ended already."""
        ...

    def take_back(self, place: StreamPlace, ts: str) -> None:
        """Stop and delete the segment's message: best effort, quiet when it is gone."""
        ...

    def orphans(self, place: StreamPlace, since: float) -> list[str]:
        """The app's empty messages under `place`'s thread since `since` (epoch seconds): a
        segment started whose ts was never recorded (a crash in between; no text goes into a
        segment before its record, so it is empty)."""
        ...
