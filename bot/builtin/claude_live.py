"""The Claude agent's live conversation: its words streamed into Slack as the model writes them,
the person's stop button, and the person writing again mid-run (double-texting).

**Streaming.** A run that answers a person's message writes each model call's text into the
run's stream (core/streams.py) as it arrives: made inert as any reply (bot/slack/text.py), one
call's text apart from the next by a blank line. A replayed call (a retried run) writes its
recorded text at once. What the model wrote is all the stream carries: a note of wakeful's own
(cut off, refused, out of steps) goes in a block under it.

**Stop.** A person who presses stop ends the stream; the call being streamed is cut (its HTTP
stream closed, so no more tokens are billed), no other call is made, and the history keeps
what was shown.

**Interrupt** (`on_new_message = "interrupt"`). At each boundary (before a call, on a call's
recorded answer, before a tool's step) a run whose person wrote again stops. What it did so
far (the turns up to its last complete tool results) is kept as a step, a *carry*, keyed by
its batch; the run that follows, whose batch starts with the same events, takes the carry
instead of asking the model again for them, and the newer words join its last user turn.
Tools already run stay run; their results are in the carry.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from wakeful.agents import Block, Command, Event, Message, Run, Stream, feedback_buttons, inert
from wakeful.bot.builtin.claude_calls import batch_key
from wakeful.bot.builtin.conversation import Turn, text_block

_HELD = re.compile(r"&[a-z]{0,3}$")
"""The start of an entity a delta may cut in two (`&am|p;`): held until the next delta."""


@dataclass
class LiveReply:
    """One run's streamed reply: the model's text as it comes."""

    stream: Stream
    _held: str = ""
    _call_start: int = 0
    _fresh_call: bool = True
    _fresh_block: bool = True

    @property
    def stopped(self) -> bool:
        return self.stream.stopped

    def begin_call(self) -> None:
        self._fresh_call, self._fresh_block = True, True
        self._call_start = len(self.stream.text)

    def block(self) -> None:
        """A new text block of the same answer: on a new line, as `final_text` joins them."""
        self._fresh_block = True

    def text(self, delta: str) -> None:
        if not delta:
            return
        lead = ""
        if self._fresh_block:
            if self._fresh_call and self.stream.text:
                lead = "\n\n"
            elif not self._fresh_call:
                lead = "\n"
            self._fresh_call = self._fresh_block = False
        out = self._held + delta
        held = _HELD.search(out)
        self._held = held.group() if held else ""
        out = out[: len(out) - len(self._held)]
        if lead or out:
            self.stream.write(lead + inert(out))

    def end_call(self) -> None:
        if self._held:
            self.stream.write(inert(self._held))
            self._held = ""

    def replay(self, content: list[Block]) -> None:
        """A recorded answer's text, written at once (a retried run)."""
        self.begin_call()
        for b in content:
            if b.get("type") == "text":
                self.block()
                self.text(str(b.get("text") or ""))
        self.end_call()

    @property
    def call_text(self) -> str:
        """What the current call has shown so far."""
        return self.stream.text[self._call_start :].lstrip("\n")

    @property
    def shown(self) -> bool:
        return bool(self.stream.text)

    def close(self, note: str | None = None) -> None:
        """Done: the feedback buttons (and wakeful's note, when it has one) under the text."""
        under: list[Block] = []
        if note:
            under.append({"type": "context", "elements": [{"type": "mrkdwn", "text": note}]})
        self.stream.close(blocks=[*under, feedback_buttons()])


def live_reply(run: Run) -> LiveReply | None:
    """The streamed reply, when the run answers a person's message (the newest of the batch's
    words is a message, not a command) and Slack can show it as it is written; else None, and
    the reply is posted whole."""
    said = [e for e in run.events if isinstance(e, Message | Command)]
    if not said or not isinstance(said[-1], Message):
        return None
    stream = run.stream(to=said[-1])
    return LiveReply(stream) if stream.live else None


def stopped(ctx: Any) -> None:
    """The person pressed stop: the history keeps what they saw of the answer; the reply
    stays as it was, with a line saying it was stopped (bot/slack/streams.py)."""
    shown = ctx.live.call_text if ctx.live is not None else ""
    said = shown.strip() or "(The person stopped this answer before it was written.)"
    ctx.state["messages"].append({"role": "assistant", "content": [text_block(said)]})
    if ctx.live is not None:
        ctx.live.close()


def pending_turn(
    ctx: Any,
    user_turn: Callable[[Any, Sequence[Event]], list[Block]],
    redo: Callable[[Any, list[Turn]], None],
) -> Turn:
    """The batch's user turn (`user_turn` of its events); after an interrupted run of its
    first events, that run's turns (its tools' results kept) with the newer events joining
    its last user turn. `redo` does the carried tools' work again whose effects are the run's
    (a reminder, a digest): the interrupted run's were never written."""
    run = ctx.run
    carry = find_carry(run)
    if carry is None:
        return {"role": "user", "content": user_turn(ctx, run.events)}
    covered, turns = carry
    user_turn(ctx, run.events[:covered])  # their effects on the state, once more
    redo(ctx, turns)
    *done, last = turns
    ctx.state["messages"].extend(done)
    content = [*last.get("content", []), *user_turn(ctx, run.events[covered:])]
    return {"role": "user", "content": content}


def carry_name(events: tuple[Event, ...] | list[Event]) -> str:
    return f"claude:carry:{batch_key(list(events))}"


def keep_carry(run: Run, turns: list[Turn], history_end: int) -> None:
    """Record what an interrupted run did (its turns after the saved history, ending with a
    user turn): the run that follows starts from it."""
    carried = turns[history_end + 1 :]
    if not carried or carried[-1].get("role") != "user":
        return
    run.step(
        carry_name(run.events),
        lambda _key: {"turns": carried},
        cause=run.events[0],
        replay=True,
        boundary=False,
    )


def find_carry(run: Run) -> tuple[int, list[Turn]] | None:
    """The longest earlier batch this one starts with whose interrupted run left a carry:
    (how many of this batch's events it covers, its turns)."""
    for n in range(len(run.events) - 1, 0, -1):
        found: Any = run.recorded(carry_name(run.events[:n]), cause=run.events[0])
        if isinstance(found, dict) and isinstance(found.get("turns"), list) and found["turns"]:
            return n, list(found["turns"])
    return None
