"""The agent chaos runs use: refund-desk, plus a deliberate poison pill.

Loaded by worker processes through `WAKEFUL_AGENT=tests.support.chaos_agent:build`, the way a
user's own agent is: a factory of `wakeful.agents.Setup`.

With CHAOS_STREAM=1 the desk's answer to a person's messages is streamed (`run.stream`) in
several pieces with short pauses, so a SIGKILL can land before the stream starts, in the
middle of it, or after it is written and before Slack's stop. The streamed text ends with a
line naming the messages it answers and a hash of the whole (`streamed_reply`), so a check
can tell a whole reply from part of one (`parse_reply`). CHAOS_STREAM_TRACE names a file each
worker appends its phases to (`think`, `open`, `closed`), for the kill plan to aim at them
and for the figures to say where each kill landed (tests/support/chaos_streams.py).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Sequence
from typing import Any

from wakeful.agents import Agent, Conversation, Event, Message, Run, Setup
from wakeful.bot.builtin.refund_desk import RefundDesk

POISON = "poison pill"
STREAM_ENV = "CHAOS_STREAM"
TRACE_ENV = "CHAOS_STREAM_TRACE"
PIECES = 4
PAUSE = 0.03
"""Seconds before the stream opens, after each piece, and after it closes: windows a kill
can land in (Slack's edge shows the first piece at once and the rest when closed)."""
ANSWERS = "\n[answers "
CHAT_ANSWER = "Handled "
"""How the desk's answer to a batch's messages begins (its other replies to the same
conversation, an approval's outcome say, are not streamed)."""


def _digest(body: str, answers: Sequence[str]) -> str:
    return hashlib.sha256(f"{body}\0{' '.join(answers)}".encode()).hexdigest()[:12]


def streamed_reply(body: str, answers: Sequence[str]) -> str:
    """The whole streamed text: the desk's reply, then the ts of the messages it answers and
    a hash of both, so any part of it is told apart from all of it."""
    return f"{body}{ANSWERS}{' '.join(answers)}; {_digest(body, answers)}]"


def parse_reply(text: str) -> tuple[str, ...] | None:
    """The ts of the messages a streamed text answers when it is one whole reply; else None
    (a half reply, or two run together)."""
    body, sep, tail = text.rpartition(ANSWERS)
    if not sep or not tail.endswith("]") or "; " not in tail:
        return None
    listed, _, digest = tail[:-1].rpartition("; ")
    answers = tuple(listed.split())
    if not answers or ANSWERS in body or digest != _digest(body, answers):
        return None
    return answers


def pieces(text: str, n: int = PIECES) -> list[str]:
    """`text` cut into `n` nearly equal pieces (fewer when it is shorter)."""
    size = max(1, -(-len(text) // n))
    return [text[i : i + size] for i in range(0, len(text), size)]


class Trace:
    """Appends `<time> <pid> <phase> <channel> <thread_ts>` lines, one write each (O_APPEND:
    the workers' lines never interleave)."""

    def __init__(self, path: str | None) -> None:
        self.path = path

    def __call__(self, phase: str, to: Message) -> None:
        if not self.path:
            return
        line = f"{time.time():.6f} {os.getpid()} {phase} {to.channel} {to.thread_ts or to.ts}\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


class StreamingRun:
    """The run the desk sees when streaming: its answer to a person's messages (the urgent
    `Handled ...` reply to their conversation) is streamed under the last of them; all else
    is the run's."""

    def __init__(self, run: Run, trace: Trace) -> None:
        self._run = run
        self._trace = trace

    def __getattr__(self, name: str) -> Any:
        return getattr(self._run, name)

    def reply(
        self,
        text: str,
        *,
        to: Event | Conversation,
        blocks: list[dict[str, Any]] | None = None,
        urgent: bool | None = None,
        private: bool = False,
        user: str | None = None,
    ) -> None:
        """Streamed when it answers messages of this batch, else the run's own reply."""
        asked = [
            e
            for e in self._run.events
            if isinstance(e, Message) and isinstance(to, Conversation) and e.reply_to == to
        ]
        if not asked or not text.startswith(CHAT_ANSWER) or not urgent or blocks or private:
            self._run.reply(text, to=to, blocks=blocks, urgent=urgent, private=private, user=user)
            return
        last = asked[-1]
        self._trace("think", last)
        time.sleep(PAUSE)
        with self._run.stream(to=last) as stream:
            for n, piece in enumerate(pieces(streamed_reply(text, [m.ts for m in asked]))):
                stream.write(piece)
                if n == 0:
                    self._trace("open", last)
                time.sleep(PAUSE)
        self._trace("closed", last)
        time.sleep(PAUSE)


class PoisonedDesk(Agent):
    greeting = RefundDesk.greeting

    def __init__(self, inner: RefundDesk, stream: bool = False, trace: str | None = None) -> None:
        self.inner = inner
        self.tools = inner.tools
        self.stream = stream
        self.trace = Trace(trace)

    def run(self, run: Run) -> None:
        for e in run.events:
            if isinstance(e, Message) and POISON in e.text:
                raise RuntimeError("deliberately poisoned event")
        # The desk reads and asks through its run alone: the wrapper stands in for it.
        self.inner.run(StreamingRun(run, self.trace) if self.stream else run)  # type: ignore[arg-type]


def build(setup: Setup) -> PoisonedDesk:
    stream = setup.env.get(STREAM_ENV, "") not in ("", "0")
    return PoisonedDesk(RefundDesk(setup), stream, setup.env.get(TRACE_ENV))
