"""Streamed replies: a reply that shows in its conversation while it is being written, and still
ends as exactly one complete answer whatever crashes.

The edge writes the text (bot/slack/streams.py: Slack's chat.startStream / appendStream /
stopStream through slack_sdk's `chat_stream`); this module keeps the books. Each message a
stream opens (a *segment*) is recorded as a durable step before any text goes into it, so a
retried run finds what a killed attempt left and takes it back (stopped, then deleted) before
it answers. A segment is ended and the text goes on in a new one once it is
WAKEFUL_STREAM_SEGMENT seconds old or holds SEGMENT_CHARS, or when the destination ends it
(expired, too long): the segments' texts joined are exactly what was written. The last one is
ended by the outbox after the run's fenced finish (a row of kind `stream`, with the blocks
shown under the text), so a run that never finishes never shows a finished answer. A person
who presses stop ends the stream where it was; the record of it makes a retry stop too.

A run without an edge that streams (the Harness, a test), or a reply to no person's message
(a timer, a digest), gets a stream that only collects the text and posts it as an ordinary
reply when closed.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wakeful.core import effects as fx
from wakeful.core.errors import InvalidInput
from wakeful.core.events import Conversation
from wakeful.core.stream_edge import StreamEnded, StreamPlace, StreamSurface

if TYPE_CHECKING:
    from wakeful.core.steps import StepLedger

log = logging.getLogger("wakeful")

SEGMENT_CHARS = 12_000
"""Characters one segment holds at most: what one call, or one block, may carry in Slack, so a
segment can always be shown again whole (a fallback chat.update)."""
PIECE = 4_000
"""Characters handed to the edge at once (its buffer adds at most a few hundred more)."""
MIN_CAP = 100
"""The fewest characters a segment is given after the destination found one too long."""
GIVE_UP_AFTER = 3
"""Segments in a row that showed nothing before the rest goes as an ordinary reply."""
STREAM = "stream"
"""The outbox kind that ends a segment after the finish (core/kinds.py)."""


@dataclass
class Segment:
    ts: str
    started: float
    text: str = ""
    """What it was handed (less what it said it never showed)."""
    ended: bool = False


@dataclass
class RunStreams:
    """A run's streams and the records behind them: one per run, made by the Run."""

    surface: StreamSurface | None
    ledger: StepLedger
    key: Callable[[str], str]
    """A step's key from its name (the run's inbox and first event)."""
    heartbeat: Callable[[], None]
    inbox: str
    now: int
    segment_seconds: int
    retried: bool
    """The batch was claimed before: an earlier attempt may have left segments."""
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    streams: list[Stream] = field(default_factory=list)
    token: str = ""
    """This attempt's name for its segments (`stream:<token>:seg:<i>`), registered once."""
    settled: bool = False
    stopped_before: dict[str, Any] | None = None
    """An earlier attempt's stream the person stopped (what it showed): kept, not redone."""

    def open(self, where: Conversation, place: StreamPlace | None) -> Stream:
        """A stream of the run: live under `place`, or collecting only (no place, no edge)."""
        self.settle()
        live = place is not None and self.surface is not None
        stream = Stream(self, where, place if live else None)
        if live and self.stopped_before is not None:
            stream.stopped = True  # a retry of a run the person stopped: it stays stopped
        self.streams.append(stream)
        return stream

    @property
    def stopped_by_user(self) -> bool:
        """Known from the run's start: asking settles (an earlier attempt's stop is read)."""
        self.settle()
        return self.stopped_before is not None or any(s.stopped for s in self.streams)

    def settle(self) -> None:
        """Once per run, before it streams or finishes: take back what earlier attempts of
        this batch left (a killed run's half answer), keep what a stopped one showed."""
        if self.settled or self.surface is None:
            return
        self.settled = True
        if not self.retried:
            return
        for token in self._earlier_tokens():
            self._take_back_earlier(token)

    def _earlier_tokens(self) -> list[str]:
        tokens: list[str] = []
        j = 0
        while (found := self.ledger.recorded_step(self.key(f"stream:run:{j}"))) is not None:
            if isinstance(found.result, dict) and found.result.get("token"):
                tokens.append(str(found.result["token"]))
            j += 1
        return tokens

    def _take_back_earlier(self, token: str) -> None:
        if self.ledger.recorded_step(self.key(f"stream:{token}:gone")) is not None:
            return
        stopped = self.ledger.recorded_step(self.key(f"stream:{token}:stopped"))
        if stopped is not None and isinstance(stopped.result, dict):
            self.stopped_before = stopped.result
            return
        i = 0
        while (seg := self.ledger.recorded_step(self.key(f"stream:{token}:seg:{i}"))) is not None:
            self._take_back(seg.result)
            i += 1
        opening = self.ledger.recorded_step(self.key(f"stream:{token}:opening:{i}"))
        if opening is not None and isinstance(opening.result, dict):
            self._take_back_orphans(opening.result)  # killed between its start and its record
        self._record(f"stream:{token}:gone", {"segments": i})

    def _take_back_orphans(self, opening: dict[str, Any]) -> None:
        if self.surface is None:
            return
        place = StreamPlace(**opening["place"])
        try:
            for ts in self.surface.orphans(place, float(opening["since"])):
                self.surface.take_back(place, ts)
        except Exception as exc:  # best effort, as any take-back
            log.warning("could not look for a streamed message left unrecorded: %s", exc)

    def _take_back(self, seg: Any) -> None:
        if self.surface is None or not isinstance(seg, dict):
            return
        place = StreamPlace(**seg["place"])
        try:
            self.surface.take_back(place, str(seg["ts"]))
        except Exception as exc:  # best effort: the retry's answer matters more
            log.warning("could not take back streamed message %s: %s", seg.get("ts"), exc)

    def register(self) -> str:
        """This attempt's token, recorded under the first free `stream:run:<j>`."""
        if self.token:
            return self.token
        token = uuid.uuid4().hex[:16]
        j = 0
        while True:
            name = f"stream:run:{j}"
            if self.ledger.recorded_step(self.key(name)) is None:
                stood = self._record(name, {"token": token})
                if isinstance(stood, dict) and stood.get("token") == token:
                    self.token = token
                    return token
            j += 1

    def _record(self, name: str, value: Any) -> Any:
        return self.ledger.record_step(
            self.key(name), self.inbox, name, None, value, self.now, replay=True
        )

    def abandon(self) -> None:
        """The run ends without its finish (failed, interrupted, lease lost): take back every
        segment it opened, so no half answer stays and no stream stays open."""
        if self.surface is None or not self.token:
            return
        for stream in self.streams:
            for seg in stream.segments:
                self._take_back({"ts": seg.ts, "place": _place_fields(stream.place)})
        try:
            self._record(f"stream:{self.token}:gone", {"abandoned": True})
        except Exception as exc:  # the store may be why the run ends: a retry looks again
            log.warning("could not record the streams taken back: %s", exc)

    def posts(self) -> list[fx.Post]:
        """What the finish writes: one `stream` row per segment (the last carries the blocks
        and ends it after the commit), or a collecting stream's text as an ordinary reply."""
        self.settle()
        out: list[fx.Post] = []
        if self.stopped_before is not None and not any(s.segments for s in self.streams):
            blocks = next((s.blocks for s in self.streams if s.blocks), None)
            out += _rows_of_stopped(self.stopped_before, blocks)
        for stream in self.streams:
            out += stream.posts()
        return out


class Stream:
    """One streamed reply (`run.stream(to=...)`): `write` text as it comes, `close` when done
    (or use it as a context manager). Closing twice, or writing after, is an error."""

    def __init__(self, books: RunStreams, where: Conversation, place: StreamPlace | None) -> None:
        self._books = books
        self.where = where
        self.place = place
        self.text = ""
        """Everything written so far."""
        self.stopped = False
        """The person pressed stop: nothing more is shown (and an agent should stop working)."""
        self.segments: list[Segment] = []
        self._pending = ""
        self._cap = SEGMENT_CHARS
        """Characters one segment takes: halved (down to MIN_CAP) each time one is too long."""
        self._blank = 0
        """Segments in a row the destination ended before they showed anything."""
        self._rest: str | None = None
        """Once the destination will not stream (it refuses to start one, or ends every one
        before it shows anything): the rest of the text, posted as an ordinary reply."""
        self._closed = False
        self.blocks: list[dict[str, Any]] | None = None
        """What shows under the text once closed."""

    @property
    def live(self) -> bool:
        """Whether the text shows as it is written (else it is posted when closed)."""
        return self.place is not None

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is None and not self._closed:
            self.close()

    def write(self, text: str) -> None:
        """Add `text` to the reply; shown at once when live."""
        if self._closed:
            raise InvalidInput("this stream is closed: open another with run.stream(...)")
        if not isinstance(text, str):
            raise InvalidInput("a stream takes text")
        if self.stopped or not text:
            return
        self.text += text
        if self.place is None:
            return
        if self._rest is not None:
            self._rest += text
            return
        self._pending += text
        self._push()

    def close(self, blocks: list[dict[str, Any]] | None = None) -> None:
        """The reply is complete: `blocks` show under it (feedback buttons). Live, what waits
        in the edge's buffer is shown now; the last segment is ended after the finish."""
        if self._closed:
            raise InvalidInput("this stream is closed already")
        self._closed = True
        self.blocks = blocks
        if self.place is None or self.stopped or not self.segments or self._rest is not None:
            return
        seg = self.segments[-1]
        surface = self._surface
        while not seg.ended:
            try:
                surface.flush(self.place, seg.ts)
                break
            except StreamEnded as end:
                self._ended(seg, end)
                if self.stopped or not self._pending:
                    break
                self._push()
                seg = self.segments[-1]

    @property
    def _surface(self) -> StreamSurface:
        surface = self._books.surface
        assert surface is not None  # a live stream has one
        return surface

    def _push(self) -> None:
        assert self.place is not None
        while self._pending and not self.stopped and self._rest is None:
            seg = self.segments[-1] if self.segments else None
            if seg is None or seg.ended or self._due(seg):
                self._next_segment()
                continue
            room = min(PIECE, self._cap - len(seg.text))
            piece, self._pending = self._pending[:room], self._pending[room:]
            seg.text += piece
            try:
                self._surface.append(self.place, seg.ts, piece)
            except StreamEnded as end:
                self._ended(seg, end)

    def _due(self, seg: Segment) -> bool:
        old = self._books.clock() - seg.started >= self._books.segment_seconds
        return old or len(seg.text) >= self._cap

    def _ended(self, seg: Segment, end: StreamEnded) -> None:
        """The destination ended `seg`: what it never showed goes on in the next segment,
        unless the person stopped it (then nothing more is shown)."""
        seg.ended = True
        lost = end.undelivered
        if end.reason == "too_long":
            self._cap = max(MIN_CAP, len(seg.text) // 2)
        if lost and seg.text.endswith(lost):
            seg.text = seg.text[: len(seg.text) - len(lost)]
        if end.reason == "stopped":
            self._stop(seg)
            return
        self._pending = lost + self._pending
        self._blank = 0 if seg.text else self._blank + 1
        if self._blank >= GIVE_UP_AFTER:
            log.warning("streams keep ending before they show anything; the rest is posted")
            self._give_up()

    def _give_up(self) -> None:
        """The destination will not stream: the rest goes as an ordinary reply."""
        self._rest = (self._rest or "") + self._pending
        self._pending = ""

    def _next_segment(self) -> None:
        """End the current segment (what it would not show goes on) and open the next, its
        ts recorded before any text goes into it."""
        assert self.place is not None
        books, surface = self._books, self._surface
        if self.segments and not self.segments[-1].ended:
            seg = self.segments[-1]
            try:
                surface.end(self.place, seg.ts)
                seg.ended = True
            except StreamEnded as end:
                self._ended(seg, end)
                if self.stopped:
                    return
        token = books.register()
        books.heartbeat()  # a run that lost its lease opens nothing more
        n = sum(len(s.segments) for s in books.streams)
        opening = {"place": _place_fields(self.place), "since": books.wall() - 1}
        books._record(f"stream:{token}:opening:{n}", opening)  # a kill before the next record
        try:
            ts = surface.start(self.place)
        except Exception as exc:  # not in that channel, rate limited: the reply still goes
            log.warning("could not start a streamed reply (%s); it is posted instead", exc)
            books._take_back_orphans(opening)  # one Slack made, its answer lost (a timeout)
            self._give_up()
            return
        seg = Segment(ts, books.clock())
        self.segments.append(seg)
        record = {"ts": ts, "place": _place_fields(self.place)}
        books._record(f"stream:{token}:seg:{n}", record)

    def _stop(self, seg: Segment) -> None:
        self.stopped = True
        self._pending = ""
        books = self._books
        shown = [{"ts": s.ts, "text": s.text} for s in self.segments]
        record = {
            "segments": shown,
            "channel": self.where.channel,
            "thread_ts": self.where.thread_ts,
        }
        books._record(f"stream:{books.register()}:stopped", record)

    def posts(self) -> list[fx.Post]:
        where = self.where
        if self.place is None or self._rest is not None:
            text = self.text if self.place is None else self._rest or ""
            blocks = self.blocks if self.place is None else None  # buttons alone hide text
            rows = [] if self.place is None else self._segment_rows()
            if text.strip():
                rows.append(
                    fx.Post(
                        where.channel,
                        text,
                        thread_ts=where.thread_ts,
                        blocks=blocks,
                        priority="urgent",
                    )
                )
            return rows
        return self._segment_rows()

    def _segment_rows(self) -> list[fx.Post]:
        last = len(self.segments) - 1
        return [
            _row(
                self.where.channel,
                self.where.thread_ts,
                seg.ts,
                seg.text,
                self.blocks if i == last else None,
                final=i == last,
                stopped=self.stopped and i == last,
                ended=seg.ended,
            )
            for i, seg in enumerate(self.segments)
        ]


def _row(
    channel: str,
    thread_ts: str | None,
    ts: str,
    text: str,
    blocks: list[dict[str, Any]] | None,
    *,
    final: bool,
    stopped: bool,
    ended: bool,
) -> fx.Post:
    """A segment's row: the outbox ends it (or, ended already, shows it as it stands), and
    it counts as the conversation's post for the gap."""
    return fx.Post(
        channel,
        text,
        thread_ts=thread_ts,
        blocks=blocks,
        kind=STREAM,
        ref=ts,
        facts={"final": final, "stopped": stopped, "ended": ended},
    )


def _rows_of_stopped(record: dict[str, Any], blocks: list[dict[str, Any]] | None) -> list[fx.Post]:
    segments = [s for s in record.get("segments") or [] if isinstance(s, dict)]
    last = len(segments) - 1
    return [
        _row(
            str(record["channel"]),
            record.get("thread_ts"),
            str(s["ts"]),
            str(s.get("text") or ""),
            blocks if i == last else None,
            final=i == last,
            stopped=i == last,
            ended=True,
        )
        for i, s in enumerate(segments)
    ]


def _place_fields(place: StreamPlace | None) -> dict[str, str]:
    if place is None:
        return {}
    return {
        "channel": place.channel,
        "thread_ts": place.thread_ts,
        "team": place.team,
        "user": place.user,
        "inbox": place.inbox,
    }
