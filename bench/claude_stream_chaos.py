"""bench/claude.py's SIGKILL chaos run with streaming on (issue 37; part 3 of
bench/claude_stream.py): `wakeful worker` and `wakeful dispatcher` processes with the Claude
agent and Slack behind them (the emulator), so every DM's answer streams; one process is
SIGKILLed at random moments and started again. At the end, per message: its visible (not
deleted) replies in its thread, which must be exactly one, whole and ended; and the streams
left open, which must be none.

`python -m bench.claude_stream_chaos [--quick]` runs it alone.
"""

from __future__ import annotations

import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tests.support import fake_anthropic as api
from tests.support.fake_anthropic import FakeAnthropic
from wakeful.core.store import open_store
from wakeful.devtools.audit import count_events
from wakeful.devtools.emulator import SlackEmulator

from .claude import prose, say
from .claude_stream import (
    BOT,
    ROOT,
    TEAM,
    TOKEN,
    claude_env,
    clean_env,
    known,
    tool_ids,
    user_texts,
)
from .common import Figure

KILL_EVERY = (2.0, 5.0)
"""Seconds between two kills, uniformly at random (a restart takes about one)."""
CHAOS_PACE = 0.01


def chaos_answer(n: int) -> str:
    """Message n's answer, the same on every call (so a reply can be checked whole)."""
    return prose(random.Random(n), 40)


def chaos_model(request: dict[str, Any]) -> api.Scripted:
    """bench/claude.py's three calls (a status look-up, a reminder, the answer), the answer
    about 300 characters streamed at 4 every 10 ms: a kill lands mid-stream often."""
    last = request["messages"][-1]["content"]
    results = [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"]
    if not results:
        return replace(api.tool_use("status", {}, f"toolu_s{next(tool_ids)}"), delay=0.06)
    if "Reminder set" not in str(results[0].get("content")):
        args = {"text": "stretch", "in_seconds": 3600}
        return replace(api.tool_use("remind_me", args, f"toolu_r{next(tool_ids)}"), delay=0.06)
    said = [t for turn in request["messages"] if turn["role"] == "user" for t in user_texts(turn)]
    found = [int(n) for t in said for n in re.findall(r"ticket (\d+)", t)]
    n = found[-1] if found else 0
    return replace(api.text(chaos_answer(n)), delay=0.06, pace=CHAOS_PACE)


@dataclass
class ChaosResult:
    calls: int
    kills: dict[str, int]
    mid_stream: dict[str, int]
    """Kills of each process while a stream was open in Slack."""
    wrong: int
    """Messages without exactly one visible reply, whole and ended."""
    duplicates: int
    """Visible replies beyond a message's first."""
    missing: int
    incomplete: int
    """Messages with a visible reply that is not the whole answer, or still streaming."""
    dangling: int
    empty: int
    """Dangling streams with no text: opened by a process killed before it recorded their ts."""
    dead: int

    @property
    def clean(self) -> bool:
        """Every message answered by exactly one whole reply, no stream open, none dead."""
        return self.wrong == 0 and self.dangling == 0 and self.dead == 0


def stream_chaos(folder: Path, messages: int, kills: bool) -> ChaosResult:
    """Workers and a dispatcher streaming to the emulator; with `kills`, one of them SIGKILLed
    (the worker two times in three) KILL_EVERY apart and started again."""
    from wakeful.core.events import Message

    fake = FakeAnthropic()
    fake.responder = chaos_model
    db = str(folder / f"stream-chaos-{'kill' if kills else 'calm'}.db")
    store = open_store(db)
    rng = random.Random(37)
    killed = {"worker": 0, "dispatcher": 0}
    mid_stream = {"worker": 0, "dispatcher": 0}
    users = known([f"U{i}" for i in range(messages)])
    with SlackEmulator(bot_token=TOKEN, bot_user_id=BOT, team_id=TEAM, users=users) as emu:
        env = clean_env(
            **claude_env(fake),
            WAKEFUL_DB=db,
            SLACK_BOT_TOKEN=TOKEN,
            SLACK_API_URL=emu.api_url,
            # Streaming a call renews no lease (a run renews it between steps): a 1-second
            # lease, bench/claude.py's, is lost by every run that streams for longer. A dead
            # process's leases end when the one started after it records itself alive.
            WAKEFUL_LEASE_TTL="10",
            WAKEFUL_BACKOFF_BASE="1",
            WAKEFUL_BATCH_WINDOW="0",
            WAKEFUL_MAX_ATTEMPTS="50",
            WAKEFUL_SEND_TIMEOUT="2",
        )

        def start(role: str) -> subprocess.Popen[bytes]:
            cmd = [sys.executable, "-m", "wakeful.bot.commands.cli", role, "--poll", "0.05"]
            with open(folder / f"{role}-{'kill' if kills else 'calm'}.log", "ab") as log:
                return subprocess.Popen(
                    cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log
                )

        now = int(time.time())
        stamps = {}
        for i in range(messages):  # one message per person: each run answers one message
            user, ts = f"U{i}", f"{now}.{i:06d}"
            text = f"status and a reminder please (ticket {i})"
            m = Message(text=text, user=user, team=TEAM, channel=f"D{i}", ts=ts)
            store.ingest(f"{TEAM}:{user}", "slack", f"Ev{i}", m.to_wire(), now)
            stamps[i] = ts
        procs = {role: start(role) for role in ("worker", "dispatcher")}
        deadline = time.monotonic() + 600
        next_kill = time.monotonic() + rng.uniform(*KILL_EVERY)

        def done() -> bool:
            if count_events(store, "done") + count_events(store, "dead") < messages:
                return False
            return not any(r.status in ("pending", "sending") for r in store.outbox())

        try:
            while not done() and time.monotonic() < deadline:
                time.sleep(0.02)
                if kills and time.monotonic() >= next_kill:
                    role = "worker" if rng.random() < 2 / 3 else "dispatcher"
                    procs[role].send_signal(signal.SIGKILL)
                    procs[role].wait(10)
                    killed[role] += 1
                    mid_stream[role] += bool(emu.open_streams())
                    procs[role] = start(role)
                    next_kill = time.monotonic() + rng.uniform(*KILL_EVERY)
        finally:
            for proc in procs.values():
                proc.terminate()
                proc.wait(30)
        counts = {"wrong": 0, "duplicates": 0, "missing": 0, "incomplete": 0}
        for i, ts in stamps.items():
            shown = [
                m
                for m in emu.messages(f"D{i}")
                if m.get("user") == BOT and m.get("thread_ts") == ts
            ]
            cut = any(
                m.get("text") != chaos_answer(i) or m.get("streaming_state") != "completed"
                for m in shown
            )
            counts["duplicates"] += max(0, len(shown) - 1)
            counts["missing"] += not shown
            counts["incomplete"] += cut
            counts["wrong"] += len(shown) != 1 or cut
        left = emu.open_streams()
        dangling, empty = len(left), sum(1 for s in left if not s.get("text"))
    dead = count_events(store, "dead")
    store.close()
    calls = fake.calls
    fake.close()
    return ChaosResult(
        calls, killed, mid_stream, dangling=dangling, empty=empty, dead=dead, **counts
    )


def run_stream_chaos(quick: bool) -> list[Figure]:
    """Part 3 of bench/claude_stream.py: the same DMs without kills, then with them."""
    messages = 12 if quick else 60
    with tempfile.TemporaryDirectory(prefix="wakeful-bench-stream-chaos-") as tmp:
        calm = stream_chaos(Path(tmp), messages, kills=False)
        hit = stream_chaos(Path(tmp), messages, kills=True)
    kills = sum(hit.kills.values())
    fig = Figure(
        "SIGKILL chaos, streamed replies (Claude): messages without exactly one whole reply",
        hit.wrong,
        "messages",
        None,
        "",
        "0, and 0 streams left open",
        hit.clean and calm.clean,
        f"{messages} DMs, each 3 calls and a streamed answer of about 300 characters; {kills} "
        f"kills: {hit.kills['worker']} of the worker ({hit.mid_stream['worker']} with a stream "
        f"open), {hit.kills['dispatcher']} of the dispatcher ({hit.mid_stream['dispatcher']}); "
        f"{hit.duplicates} duplicates, {hit.missing} "
        f"missing, {hit.incomplete} not whole, {hit.dangling} streams dangling ({hit.empty} of "
        f"them empty), {hit.dead} dead; without kills: {calm.wrong} wrong, {calm.dangling} "
        "dangling",
    )
    per, base = hit.calls / messages, calm.calls / messages
    fig_calls = Figure(
        "SIGKILL chaos, streamed replies (Claude): model calls per message",
        per,
        "calls",
        per / base,
        "the same run without kills",
        "",
        None,
        f"a kill during a call, streamed or not, pays for it again; without kills {base:.2f}",
    )
    for f in (fig, fig_calls):
        say("  " + f.row())
    return [fig, fig_calls]


if __name__ == "__main__":
    run_stream_chaos("--quick" in sys.argv)
