"""End to end: a message sent to the app, its reply received by Slack (the emulator).

Both apps run as processes against one Slack emulator process; the load process sends signed
message events at a fixed rate over a number of users (open loop: each message's time is its
scheduled send time) and logs when each was sent and how long its acknowledgement took. The
emulator records when each reply arrived. A reply "Handled N messages." answers the next N
messages of its conversation in order, so every message's end-to-end time is exact.

- latency: `wakeful serve` at 200 messages/s over 200 users, p50 and p99, against its batch
  window, with the breakdown: ack, wait for the worker (batch window included), run, and
  outbox plus send (the run's finish to Slack's receipt);
- peak throughput: the highest rate whose messages are all answered, with the backlog of
  unanswered messages flat, for `wakeful serve` and for a bare slack-bolt app that posts one
  reply per message itself (bench/bare_reply_app.py).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wakeful.devtools.emulator import RemoteEmulator

from .common import Figure, cpu_seconds, percentile
from .http import SECRET, _start, _stop

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "xoxb-e2e"
HANDLED = re.compile(r"^Handled (\d+) messages?\.", re.MULTILINE)


def send_load(url: str, rate: float, seconds: float, users: int, log: Path) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "bench.http_load",
        *("--url", url, "--secret", SECRET, "--rate", str(rate), "--seconds", str(seconds)),
        *("--users", str(users), "--log", str(log)),
    ]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=seconds * 4 + 60)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def answered(log: Path, emu: RemoteEmulator, settle: float) -> list[tuple[float, float | None]]:
    """(sent at, answered at or None) for every message of the load log, after waiting up to
    `settle` seconds for the last replies."""
    sent = [json.loads(line) for line in log.read_text().splitlines()]
    deadline = time.monotonic() + settle
    while True:
        posts = [c for c in emu.calls("chat.postMessage") if c.response.get("ok")]
        replied = sum(_count(c.params.get("text")) for c in posts)
        if replied >= len(sent) or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    waiting: dict[str, deque[dict[str, Any]]] = defaultdict(deque)
    for m in sent:
        waiting[f"D{m['user']}"].append(m)
    out: dict[int, tuple[float, float | None]] = {m["i"]: (m["at"], None) for m in sent}
    for call in sorted(posts, key=lambda c: c.at):
        queue = waiting[str(call.params.get("channel"))]
        for _ in range(_count(call.params.get("text"))):
            if queue:
                m = queue.popleft()
                out[m["i"]] = (m["at"], call.at)
    return [out[i] for i in sorted(out)]


def _count(text: Any) -> int:
    """How many messages a post answers: 'Handled 3 messages.' -> 3. A post the outbox merged
    from several runs' replies holds one such line per run, and answers all of them."""
    if not isinstance(text, str):
        return 0
    return sum(int(n) for n in HANDLED.findall(text))


def _runs(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _app(kind: str, api: str, tmp: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    if kind == "bare":
        cmd = [sys.executable, "-m", "bench.bare_reply_app", "--secret", SECRET]
        return _start([*cmd, "--token", TOKEN, "--api-url", api], env)
    cmd = [sys.executable, "-m", "wakeful.bot.commands.cli", "serve"]
    return _start(cmd, app_env(api, tmp, env))


def app_env(api: str, tmp: Path, env: dict[str, str]) -> dict[str, str]:
    """The environment of wakeful's processes in these runs: the emulator's workspace, a new
    store under `tmp`, the bench's agent, warnings only."""
    return {
        **env,
        "SLACK_BOT_TOKEN": TOKEN,
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_API_URL": api,
        "WAKEFUL_DB": str(tmp / f"e2e-{time.monotonic_ns()}.db"),
        "WAKEFUL_HOST": "127.0.0.1",
        "WAKEFUL_PORT": "0",
        "WAKEFUL_LOG_LEVEL": "WARNING",
        "WAKEFUL_AGENT": "bench.e2e_agent:build",
        "WAKEFUL_E2E_RUNS": str(tmp / "runs.jsonl"),
    }


def run_e2e(quick: bool, say: Callable[[str], None] = print) -> list[Figure]:
    tmp = Path(tempfile.mkdtemp(prefix="wakeful-bench-e2e-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    emu_proc, api = _start(
        [sys.executable, "-m", "wakeful.devtools.emulator", "--port", "0", "--token", TOKEN], env
    )
    emu = RemoteEmulator(api.rsplit("/api/", 1)[0])
    figures: list[Figure] = []
    window = 0.5
    try:
        figures.append(latency(tmp, api, emu, env, quick, window, say))
        figures += peak(tmp, api, emu, env, quick, say)
    finally:
        _stop(emu_proc)
    return figures


def latency(
    tmp: Path,
    api: str,
    emu: RemoteEmulator,
    env: dict[str, str],
    quick: bool,
    window: float,
    say: Callable[[str], None],
) -> Figure:
    """`wakeful serve` at 200 messages/s over 200 users: end-to-end p50 / p99 and breakdown."""
    seconds = 5.0 if quick else 30.0
    emu.clear()
    proc, url = _app("wakeful", api, tmp, env)
    try:
        log = tmp / "latency.jsonl"
        load = send_load(url, 200, seconds, 200, log)
        pairs = answered(log, emu, settle=10)
    finally:
        _stop(proc)
    times = sorted(done - at for at, done in pairs if done is not None)
    missing = sum(1 for _, done in pairs if done is None)
    p50, p99 = percentile(times, 50) * 1000, percentile(times, 99) * 1000
    parts = breakdown(log, tmp / "runs.jsonl", emu)
    say(
        f"  e2e at 200/s over 200 users: p50 {p50:.0f} ms, p99 {p99:.0f} ms, "
        f"unanswered {missing}; ack p99 {load['p99_ms']:.1f} ms; breakdown (median ms) {parts}"
    )
    goal_p50, goal_p99 = window * 1000 + 50, window * 1000 + 250
    return Figure(
        "end to end at 200 msg/s over 200 users: p50 / p99",
        p99,
        "ms p99",
        None,
        "",
        f"p50 <= {goal_p50:.0f}, p99 <= {goal_p99:.0f} ms",
        p50 <= goal_p50 and p99 <= goal_p99 and missing == 0,
        f"p50 {p50:.0f} ms (batch window {window * 1000:.0f} ms); "
        + "; ".join(f"{k} {v:.1f}" for k, v in parts.items()),
    )


def breakdown(log: Path, runs_log: Path, emu: RemoteEmulator) -> dict[str, float]:
    """Median milliseconds of each leg, from the load log, the agent's run log and the
    emulator: ack; send -> run start (the worker's wait, batch window included); run start ->
    end; run end -> the reply's receipt at Slack (outbox and send)."""
    sent = [json.loads(line) for line in log.read_text().splitlines()]
    by_user: dict[str, list[float]] = defaultdict(list)
    for m in sent:
        by_user[m["user"]].append(m["at"])
    posts: dict[str, list[float]] = defaultdict(list)
    for c in emu.calls("chat.postMessage"):
        if c.response.get("ok"):
            posts[str(c.params.get("channel"))[1:]].append(c.at)
    wait, run, out = [], [], []
    for r in _runs(runs_log):
        user = r["inbox"].split(":", 1)[1]
        earlier = [t for t in by_user.get(user, []) if t <= r["start"]]
        if earlier:  # the oldest message this run can have waited for is its batch's first
            wait.append(r["start"] - max(earlier))
        run.append(r["end"] - r["start"])
        later = [t for t in posts.get(user, []) if t >= r["end"]]
        if later:
            out.append(min(later) - r["end"])
    acks = [m["ack"] for m in sent]
    return {
        "ack": statistics.median(acks) * 1000 if acks else float("nan"),
        "wait for worker": statistics.median(wait) * 1000 if wait else float("nan"),
        "run": statistics.median(run) * 1000 if run else float("nan"),
        "outbox+send": statistics.median(out) * 1000 if out else float("nan"),
    }


def peak(
    tmp: Path,
    api: str,
    emu: RemoteEmulator,
    env: dict[str, str],
    quick: bool,
    say: Callable[[str], None],
) -> list[Figure]:
    """The highest rate at which every message is answered and the backlog stays flat."""
    seconds = 5.0 if quick else 30.0
    steps = [200.0, 400.0] if quick else [200.0, 300.0, 400.0, 500.0, 600.0, 800.0, 1000.0]
    best: dict[str, float] = {}
    load: dict[str, str] = {}
    for kind in ("bare", "wakeful"):
        best[kind] = 0.0
        for rate in steps:
            emu.clear()
            proc, url = _app(kind, api, tmp, env)
            try:
                log = tmp / f"peak-{kind}-{rate:.0f}.jsonl"
                before, machine_before = cpu_seconds(proc.pid), machine_busy()
                send_load(url, rate, seconds, 200, log)
                busy = (cpu_seconds(proc.pid) - before) / seconds
                machine = (machine_busy() - machine_before) / seconds / (os.cpu_count() or 1)
                pairs = answered(log, emu, settle=5)
            finally:
                _stop(proc)
            ok = flat(pairs, seconds)
            load[kind] = (
                f"{busy:.0%} of a core at {rate:.0f}/s ({busy / rate * 1000:.1f} ms/msg),"
                f" the machine {machine:.0%} busy"
            )
            say(
                f"  e2e peak {kind} at {rate:.0f}/s: {'kept up' if ok else 'fell behind'}; "
                f"app process CPU {load[kind]}"
            )
            if not ok:
                break
            best[kind] = rate
    ratio = best["wakeful"] / max(best["bare"], 1.0)
    return [
        Figure(
            "peak end-to-end rate, wakeful serve (SQLite)",
            best["wakeful"],
            "msg/s",
            ratio,
            "bare Bolt app posting its own replies",
            ">= 0.5x",
            ratio >= 0.5,
            f"bare app: {best['bare']:.0f}/s; each step held {seconds:.0f} s; steps "
            + ", ".join(f"{s:.0f}" for s in steps)
            + f"; at the last step tried, wakeful's process used {load['wakeful']},"
            f" the bare app's {load['bare']}",
        )
    ]


def machine_busy() -> float:
    """CPU seconds the whole machine has spent busy (Linux /proc/stat): the load generator and
    the emulator share the cores with the app."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def flat(pairs: list[tuple[float, float | None]], seconds: float) -> bool:
    """Every message answered within 5 s of the load's end, and the unanswered backlog at the
    end of the window no larger than a second's worth more than a third of the way in."""
    if not pairs or any(done is None for _, done in pairs):
        return False
    start = pairs[0][0]

    def backlog(at: float) -> int:
        return sum(1 for sent, done in pairs if sent <= at and (done is None or done > at))

    rate = len(pairs) / seconds
    return backlog(start + seconds) <= backlog(start + seconds / 3) + rate
