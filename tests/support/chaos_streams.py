"""Streamed replies in a crash chaos run (tests/support/chaos.py, issue 37).

The workers' agent streams its answers (tests/support/chaos_agent.py, CHAOS_STREAM=1) and
traces each one's phases to a file: `think` (about to open the stream), `open` (the first
piece shown), `closed` (all written; the finish and the outbox's stop still to come).
`StreamKills` is the fault plan: every other SIGKILL is aimed at a worker in one of those
phases in turn, or at the dispatcher while a finished reply waits for its stop; the rest are
random, as `sigkills`. Where each kill really landed is read afterwards from the trace, the
kill times and what the emulator recorded (`classify`), and `check_streams` counts, per person's
message, the visible replies that answer it.
"""

from __future__ import annotations

import collections
import itertools
import random
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.chaos import Figures, Fleet
from tests.support.chaos_agent import (
    ANSWERS,
    PAUSE,
    PIECES,
    POISON,
    STREAM_ENV,
    TRACE_ENV,
    parse_reply,
)
from wakeful.bot.builtin.common import plural
from wakeful.core.events import Message
from wakeful.core.runner import typed
from wakeful.core.store import Store
from wakeful.devtools.emulator import SlackEmulator

BEFORE_START, MID_APPEND, BEFORE_STOP, STOP_PENDING = (
    "before start",
    "mid-append",
    "before stop",
    "stop pending",
)
KINDS = (MID_APPEND, BEFORE_START, BEFORE_STOP, STOP_PENDING)
"""Where a kill lands: a worker in the middle of writing its stream, about to open it, after
writing it and before its stop; the dispatcher while a finished reply waits for its stop.
Aimed at in this order (mid-append first: the short run asserts it)."""
AIM_PATIENCE = 3.0
"""Seconds an aimed kill waits for its moment before it falls back to a random one."""
STALE = 1.0
"""A worker's last phase older than this at its kill is not where the kill landed."""


def stream_settings(trace: Path) -> dict[str, str]:
    """The workers' settings that make the agent stream and trace."""
    return {STREAM_ENV: "1", TRACE_ENV: str(trace)}


@dataclass(frozen=True)
class Kill:
    name: str
    pid: int
    at: float
    """time.time() once the process is gone (the emulator's clock)."""


@dataclass(frozen=True)
class Line:
    at: float
    pid: int
    phase: str
    channel: str
    thread: str


def parse_lines(text: str) -> list[Line]:
    lines = []
    for raw in text.splitlines():
        parts = raw.split()
        if len(parts) == 5:
            lines.append(Line(float(parts[0]), int(parts[1]), parts[2], parts[3], parts[4]))
    return lines


class TraceTail:
    """The trace's newest line per worker pid, read on as the file grows."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.rest = b""
        self.latest: dict[int, Line] = {}

    def poll(self) -> dict[int, Line]:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return self.latest
        self.offset += len(data)
        complete, _, self.rest = (self.rest + data).rpartition(b"\n")
        for line in parse_lines(complete.decode()):
            self.latest[line.pid] = line
        return self.latest


@dataclass
class StreamKills:
    """The fault plan: a SIGKILL every `every` seconds, every other one aimed at a point of a
    stream (KINDS in turn; a kind is aimed at again until a kill lands there)."""

    trace: Path
    every: tuple[float, float] = (0.2, 1.0)
    kills: list[Kill] = field(default_factory=list)
    aimed: collections.Counter[str] = field(default_factory=collections.Counter)
    """Kills aimed at each kind that found their moment, and `random` ones (where they
    landed is `classify`'s)."""
    cut: set[tuple[str, str]] = field(default_factory=set)
    """The threads (channel, message ts) whose answer a kill has cut: not aimed at again, so
    the aimed kills alone never spend an event's every attempt (WAKEFUL_MAX_ATTEMPTS)."""

    def __call__(
        self, fleet: Fleet, rng: random.Random, figures: Figures, stop: threading.Event
    ) -> None:
        names = list(fleet.commands)
        tail = TraceTail(self.trace)
        turn = 0
        for aiming in itertools.cycle((True, False)):
            if stop.wait(rng.uniform(*self.every)):
                return
            aim = KINDS[turn % len(KINDS)] if aiming else "random"
            name = self._aim(aim, fleet, tail, stop) if aiming else None
            if name is None:
                aim, name = "random", rng.choice(names)
            self.aimed[aim] += 1
            pid = fleet.procs[name].pid
            fleet.kill(name)
            kill = Kill(name, pid, time.time())
            self.kills.append(kill)
            with (self.trace.parent / "kills.log").open("a") as f:  # for a failed run's reader
                f.write(f"{kill.at:.6f} {pid} {name} {aim}\n")
            figures.kills += 1
            figures.gateway_kills += name == "gateway"
            fleet.start(name)
            last = tail.poll().get(pid)
            if last is not None and kill.at - last.at < STALE:
                self.cut.add((last.channel, last.thread))
            if aim != "random" and _still_at(aim, last):
                turn += 1

    def _aim(self, aim: str, fleet: Fleet, tail: TraceTail, stop: threading.Event) -> str | None:
        """The process to kill now for `aim`, once a worker's trace shows the moment."""
        deadline = time.monotonic() + AIM_PATIENCE
        while time.monotonic() < deadline and not stop.is_set():
            workers = {p.pid: n for n, p in fleet.procs.items() if n.startswith("worker")}
            now = time.time()
            for pid, line in tail.poll().items():
                name, age = workers.get(pid), now - line.at
                if name is None or (line.channel, line.thread) in self.cut:
                    continue
                if aim == BEFORE_START and line.phase == "think" and age < PAUSE / 2:
                    return name
                if aim == MID_APPEND and line.phase == "open" and age < PAUSE * (PIECES - 2):
                    return name
                if aim == BEFORE_STOP and line.phase == "closed" and age < PAUSE / 2:
                    return name
                if aim == STOP_PENDING and line.phase == "closed" and PAUSE < age < 3 * PAUSE:
                    return "dispatcher"
            time.sleep(0.005)
        return None


PHASE = {BEFORE_START: "think", MID_APPEND: "open", BEFORE_STOP: "closed"}
"""The phase a worker's last trace line shows when a kill aimed at the kind landed there."""


def _still_at(aim: str, last: Line | None) -> bool:
    """Whether the killed worker's last phase is the one aimed at (the dispatcher: yes)."""
    return aim not in PHASE or (last is not None and last.phase == PHASE[aim])


@dataclass
class StreamFigures:
    streams: int = 0
    """Messages chat.startStream opened."""
    taken_back: int = 0
    """Of those, deleted (a retry, or the failed run itself, took them back)."""
    replies: int = 0
    """Visible replies, each whole."""
    posted: int = 0
    """Of those, posted as ordinary messages (the engine's way when a stream cannot start)."""
    answered: int = 0
    unanswered: int = 0
    """Chat messages (not refunds: a prompt answers those) no visible reply answers."""
    duplicate_replies: int = 0
    half_replies: int = 0
    misplaced: int = 0
    """Whole replies not in the thread of the last message they answer."""
    thread_posts: int = 0
    """Other posts in a person's message's thread (none is expected there)."""
    dangling: int = 0
    kinds: collections.Counter[str] = field(default_factory=collections.Counter)
    """Kills by where they landed (a kill may count under more than one)."""
    aimed: collections.Counter[str] = field(default_factory=collections.Counter)
    problems: list[str] = field(default_factory=list)

    def line(self, backend: str) -> str:
        landed = ", ".join(f"{k} {self.kinds[k]} (aimed {self.aimed[k]})" for k in KINDS)
        return (
            f"streams[{backend}]: streamed {self.streams} (taken back {self.taken_back})  "
            f"replies {self.replies} (posted {self.posted})  messages answered {self.answered}"
            f"  unanswered {self.unanswered}  duplicate replies {self.duplicate_replies}  "
            f"half replies {self.half_replies}  misplaced {self.misplaced}  "
            f"thread posts {self.thread_posts}  dangling {self.dangling}  kills landed: {landed}"
        )


@dataclass
class _Attempt:
    pid: int
    channel: str
    thread: str
    think: float
    open: float | None = None
    closed: float | None = None
    last: float = 0.0


def _attempts(lines: Iterable[Line]) -> list[_Attempt]:
    """Each streamed answer a worker began, from its trace lines (a `think` starts one)."""
    found: list[_Attempt] = []
    current: dict[int, _Attempt] = {}
    for line in sorted(lines, key=lambda x: x.at):
        if line.phase == "think":
            current[line.pid] = a = _Attempt(line.pid, line.channel, line.thread, line.at)
            found.append(a)
        elif (a_ := current.get(line.pid)) is not None:
            setattr(a_, line.phase, line.at)
        if (a_ := current.get(line.pid)) is not None:
            a_.last = line.at
    return found


def _ends(emu: SlackEmulator) -> dict[tuple[str, str], float]:
    """When each streamed message stopped streaming: its first stop or delete Slack took."""
    ends: dict[tuple[str, str], float] = {}
    for method in ("chat.stopStream", "chat.delete"):
        for call in emu.calls(method):
            if call.response.get("ok"):
                key = (str(call.params.get("channel")), str(call.params.get("ts")))
                ends[key] = min(ends.get(key, call.at), call.at)
    return ends


def classify(
    kills: Iterable[Kill],
    lines: list[Line],
    streams: list[dict[str, Any]],
    ends: dict[tuple[str, str], float],
) -> collections.Counter[str]:
    """How many kills landed at each point, from the trace, the kill times and the streams."""
    attempts = _attempts(lines)
    by_thread: dict[tuple[str, str], list[dict[str, Any]]] = collections.defaultdict(list)
    for s in streams:
        by_thread[(s["channel"], s["thread_ts"])].append(s)

    def streams_of(a: _Attempt, until: float) -> list[dict[str, Any]]:
        upto = a.closed if a.closed is not None else until
        found = by_thread[(a.channel, a.thread)]
        return [s for s in found if a.think <= s["started_at"] <= upto]

    def still_open(s: dict[str, Any], at: float) -> bool:
        return s["started_at"] < at and ends.get((s["channel"], s["ts"]), float("inf")) > at

    landed: collections.Counter[str] = collections.Counter()
    for kill in kills:
        kinds: set[str] = set()
        if kill.name.startswith("worker"):
            mine = [a for a in attempts if a.pid == kill.pid and a.think < kill.at]
            for a in mine:
                done = a.closed is not None and a.closed < kill.at
                if done and any(still_open(s, kill.at) for s in streams_of(a, kill.at)):
                    kinds.add(BEFORE_STOP)
            latest = mine[-1] if mine else None
            if latest is not None and latest.closed is None and kill.at - latest.last < STALE:
                started = any(s["started_at"] < kill.at for s in streams_of(latest, kill.at))
                kinds.add(MID_APPEND if started or latest.open is not None else BEFORE_START)
        elif kill.name == "dispatcher":
            for a in attempts:
                if a.closed is None or a.closed >= kill.at:
                    continue
                kept = [s for s in streams_of(a, kill.at) if not s["deleted"]]
                if any(still_open(s, kill.at) for s in kept):
                    kinds.add(STOP_PENDING)
        landed.update(kinds)
    return landed


def check_streams(
    store: Store,
    emu: SlackEmulator,
    acknowledged: list[str],
    poison_ids: set[str],
    plan: StreamKills,
) -> StreamFigures:
    """Per person's message: exactly one visible, whole reply answers it (a refund's may be
    its prompt alone); no stream left open; where the kills landed."""
    f = StreamFigures(aimed=collections.Counter(plan.aimed))
    streams = emu.streams()
    f.streams = len(streams)
    f.taken_back = sum(1 for s in streams if s["deleted"])
    for s in emu.open_streams():
        f.dangling += 1
        f.problems.append(
            f"dangling {s['ts']} in {s['channel']} (thread {s.get('thread_ts')}, started "
            f"{s['started_at']:.3f}): {s.get('text')!r}"
        )
    shown = [
        ("streamed", s["channel"], s["ts"], s.get("thread_ts"), str(s.get("text") or ""))
        for s in streams
        if not s["deleted"]
    ]
    for call in emu.calls("chat.postMessage"):  # a reply whose stream could not start
        text = str(call.params.get("text") or "")
        if call.response.get("ok") and ANSWERS in text:
            where = call.params.get("channel"), call.response.get("ts")
            shown.append(
                ("posted", str(where[0]), str(where[1]), call.params.get("thread_ts"), text)
            )
    covered: collections.Counter[str] = collections.Counter()
    for how, channel, ts, thread, text in shown:
        answers = parse_reply(text)
        if answers is None:
            f.half_replies += 1
            f.problems.append(f"half reply {ts} ({how}) in {channel}: {text!r}")
            continue
        body = text.split(ANSWERS)[0]
        if not body.startswith(f"Handled {plural(len(answers), 'message')}."):
            f.half_replies += 1
            f.problems.append(f"reply {ts} does not answer all it names: {body!r}")
        if how == "posted":
            f.posted += 1
        elif thread != answers[-1]:
            f.misplaced += 1
        f.replies += 1
        covered.update(answers)
    threads = set()
    for eid in acknowledged:
        if eid in poison_ids:
            continue
        stored = store.event_by_key("slack", eid)
        if stored is None or stored.status != "done":
            continue  # lost or dead: counted by the run's own figures
        message = typed(stored)
        if not isinstance(message, Message) or POISON in message.text:
            continue
        threads.add((message.channel, message.ts))
        n = covered[message.ts]
        f.answered += n > 0
        f.duplicate_replies += max(0, n - 1)
        if n == 0 and "refund order" not in message.text:
            f.unanswered += 1
            f.problems.append(f"{eid} ({message.text!r}, ts {message.ts}) has no reply")
    for call in emu.calls("chat.postMessage"):
        where = (str(call.params.get("channel")), str(call.params.get("thread_ts")))
        text = str(call.params.get("text") or "")
        if call.response.get("ok") and where in threads and ANSWERS not in text:
            f.thread_posts += 1
    lines = parse_lines(plan.trace.read_text()) if plan.trace.exists() else []
    f.kinds = classify(plan.kills, lines, streams, _ends(emu))
    return f
