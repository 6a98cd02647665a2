"""The Claude agent's streamed replies and double-texting (issue 37), through `wakeful serve` (or
`wakeful worker` and `dispatcher` processes), the real anthropic SDK against the local fake
Messages API (tests/support/fake_anthropic.py), Slack played by the emulator.

The fake model writes as a real one does: its first token after `FIRST_TOKEN` seconds, then 4
characters every `PACE` seconds. A call that does not ask for a stream gets the whole answer
when it is all written (the first token's wait plus the pace of every delta), as the real API
answers it.

1. **Time to first word.** One person's conversation of N DMs (every third one answered after
   a status look-up), each answer about 600 characters, sent to two serves at once, DM after
   DM: the Claude agent as shipped (streams) and the same agent with `stream_replies=False`
   (bench/claude_stream_agent.py). From the signed event's POST to the first streamed text
   (an appendStream carrying text) and to the final one (chat.stopStream); unstreamed, both
   are the chat.postMessage. Figures: the p50s as ratios of the unstreamed reply's p50.
2. **Model calls saved by interrupt.** People who write a message and, while its run's first
   model call is under way, a correction; every answer takes two calls (a status look-up,
   then the text). Calls and visible replies per person with the Claude agent's
   `on_new_message = "interrupt"` against `enqueue`, run side by side.
3. **SIGKILL chaos with streaming on** (bench/claude_stream_chaos.py): bench/claude.py's chaos
   run with Slack behind it, `wakeful worker` and `wakeful dispatcher` processes, one of them
   SIGKILLed at random moments and started again, answering DMs in three calls each, the last
   one streamed. At the end, per message: its visible (not deleted) replies (exactly one,
   whole), and the streams left open.

`python -m bench --only claude-stream [--quick]` runs all three; bench/RESULTS.md has the figures.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tests.support import fake_anthropic as api
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_anthropic_stream import pieces
from wakeful.bot.process.config import Config
from wakeful.core.store import Store, open_store
from wakeful.devtools.emulator import EventSender, SlackEmulator
from wakeful.devtools.emulator.common import Call
from wakeful.devtools.emulator.streams import streamed_text

from .claude import MODEL, prose, say
from .common import Figure, percentile
from .http import SECRET, serve_env

ROOT = Path(__file__).resolve().parents[1]
TEAM, BOT, TOKEN = "T1", "UBOT", "xoxb-bench"
"""The emulator's workspace, bot and token (the token bench/http.py's `serve_env` gives)."""
PACE = 0.015
"""Seconds between two deltas of 4 characters: about 65 tokens a second."""
FIRST_TOKEN = 0.5
"""Seconds before a call's first token (the model reading its prompt)."""
CORRECTION_AFTER = 0.3
"""Seconds into the first run's first model call (its first token comes at 0.5 s) at which
the person sends the correction: the message itself waited out the 0.5 s batch window first,
so the correction comes about 0.8 s after it, while the call is under way."""
BATCH_WINDOW = Config.batch_window
"""The serves' batch window: the default (WAKEFUL_BATCH_WINDOW unset)."""
UNSTREAMED = "bench.claude_stream_agent:unstreamed"
ENQUEUEING = "bench.claude_stream_agent:enqueueing"
tool_ids = itertools.count(1)
"""Ids of the fake model's tool calls, unique in a process (the API refuses a repeated one)."""


# -- the model and the processes ---------------------------------------------------------------


def written_in(content: list[dict[str, Any]], pace: float) -> float:
    """Seconds the fake takes to stream `content` at `pace` (its deltas as it cuts them)."""
    deltas = 0
    for block in content:
        if block.get("type") == "text":
            deltas += len(pieces(str(block["text"])))
        elif block.get("type") == "tool_use":
            deltas += 1 + len(pieces(json.dumps(block.get("input") or {}, ensure_ascii=False)))
    return max(0, deltas - 1) * pace


def paced(reply: api.Scripted, request: dict[str, Any], pace: float = PACE) -> api.Scripted:
    """`reply` at a real model's speed: streamed, its first token after FIRST_TOKEN, then one
    delta every `pace`; not streamed, the whole answer once it is all written."""
    if request.get("stream") is True:
        return replace(reply, delay=FIRST_TOKEN, pace=pace)
    return replace(reply, delay=FIRST_TOKEN + written_in(reply.body["content"], pace))


def user_texts(turn: dict[str, Any]) -> list[str]:
    """The text blocks of one turn of a request (what a person wrote, wakeful's labels)."""
    content = turn.get("content")
    if isinstance(content, str):
        return [content]
    return [str(b.get("text", "")) for b in content or [] if b.get("type") == "text"]


def _looked_up(request: dict[str, Any]) -> bool:
    """The newest user turn carries a tool's result (not an error: a tool not run is none)."""
    content = request["messages"][-1].get("content")
    return isinstance(content, list) and any(
        b.get("type") == "tool_result" and not b.get("is_error") for b in content
    )


def _look_up(request: dict[str, Any]) -> api.Scripted:
    return paced(api.tool_use("status", {}, f"toolu_b{next(tool_ids)}"), request)


def clean_env(**settings: str) -> dict[str, str]:
    """This process's environment without wakeful's, Slack's and Anthropic's settings (nor a
    proxy), the repository importable, plus `settings`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("WAKEFUL_", "SLACK_", "ANTHROPIC_"))
        and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")
    }
    return {**env, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **settings}


def claude_env(fake: FakeAnthropic, agent: str = "claude") -> dict[str, str]:
    """The Claude agent's settings (`agent`: a factory of bench/claude_stream_agent.py, or the
    built-in one) against `fake`."""
    return {
        "WAKEFUL_AGENT": agent,
        "WAKEFUL_AGENT_PATH": str(ROOT),
        "ANTHROPIC_API_KEY": "sk-ant-bench",
        "ANTHROPIC_BASE_URL": fake.base_url,
        "WAKEFUL_MODEL": MODEL,
    }


def known(users: list[str]) -> dict[str, dict[str, Any]]:
    """The emulator's users.info entries for `users` (the agent asks for a person's zone)."""
    return {u: {"tz": "Europe/Paris", "real_name": f"Person {u}"} for u in users}


@dataclass
class Serve:
    """One `wakeful serve` with the Claude agent: its emulator, its fake model, its store."""

    proc: subprocess.Popen[str]
    sender: EventSender
    emu: SlackEmulator
    fake: FakeAnthropic
    store: Store

    def idle(self, inbox: str) -> bool:
        """Nothing left to do for `inbox`: no event waiting or running, no post unsent."""
        if any(e.status in ("pending", "running") for e in self.store.events(inbox)):
            return False
        return not any(r.status in ("pending", "sending") for r in self.store.outbox(inbox=inbox))

    def settle(self, inbox: str, timeout: float = 60.0) -> None:
        """Wait until `inbox` is idle and no stream is open: the person's answers are all in."""
        deadline = time.monotonic() + timeout
        while not (self.idle(inbox) and not self.emu.open_streams()):
            if time.monotonic() >= deadline:
                raise RuntimeError(f"{inbox} never went idle")
            time.sleep(0.05)

    def bot_messages(self, channel: str) -> list[dict[str, Any]]:
        """The bot's visible messages in `channel` (a deleted one is gone from it)."""
        return [m for m in self.emu.messages(channel) if m.get("user") == BOT]


@contextmanager
def serving(
    tmp: Path, name: str, responder: api.Responder, agent: str, users: list[str]
) -> Iterator[Serve]:
    """`wakeful serve` (`agent`, the default settings) against an emulator (knowing `users`)
    and a fake model of its own, stopped (SIGTERM) afterwards; its log in `tmp`/`name`.log."""
    fake = FakeAnthropic()
    fake.responder = responder
    db = str(tmp / f"{name}.db")
    try:
        with SlackEmulator(
            bot_token=TOKEN, bot_user_id=BOT, team_id=TEAM, users=known(users)
        ) as emu:
            env = clean_env(**serve_env({}, emu.api_url, db), **claude_env(fake, agent))
            with open(tmp / f"{name}.log", "w") as log:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "wakeful.bot.commands.cli", "serve"],
                    env=env,
                    cwd=ROOT,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    text=True,
                )
            try:
                assert proc.stdout is not None
                line = proc.stdout.readline()
                if "http://" not in line:
                    raise RuntimeError(f"wakeful serve ({name}) did not start: {line!r}")
                out = proc.stdout
                threading.Thread(target=lambda: [None for _ in out], daemon=True).start()
                url = line[line.index("http://") :].strip()
                store = open_store(db)
                sender = EventSender(url, SECRET, team_id=TEAM, bot_user_id=BOT)
                try:
                    yield Serve(proc, sender, emu, fake, store)
                finally:
                    store.close()
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    finally:
        fake.close()


# -- 1. time to first word ---------------------------------------------------------------------

QUESTION = re.compile(r"Question (\d+)")


def conversation_model(request: dict[str, Any]) -> api.Scripted:
    """The model of the conversation: about 600 characters answering question n (the same in
    both serves), after a status look-up when the question says `look it up`."""
    said = [t for turn in request["messages"] if turn["role"] == "user" for t in user_texts(turn)]
    asked = next((t for t in reversed(said) if QUESTION.search(t)), "")
    found = QUESTION.search(asked)
    n = int(found.group(1)) if found else 0
    if "look it up" in asked and not _looked_up(request):
        return _look_up(request)
    return paced(api.text(prose(random.Random(n), 76)), request)


def _reply_times(
    calls: list[Call], channel: str, posted: float, streamed: bool
) -> tuple[float, ...]:
    """(first text, final text, characters) of the reply to a DM posted at `posted`; () until
    it has ended."""
    mine = [c for c in calls if c.at >= posted and c.params.get("channel") == channel]
    mine = [c for c in mine if c.response.get("ok")]
    if not streamed:
        post = next((c for c in mine if c.method == "chat.postMessage"), None)
        return () if post is None else (post.at, post.at, len(str(post.params.get("text"))))
    stop = next((c for c in mine if c.method == "chat.stopStream"), None)
    if stop is None:
        return ()
    first = next(
        (
            c.at
            for c in mine
            if c.method in ("chat.startStream", "chat.appendStream") and streamed_text(c.params)
        ),
        stop.at,  # nothing streamed before the stop: the words came with it
    )
    return first, stop.at, len(str(stop.response["message"]["text"]))


def first_word(quick: bool) -> list[Figure]:
    """Part 1: the streamed reply's first and last words against the reply posted whole."""
    dms = 20 if quick else 60
    user, channel = "U3701", "D3701"
    times: dict[bool, list[tuple[float, ...]]] = {True: [], False: []}
    with (
        tempfile.TemporaryDirectory(prefix="wakeful-bench-stream-") as tmp,
        serving(Path(tmp), "streamed", conversation_model, "claude", [user]) as on,
        serving(Path(tmp), "unstreamed", conversation_model, UNSTREAMED, [user]) as off,
    ):
        for i in range(dms):
            ask = " (look it up)" if i % 3 == 2 else ""
            text = f"Question {i}{ask}: " + prose(random.Random(1000 + i), 25)
            posted: dict[bool, float] = {}
            # Both get the DM at the same moment, in turns first, and share the machine.
            for app, streamed in ((on, True), (off, False))[:: 1 if i % 2 else -1]:
                posted[streamed] = time.time()
                if app.sender.message(user, text).status != 200:
                    raise RuntimeError("the DM was refused")
            for app, streamed in ((on, True), (off, False)):
                at = posted[streamed]

                def ended(e: SlackEmulator, at: float = at, s: bool = streamed) -> bool:
                    return bool(_reply_times(e.calls(), channel, at, s))

                ok = app.emu.wait_for(ended, 60)
                if not ok:
                    raise RuntimeError(f"no reply to DM {i} (streamed: {streamed})")
                got = _reply_times(app.emu.calls(), channel, posted[streamed], streamed)
                times[streamed].append(
                    (got[0] - posted[streamed], got[1] - posted[streamed], got[2])
                )
        dangling = len(on.emu.open_streams())
    first = [t[0] for t in times[True]]
    final = [t[1] for t in times[True]]
    whole = [t[1] for t in times[False]]
    base = percentile(whole, 50)
    chars = sum(t[2] for t in times[True]) / dms
    # A DM answered without a look-up: its first word waits for the batch window and the
    # model's first token; the rest is wakeful's (the run's start, the stream's start).
    plain = percentile([t for i, t in enumerate(first) if i % 3 != 2], 50)
    ours = plain - BATCH_WINDOW - FIRST_TOKEN
    common = (
        f"{dms} DMs of one conversation (every third after a status look-up), answers of "
        f"{chars:.0f} characters on average; the fake's first token after {FIRST_TOKEN:g} s, then "
        f"4 characters every {PACE * 1000:g} ms; unstreamed reply p50 {base:.2f} s / p99 "
        f"{percentile(whole, 99):.2f} s; without a look-up the first word's p50 is "
        f"{plain * 1000:.0f} ms: the {BATCH_WINDOW:g} s batch window (the default), the model's "
        f"first token, and {ours * 1000:.0f} ms of wakeful's own"
    )
    fig_first = Figure(
        "Streamed reply (Claude): time to first word, p50",
        percentile(first, 50) * 1000,
        "ms",
        percentile(first, 50) / base,
        "the unstreamed reply's p50",
        "<= 0.25x",
        percentile(first, 50) / base <= 0.25,
        f"p99 {percentile(first, 99) * 1000:.0f} ms; {common}",
    )
    fig_final = Figure(
        "Streamed reply (Claude): time to the whole reply, p50",
        percentile(final, 50) * 1000,
        "ms",
        percentile(final, 50) / base,
        "the unstreamed reply's p50",
        "<= 1.2x",
        percentile(final, 50) / base <= 1.2 and dangling == 0,
        f"p99 {percentile(final, 99) * 1000:.0f} ms (chat.stopStream, after the run's finish); "
        f"{dangling} streams left open",
    )
    for fig in (fig_first, fig_final):
        say("  " + fig.row())
    return [fig_first, fig_final]


# -- 2. double-texting: interrupt against enqueue ---------------------------------------------

ORDER = re.compile(r"order (\d+)")


def double_text_model(request: dict[str, Any]) -> api.Scripted:
    """Every answer is a status look-up, then about 300 characters about the orders the person
    wrote of since the last answer (so a reply says which messages it answers)."""
    if not _looked_up(request):
        return _look_up(request)
    orders: list[str] = []
    for turn in reversed(request["messages"]):
        if turn["role"] == "assistant" and user_texts(turn):
            break  # the previous answer: what came before it was answered
        if turn["role"] == "user":
            orders = [o for t in user_texts(turn) for o in ORDER.findall(t)] + orders
    seed = int(orders[-1]) if orders else 0
    about = ", ".join(f"order {o}" for o in dict.fromkeys(orders))
    return paced(api.text(f"About {about}: " + prose(random.Random(seed), 36)), request)


def double_texts(app: Serve, people: int) -> tuple[int, list[tuple[int, int]]]:
    """Each person writes, then corrects it CORRECTION_AFTER seconds into the run's first
    model call; one person after the other. (model calls, [(replies, replies answering both)
    per person])."""
    called = threading.Event()
    app.fake.on_request = lambda _request: called.set()
    out = []
    for i in range(people):
        user, first, second = f"U{5000 + i}", 1000 + i, 2000 + i  # as double_texting's users
        called.clear()
        app.sender.message(user, f"Where is order {first}? It has not arrived.")
        if not called.wait(30):
            raise RuntimeError(f"{user}'s message reached no model call")
        time.sleep(CORRECTION_AFTER)
        app.sender.message(user, f"Sorry, I meant order {second}, not {first}.")
        app.settle(f"{TEAM}:{user}")
        replies = app.bot_messages("D" + user[1:])
        both = sum(
            f"order {first}" in m["text"] and f"order {second}" in m["text"] for m in replies
        )
        out.append((len(replies), both))
    return app.fake.calls, out


def double_texting(quick: bool) -> list[Figure]:
    """Part 2: the calls and replies of people who correct themselves, interrupt and enqueue."""
    people = 10 if quick else 30
    users = [f"U{5000 + i}" for i in range(people)]
    with (
        tempfile.TemporaryDirectory(prefix="wakeful-bench-double-") as tmp,
        serving(Path(tmp), "interrupt", double_text_model, "claude", users) as cut,
        serving(Path(tmp), "enqueue", double_text_model, ENQUEUEING, users) as queued,
    ):
        with ThreadPoolExecutor(2) as pool:  # side by side: the same moments, the same machine
            a = pool.submit(double_texts, cut, people)
            b = pool.submit(double_texts, queued, people)
            (calls, seen), (base_calls, base_seen) = a.result(), b.result()
        taken_back = sum(s["deleted"] for s in cut.emu.streams())
    replies = sum(r for r, _ in seen) / people
    base_replies = sum(r for r, _ in base_seen) / people
    answered_both = sum(1 for r, both in seen if r == 1 and both == 1)
    ratio = calls / base_calls
    fig_calls = Figure(
        "Double-texting (Claude): model calls per person, interrupt",
        calls / people,
        "calls",
        ratio,
        "on_new_message = enqueue",
        "< 1x",
        ratio < 1,
        f"{people} people, each writes, then a correction {CORRECTION_AFTER:g} s into the first "
        f"run's first call; every answer is 2 calls (status, then text); enqueue: "
        f"{base_calls / people:.2f} calls per person; the interrupted call is the one paid for "
        "twice",
    )
    fig_replies = Figure(
        "Double-texting (Claude): visible replies per person, interrupt",
        replies,
        "replies",
        replies / base_replies,
        "on_new_message = enqueue",
        "1, answering both",
        answered_both == people,
        f"{answered_both} of {people} answered in one reply naming both orders; enqueue: "
        f"{base_replies:.2f} replies per person; {taken_back} streamed messages taken back",
    )
    for fig in (fig_calls, fig_replies):
        say("  " + fig.row())
    return [fig_calls, fig_replies]


def run_claude_stream(quick: bool) -> list[Figure]:
    """Parts 1 and 2; part 3 is bench/claude_stream_chaos.py's `run_stream_chaos`."""
    return first_word(quick) + double_texting(quick)


PARTS: dict[str, Callable[[bool], list[Figure]]] = {
    "first-word": first_word,
    "double-text": double_texting,
}


if __name__ == "__main__":  # python -m bench.claude_stream [--quick] [first-word|double-text]
    named = [a for a in sys.argv[1:] if a in PARTS] or list(PARTS)
    for part in named:
        PARTS[part]("--quick" in sys.argv)
