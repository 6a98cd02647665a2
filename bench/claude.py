"""The Claude agent's bill and its retries, against the local fake Messages API (issue 24).

1. **A 20-turn conversation** (a DM a minute, the agent's real system prompt and tools, replies
   of a few hundred words, a status look-up every fifth turn, memory growing to its cap and cut
   there): input billed per turn in input-token equivalents (input + 1.25x cache writes (5m) +
   2x (1h) + 0.1x cache reads), with caching against the same conversation with
   WAKEFUL_CLAUDE_CACHE_TTL=off. And the same for a digest timer waking hourly (the agent then
   writes with the 1-hour TTL). The fake computes usage as the real API does; the cost per
   message is priced at claude-sonnet-5's list price (bot/builtin/claude_prices.py).
2. **A SIGKILL chaos run**: `wakeful worker` processes with WAKEFUL_AGENT=claude answer
   messages whose every run makes three model calls (two tool steps, then the answer; the fake
   takes a little while for each); one is killed at random moments and another started. Model
   calls per answered message, against the same run without kills.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from tests.support import fake_anthropic as api
from tests.support.fake_anthropic import FakeAnthropic, Usage
from wakeful.devtools.audit import count_events, runs

from .common import Figure

ROOT = Path(__file__).resolve().parents[1]
MODEL = "claude-sonnet-5"
TEAM, USER = "T1", "U1"
WORDS = [
    "order",
    "refund",
    "customer",
    "shipping",
    "invoice",
    "delay",
    "warehouse",
    "parcel",
    "tracking",
    "return",
    "policy",
    "account",
    "payment",
    "card",
    "receipt",
    "address",
    "courier",
    "damaged",
    "missing",
    "label",
    "weekend",
    "support",
]


def say(line: str) -> None:
    print(line, flush=True)


def prose(rng: random.Random, words: int) -> str:
    """Text of about `words` words, different each time (no two turns share a prefix)."""
    out = []
    for i in range(words):
        out.append(rng.choice(WORDS) + ("." if i % 12 == 11 else ""))
    return " ".join(out).capitalize()


class Conversation:
    """One person's inbox with the Claude agent behind the real runner, loops and store, on a
    simulated clock shared with the fake API."""

    def __init__(self, folder: Path, cache: str, name: str = "chat") -> None:
        from wakeful.bot.builtin.claude import ClaudeAgent
        from wakeful.bot.process.config import Config
        from wakeful.bot.process.loading import build_runner
        from wakeful.bot.slack.kinds import SLACK_KINDS
        from wakeful.core.clock import ManualClock
        from wakeful.core.inbox_id import InboxId
        from wakeful.core.scheduler import Scheduler
        from wakeful.core.store import open_store
        from wakeful.core.worker import Worker

        self.clock = ManualClock(1_780_000_000)
        self.fake = FakeAnthropic(clock=lambda: float(self.clock.now))
        self.fake.responder = self._answer
        self.rng = random.Random(24)
        config = Config(settings=replace(Config().settings, outbox_gap=0))
        self.store = open_store(folder / f"{name}-{cache}.db", config.settings, kinds=SLACK_KINDS)
        self.inbox = InboxId.person(TEAM, USER)

        def factory(setup: Any) -> ClaudeAgent:
            return ClaudeAgent(
                setup, api_key="bench", base_url=self.fake.base_url, model=MODEL, cache=cache
            )

        self.runner = build_runner(
            config, self.store, None, factory=factory, env={}, clock=self.clock
        )
        self.agent = self.runner.agent
        self.worker = Worker(store=self.store, clock=self.clock, runner=self.runner, holder="b")
        self.scheduler = Scheduler(store=self.store, clock=self.clock)
        self.n = 0

    def _answer(self, request: dict[str, Any]) -> api.Scripted:
        """The model: a status look-up first every fifth turn, a digest-sized answer to a
        digest, else a few hundred words."""
        last = request["messages"][-1]["content"]
        texts = " ".join(str(b.get("text", "")) for b in last if b.get("type") == "text")
        results = [b for b in last if b.get("type") == "tool_result"]
        if "digest every hour" in texts and not results:
            args = {"mode": "every", "every_seconds": 3600}
            return api.tool_use("set_digest", args, f"toolu_d{self.n}")
        if "<wakeful_timer" in texts:
            return api.text("Digest: " + prose(self.rng, 90))
        if "look it up" in texts and not results:
            return api.tool_use("status", {}, f"toolu_s{self.n}")
        return api.text(prose(self.rng, 260))

    def say(self, text: str) -> None:
        from wakeful.core.events import Message

        self.n += 1
        m = Message(
            text=text, user=USER, team=TEAM, channel="D1", ts=f"{self.clock.now}.{self.n:06d}"
        )
        self.store.ingest(self.inbox, "slack", f"Ev{self.n}", m.to_wire(), self.clock.now)
        self.tick()

    def tick(self) -> None:
        self.scheduler.tick(self.clock.now)
        self.worker.tick(self.clock.now)

    def close(self) -> None:
        self.agent.close()  # type: ignore[attr-defined]
        self.fake.close()
        self.store.close()


def billed(usages: list[Usage]) -> float:
    return sum(u.billed_input() for u in usages)


def dollars(usages: list[Usage]) -> float:
    from wakeful.bot.builtin.claude_prices import PRICES

    price = PRICES[MODEL]
    return sum(
        price.cost(u.input_tokens, u.output_tokens, u.cache_5m, u.cache_1h, u.cache_read)
        for u in usages
    )


def chat(folder: Path, cache: str, turns: int) -> tuple[list[Usage], dict[str, int]]:
    c = Conversation(folder, cache)
    try:
        rng = random.Random(7)
        for turn in range(turns):
            ask = " (look it up)" if turn % 5 == 4 else ""
            c.say(f"Question {turn}{ask}: " + prose(rng, 110))
            c.clock.now += 60
        session = c.store.session(c.inbox)
        sizes = {"turns kept": len(session["messages"]), "calls": len(c.fake.usages)}
        return list(c.fake.usages), sizes
    finally:
        c.close()


def digests(folder: Path, cache: str, hours: int) -> list[Usage]:
    c = Conversation(folder, cache, "digest")
    try:
        c.say("Send me a digest every hour please.")
        start = len(c.fake.usages)
        for _ in range(hours):
            c.clock.now += 3600
            c.tick()
        return list(c.fake.usages[start:])
    finally:
        c.close()


def run_conversations(quick: bool) -> list[Figure]:
    turns, hours = (10, 6) if quick else (20, 24)
    figures = []
    with tempfile.TemporaryDirectory(prefix="wakeful-bench-claude-") as tmp:
        folder = Path(tmp)
        cached, kept = chat(folder, "5m", turns)
        plain, _ = chat(folder, "off", turns)
        per_turn, base = billed(cached) / turns, billed(plain) / turns
        note = (
            f"{len(cached)} calls; input-token equivalents per turn: {base:,.0f} without caching; "
            f"{kept['turns kept']} turns kept at the end (memory capped at 12k tokens, cut to 8k); "
            f"cost per message at {MODEL}'s list price: ${dollars(cached) / turns:.4f} with "
            f"caching, ${dollars(plain) / turns:.4f} without (output included)"
        )
        fig = Figure(
            f"Claude, {turns}-turn conversation: billed input per turn, caching on",
            per_turn,
            "tokens",
            per_turn / base,
            "caching off",
            "<= 0.35x",
            per_turn / base <= 0.35,
            note,
        )
        say("  " + fig.row())
        figures.append(fig)
        cached = digests(folder, "5m", hours)
        plain = digests(folder, "off", hours)
        per, base = billed(cached) / hours, billed(plain) / hours
        fig = Figure(
            f"Claude, hourly digest ({hours} ticks, 1-hour TTL): billed input per digest",
            per,
            "tokens",
            per / base,
            "caching off",
            "<= 0.35x",
            per / base <= 0.35,
            f"without caching {base:,.0f} per digest; cost per digest "
            f"${dollars(cached) / hours:.4f} with caching, ${dollars(plain) / hours:.4f} without",
        )
        say("  " + fig.row())
        figures.append(fig)
    return figures


# -- the SIGKILL chaos run ----------------------------------------------------------------------

STEPS = 3
"""Model calls of every run: a status look-up, a reminder, the answer."""
KILL_EVERY = (4.0, 8.0)
"""Seconds between two kills, uniformly at random: a restarted worker waits out the dead one's
lease (1 s) and the retry's backoff (1 s), then answers a dozen messages before the next."""


def _three_calls(request: dict[str, Any]) -> api.Scripted:
    """The model of the chaos run: a status look-up, then a reminder, then the answer, each
    after 60 ms (long enough for a kill to land between calls, not only between runs)."""
    last = request["messages"][-1]["content"]
    results = [b for b in last if b.get("type") == "tool_result"]
    ids = str(len(request["messages"]))
    if not results:
        return replace(api.tool_use("status", {}, f"toolu_s{ids}"), delay=0.06)
    if "Reminder set" not in str(results[0].get("content")):
        args = {"text": "stretch", "in_seconds": 3600}
        return replace(api.tool_use("remind_me", args, f"toolu_r{ids}"), delay=0.06)
    return replace(api.text("Nothing waits; I will remind you to stretch."), delay=0.06)


def chaos(folder: Path, messages: int, kills: bool) -> tuple[int, int, int, int]:
    """(model calls the fake received, messages answered, calls replayed, kills)."""
    from wakeful.core.events import Message
    from wakeful.core.store import open_store

    fake = FakeAnthropic()
    fake.responder = _three_calls
    db = str(folder / f"chaos-{'kill' if kills else 'calm'}.db")
    store = open_store(db)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("WAKEFUL_", "SLACK_", "ANTHROPIC_"))
    }
    env.update(
        PYTHONPATH=str(ROOT),
        WAKEFUL_DB=db,
        WAKEFUL_AGENT="claude",
        ANTHROPIC_API_KEY="sk-ant-bench",
        ANTHROPIC_BASE_URL=fake.base_url,
        WAKEFUL_MODEL=MODEL,
        WAKEFUL_LEASE_TTL="1",
        WAKEFUL_BACKOFF_BASE="1",
        WAKEFUL_BATCH_WINDOW="0",
        WAKEFUL_MAX_ATTEMPTS="50",
    )
    cmd = [sys.executable, "-m", "wakeful.bot.commands.cli", "worker", "--poll", "0.05"]
    rng = random.Random(5)

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    now = int(time.time())
    for i in range(messages):  # one message per person: each run answers one message
        user = f"U{i}"
        text = "status and a reminder please"
        m = Message(text=text, user=user, team=TEAM, channel=f"D{i}", ts=f"{now}.{i:06d}")
        store.ingest(f"{TEAM}:{user}", "slack", f"Ev{i}", m.to_wire(), now)
    proc, killed = start(), 0
    deadline = time.monotonic() + 600
    started = time.monotonic()
    next_kill = started + rng.uniform(*KILL_EVERY)
    try:
        while count_events(store, "done") < messages and time.monotonic() < deadline:
            time.sleep(0.02)
            if kills and time.monotonic() >= next_kill:
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
                killed += 1
                proc = start()
                next_kill = time.monotonic() + rng.uniform(*KILL_EVERY)
    finally:
        proc.terminate()
        proc.wait(30)
    answered = sum(
        1 for r in store.outbox() if r.kind == "post" and r.ref is None and "remind" in r.text
    )
    replayed = sum(u.replayed for r in runs(store) for u in r.usage.values())
    store.close()
    calls = fake.calls
    fake.close()
    return calls, answered, replayed, killed


def run_chaos(quick: bool) -> list[Figure]:
    messages = 12 if quick else 60
    with tempfile.TemporaryDirectory(prefix="wakeful-bench-chaos-") as tmp:
        folder = Path(tmp)
        calm_calls, calm_answered, _, _ = chaos(folder, messages, kills=False)
        calls, answered, replayed, killed = chaos(folder, messages, kills=True)
    base = calm_calls / max(1, calm_answered)
    value = calls / max(1, answered)
    fig = Figure(
        "Claude under SIGKILL chaos: model calls per answered message",
        value,
        "calls",
        value / base,
        "the same run without kills",
        "<= 1.05x",
        value / base <= 1.05 and answered == messages,
        f"{messages} messages of {STEPS} calls each, the fake taking 60 ms a call; {killed} kills "
        f"at random ({KILL_EVERY[0]:g} to {KILL_EVERY[1]:g} s apart); {answered} answered; "
        f"{calls - STEPS * answered} calls made again (a kill "
        f"during a call loses that one); {replayed} calls replayed from their recorded steps, "
        f"which before issue 24 were made again too (about "
        f"{(calls + replayed) / max(1, answered):.2f} calls per message); without kills "
        f"{calm_calls} calls for {calm_answered} answers",
    )
    say("  " + fig.row())
    return [fig]


def run_claude(quick: bool) -> list[Figure]:
    return run_conversations(quick) + run_chaos(quick)
