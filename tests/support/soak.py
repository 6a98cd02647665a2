"""A soak: `wakeful serve` (SQLite) under steady Slack traffic for a long time, sampled.

50 messages a second over 250 users (a message each every 5 s), each with a digest every
minute, reminders, and refund requests whose Approve / Deny buttons a clicker taps (or lets
expire). Every
`sample_every` seconds the app process's resident memory, open file descriptors and threads,
the SQLite -wal file's size and the backlog (events not yet done, outbox rows not yet sent)
are recorded. `check` then says whether each stayed flat after the warm-up.
"""

from __future__ import annotations

import json
import os
import queue
import random
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from wakeful.core.store import open_store
from wakeful.core.store.sqlite import WAL_SIZE_LIMIT
from wakeful.devtools.audit import count_events
from wakeful.devtools.emulator import Call, EventSender, SlackEmulator

ROOT = Path(__file__).resolve().parents[2]
SECRET = "soak-secret"
TOKEN = "xoxb-soak"
MB = 1024 * 1024
OUTBOX_GAP = 60
"""The soak's pacing gap: normal posts of one conversation wait for it, urgent ones do not."""


@dataclass
class Sample:
    at: float
    """Seconds since the start."""
    rss_mb: float
    fds: int
    threads: int
    wal_mb: float
    db_mb: float
    backlog: int
    """Events pending or running."""
    unsent: int
    """Outbox rows pending or sending."""
    sent: int
    """Messages delivered to the app so far (200)."""
    replies: int
    """Web API posts the app made so far."""
    oldest_unsent: int = 0
    """Seconds the oldest unsent row has waited: a reply that never goes out shows here."""


@dataclass
class Soak:
    seconds: float
    rate: float = 50.0
    users: int = 250
    sample_every: float = 30.0
    warmup: float = 120.0
    samples: list[Sample] = field(default_factory=list)
    refused: int = 0
    """Deliveries answered with anything but 200 (retried like Slack does)."""


def _proc(pid: int) -> tuple[float, int, int]:
    """Resident MB, open file descriptors and threads of a process, from /proc."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    fields = dict(line.split(":", 1) for line in status if ":" in line)
    rss = int(fields["VmRSS"].split()[0]) / 1024
    threads = int(fields["Threads"])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return rss, fds, threads


def run_soak(soak: Soak, workdir: Path, report: Path | None = None) -> Soak:
    """Run the soak; samples are appended to `report` (JSON lines) as they are taken."""
    rng = random.Random(11)
    sampling = random.Random(12)
    db = workdir / "soak.db"
    emu = SlackEmulator(bot_token=TOKEN, bot_user_id="UBOT", team_id="TS")
    prompts: queue.Queue[tuple[str, str, str]] = queue.Queue()
    posts = 0

    def on_call(call: Call) -> None:
        nonlocal posts
        if call.method != "chat.postMessage" or not call.response.get("ok"):
            return
        posts += 1
        blocks = call.params.get("blocks")
        if isinstance(blocks, str):
            blocks = json.loads(blocks)
        for block in blocks or []:
            if block.get("type") == "actions":
                rid = block["elements"][0]["value"]
                prompts.put((rid, str(call.params["channel"]), str(call.response["ts"])))

    emu.on_call = on_call
    emu.start()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "WAKEFUL_"))},
        "PYTHONPATH": str(ROOT),
        "SLACK_BOT_TOKEN": TOKEN,
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_API_URL": emu.api_url,
        "WAKEFUL_DB": str(db),
        "WAKEFUL_HOST": "127.0.0.1",
        "WAKEFUL_PORT": "0",
        "WAKEFUL_OUTBOX_GAP": str(OUTBOX_GAP),
        "WAKEFUL_APPROVAL_TTL": "30",
        "WAKEFUL_LOG_LEVEL": "WARNING",
    }
    log = open(workdir / "serve.log", "w")  # noqa: SIM115
    app = subprocess.Popen(
        [sys.executable, "-m", "wakeful.bot.commands.cli", "serve"],
        env=env,
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    stop = threading.Event()
    sent = 0
    try:
        line = app.stdout.readline() if app.stdout else ""
        assert "listening on" in line, (workdir / "serve.log").read_text()[-2000:]
        sender = EventSender(line.split("listening on ", 1)[1].strip(), SECRET, team_id="TS")
        store = open_store(db)

        def deliver(send: Any) -> bool:
            for attempt in range(20):
                try:
                    if send(attempt).status == 200:
                        return True
                except (urllib.error.URLError, OSError):
                    pass
                soak.refused += 1
                time.sleep(min(1.0, 0.05 * (attempt + 1)))
            return False

        def say(user: int, text: str) -> None:
            nonlocal sent

            def send(attempt: int) -> Any:
                return sender.message(
                    f"U{user}", text, channel=f"D{user}", retry_num=attempt or None
                )

            if deliver(send):
                sent += 1

        def traffic() -> None:
            for u in range(soak.users):
                say(u, "digest every 60 seconds")
            n, started = 0, time.monotonic()
            while not stop.is_set():
                roll, user = rng.random(), rng.randrange(soak.users)
                if roll < 0.04:
                    text = f"refund order S{n}"
                elif roll < 0.09:
                    text = f"remind me in 20 seconds to stretch {n}"
                else:
                    text = f"hello {n}"
                say(user, text)
                n += 1
                pause = started + n / soak.rate - time.monotonic()
                if pause > 0:
                    stop.wait(pause)

        def clicker() -> None:
            while not stop.is_set():
                try:
                    rid, channel, ts = prompts.get(timeout=0.5)
                except queue.Empty:
                    continue
                roll = rng.random()
                if roll < 0.1:
                    continue  # nobody answers: it expires
                action = "approve" if roll < 0.75 else "deny"
                deliver(
                    lambda _a, r=rid, c=channel, t=ts, a=action: sender.block_action(
                        c[1:], a, r, channel=c, message_ts=t
                    )
                )

        threads = [threading.Thread(target=traffic), threading.Thread(target=clicker)]
        for t in threads:
            t.start()
        started = time.monotonic()
        while time.monotonic() - started < soak.seconds:
            # Every user's digest timer fires on the same minute: samples a fixed period
            # apart would all land at one phase of that burst (all inside it, or all past
            # it), so each waits a period +-25%.
            stop.wait(soak.sample_every * sampling.uniform(0.75, 1.25))
            assert app.poll() is None, (workdir / "serve.log").read_text()[-2000:]
            rss, fds, nthreads = _proc(app.pid)
            wal = Path(f"{db}-wal")
            unsent = store.outbox("pending") + store.outbox("sending")
            now = int(time.time())
            sample = Sample(
                at=round(time.monotonic() - started, 1),
                rss_mb=round(rss, 1),
                fds=fds,
                threads=nthreads,
                wal_mb=round(wal.stat().st_size / MB if wal.exists() else 0.0, 2),
                db_mb=round(db.stat().st_size / MB, 1),
                backlog=count_events(store, "pending") + count_events(store, "running"),
                unsent=len(unsent),
                oldest_unsent=int(time.time()) - min((r.created_at for r in unsent), default=now),
                sent=sent,
                replies=posts,
            )
            soak.samples.append(sample)
            if report is not None:
                with report.open("a") as out:
                    out.write(json.dumps(asdict(sample)) + "\n")
            print(f"  soak {sample}", flush=True)
        stop.set()
        for t in threads:
            t.join(30)
        store.close()
    finally:
        stop.set()
        app.terminate()
        app.communicate(timeout=30)
        log.close()
        emu.stop()
    return soak


def check(soak: Soak) -> list[str]:
    """What did not stay flat after the warm-up (empty when everything did)."""
    steady = [s for s in soak.samples if s.at > soak.warmup]
    if len(steady) < 4:
        return [f"only {len(steady)} samples after the warm-up"]
    third = max(1, len(steady) // 3)
    early, late = steady[:third], steady[-third:]
    base_rss = statistics.median(s.rss_mb for s in early)
    problems = []
    worst_rss = max(s.rss_mb for s in steady)
    if worst_rss > base_rss * 1.15 + 15:
        problems.append(f"resident memory grew from {base_rss:.0f} MB to {worst_rss:.0f} MB")
    for name in ("fds", "threads"):
        base = max(getattr(s, name) for s in early)
        worst = max(getattr(s, name) for s in steady)
        if worst > base + 5:
            problems.append(f"{name} grew from {base} to {worst}")
    worst_wal = max(s.wal_mb for s in soak.samples)
    if worst_wal > WAL_SIZE_LIMIT / MB + 1:
        problems.append(f"the -wal file reached {worst_wal} MB (limit {WAL_SIZE_LIMIT // MB} MB)")
    bound = 10 * soak.rate  # ten seconds of traffic
    if max(s.backlog for s in steady) > bound:
        problems.append(f"the backlog reached {max(s.backlog for s in steady)} (> {bound:.0f})")
    early_backlog = statistics.mean(s.backlog for s in early)
    late_backlog = statistics.mean(s.backlog for s in late)
    if late_backlog > early_backlog * 1.5 + 25:
        problems.append(
            f"the backlog grew from {early_backlog:.0f} to {late_backlog:.0f} on average"
        )
    # Unsent rows are what the dispatcher has in hand: they follow the emulator's speed and the
    # paced conversations, so their count must stay flat, and none may wait past the pacing gap
    # (60 s here) by more than half a minute: a reply stuck in the outbox fails the soak.
    early_unsent = statistics.mean(s.unsent for s in early)
    late_unsent = statistics.mean(s.unsent for s in late)
    if late_unsent > early_unsent * 1.5 + 25:
        problems.append(f"unsent outbox rows grew from {early_unsent:.0f} to {late_unsent:.0f}")
    if max(s.unsent for s in steady) > 2 * bound:
        problems.append(f"unsent outbox rows reached {max(s.unsent for s in steady)}")
    oldest = max(s.oldest_unsent for s in steady)
    if oldest > OUTBOX_GAP + 30:
        problems.append(f"an outbox row waited {oldest} s unsent (gap {OUTBOX_GAP} s)")
    return problems


def hourly(soak: Soak) -> list[str]:
    """The samples summed up per hour: the figures a long soak reports."""
    lines = []
    hours = int(max((s.at for s in soak.samples), default=0) // 3600) + 1
    for h in range(hours):
        part = [s for s in soak.samples if h * 3600 < s.at <= (h + 1) * 3600]
        if not part:
            continue
        lines.append(
            f"hour {h + 1}: rss {min(s.rss_mb for s in part):.0f}-{max(s.rss_mb for s in part):.0f}"
            f" MB, fds max {max(s.fds for s in part)}, threads max {max(s.threads for s in part)},"
            f" wal max {max(s.wal_mb for s in part):.1f} MB, db {part[-1].db_mb:.0f} MB,"
            f" backlog mean {statistics.mean(s.backlog for s in part):.0f}"
            f" max {max(s.backlog for s in part)}, unsent mean"
            f" {statistics.mean(s.unsent for s in part):.0f} max {max(s.unsent for s in part)}"
            f" (oldest {max(s.oldest_unsent for s in part)} s),"
            f" messages {part[-1].sent}, posts {part[-1].replies}"
        )
    return lines
