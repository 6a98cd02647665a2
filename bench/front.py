"""The front alone against the bare Bolt app (issue 26, item 6), and where its excess goes.

Each round loads the bare app beside one front at a time, 200 requests/s each, their requests
alternating, and takes per server the ack's p99 and the HTTP process's CPU per request: the
ratio of a pair cancels whatever else the machine did in that moment. Three fronts, so the
ratio can be read part by part:

- `serve --no-loops` on a file on disk: the figure the goal names;
- the same with its file on tmpfs (no fsync reaches a disk): what the fsync costs;
- the same callable with the ingest taken out (bench/front_stub.py): what the front costs
  apart from its durable commit, i.e. whether it does Bolt's work once.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from .common import Figure, cpu_seconds
from .http import ROOT, SECRET, _start, _stop, load_interleaved, serve_env

FRONT_GOAL = 1.3
"""Issue 26: the front alone acks at p99, and spends CPU per request, within 1.3x the bare
Bolt app's, measured in the same run."""
FRONT_ROUNDS = 15
FRONT = "front"
TMPFS = "front, store on tmpfs"
STUB = "front, ingest taken out"


def commit_cpu(folder: Path, count: int = 1000) -> float:
    """CPU (user + system, the fsync's included) of one durable SQLite ingest in `folder`, in
    ms: what the front spends per request that the bare app, storing nothing, does not."""
    from wakeful.core.events import Message
    from wakeful.core.store import open_store

    store = open_store(str(folder / "commit.db"))
    try:
        wires = [
            Message(
                text=f"load {i}", user=f"U{i:04d}", team="TLOAD", channel=f"DU{i:04d}", ts="1.0"
            ).to_wire()
            for i in range(count)
        ]
        before = os.times()
        for i, wire in enumerate(wires):
            store.ingest(f"TLOAD:U{i:04d}", "slack", f"Ev{i}", wire, 1)
        after = os.times()
    finally:
        store.close()
    spent = (after.user - before.user) + (after.system - before.system)
    return spent / count * 1000


def _servers(
    tmp: Path, api: str, env: dict[str, str]
) -> dict[str, tuple[list[str], dict[str, str]]]:
    """name -> (command, environment) of each server measured, the bare app first."""
    wenv = serve_env(env, api, str(tmp / "front.db"))
    serve = [sys.executable, "-m", "wakeful.bot.commands.cli", "serve", "--no-loops"]
    servers: dict[str, tuple[list[str], dict[str, str]]] = {
        "bare": ([sys.executable, "-m", "bench.bare_app", "--secret", SECRET], env),
        FRONT: (serve, wenv),
    }
    if Path("/dev/shm").is_dir():
        shm = Path(tempfile.mkdtemp(prefix="wakeful-bench-front-", dir="/dev/shm"))
        servers[TMPFS] = (serve, {**wenv, "WAKEFUL_DB": str(shm / "front.db")})
    servers[STUB] = ([sys.executable, "-m", "bench.front_stub", "--secret", SECRET], env)
    return servers


def _round(
    urls: dict[str, str], pids: dict[str, int], name: str, seconds: float, bare_first: bool
) -> dict[str, float]:
    """One pair loaded at once: each one's p50, p99 and CPU per request, and the ratios."""
    order = ["bare", name] if bare_first else [name, "bare"]
    before = {k: cpu_seconds(pids[k]) for k in order}
    got = load_interleaved([urls[k] for k in order], 200, seconds)
    row: dict[str, float] = {}
    for k, key in (("bare", "bare"), (name, "front")):
        r = got[urls[k]]
        if set(r["statuses"]) != {"200"}:
            raise RuntimeError(f"{k} answered {r['statuses']}")
        row[f"{key}_p99"] = r["p99_ms"]
        row[f"{key}_p50"] = r["p50_ms"]
        row[f"{key}_cpu"] = (cpu_seconds(pids[k]) - before[k]) / max(1, r["requests"]) * 1e3
    for key in ("p99", "p50", "cpu"):
        row[key] = row[f"front_{key}"] / max(row[f"bare_{key}"], 0.001)
    return row


def run_front(
    quick: bool, say: Callable[[str], None] = print, rounds: int = FRONT_ROUNDS
) -> list[Figure]:
    """The figures of the module's docstring: the medians of the rounds' ratios."""
    seconds = 2.0 if quick else 4.0
    rounds = 3 if quick else rounds
    tmp = Path(tempfile.mkdtemp(prefix="wakeful-bench-front-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    emu, api = _start(
        [sys.executable, "-m", "wakeful.devtools.emulator", "--port", "0", "--token", "xoxb-bench"],
        env,
    )
    servers = _servers(tmp, api, env)
    names = [n for n in servers if n != "bare"]
    procs: dict[str, subprocess.Popen[str]] = {}
    urls: dict[str, str] = {}
    rows: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    try:
        for name, (cmd, e) in servers.items():
            procs[name], urls[name] = _start(cmd, e)
        load_interleaved(list(urls.values()), 50, 1.0)  # warm up
        pids = {k: p.pid for k, p in procs.items()}
        for i in range(rounds):
            for name in names:
                row = _round(urls, pids, name, seconds, bare_first=i % 2 == 0)
                rows[name].append(row)
                say(
                    f"  round {i + 1}, {name}: p99 {row['front_p99']:.2f} / bare "
                    f"{row['bare_p99']:.2f} ms ({row['p99']:.2f}x), CPU/request "
                    f"{row['front_cpu']:.3f} / bare {row['bare_cpu']:.3f} ms ({row['cpu']:.2f}x)"
                )
    finally:
        for p in procs.values():
            _stop(p)
        _stop(emu)
    commit = commit_cpu(tmp, 300 if quick else 2000)
    say(f"  a durable SQLite ingest alone: {commit:.3f} ms CPU (user + system)")
    figures = _figures(rows, commit)
    for f in figures:
        say("  " + f.row())
    return figures


def _figures(rows: dict[str, list[dict[str, float]]], commit: float) -> list[Figure]:
    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in rows[name])

    def spread(name: str, key: str) -> str:
        values = sorted(r[key] for r in rows[name])
        return f"{values[0]:.2f}-{values[-1]:.2f}x over {len(values)} rounds"

    goal = f"<= {FRONT_GOAL}x"
    figures = [
        Figure(
            "HTTP ack p99 at 200/s, the front alone against the bare Bolt app, interleaved "
            "(median of the rounds' ratios)",
            med(FRONT, "front_p99"),
            "ms",
            med(FRONT, "p99"),
            "bare app p99",
            goal,
            med(FRONT, "p99") <= FRONT_GOAL,
            f"bare p99 {med(FRONT, 'bare_p99'):.2f} ms (medians); ratio {spread(FRONT, 'p99')}; "
            f"p50 {med(FRONT, 'front_p50'):.2f} against {med(FRONT, 'bare_p50'):.2f} ms, "
            f"{med(FRONT, 'p50'):.2f}x",
        ),
        Figure(
            "HTTP CPU per request at 200/s, the front alone against the bare Bolt app, "
            "interleaved (median of the rounds' ratios)",
            med(FRONT, "front_cpu"),
            "ms",
            med(FRONT, "cpu"),
            "bare app",
            goal,
            med(FRONT, "cpu") <= FRONT_GOAL,
            f"bare {med(FRONT, 'bare_cpu'):.3f} ms (medians); ratio {spread(FRONT, 'cpu')}; a "
            f"durable SQLite ingest alone costs {commit:.3f} ms of CPU here (its fsync "
            "included), what the bare app, storing nothing, never spends",
        ),
    ]
    for name, what in (
        (TMPFS, "the front's file on tmpfs, so no fsync reaches a disk"),
        (STUB, "the front's callable with its ingest taken out (bench/front_stub.py)"),
    ):
        if name not in rows:
            continue
        figures.append(
            Figure(
                f"HTTP CPU per request at 200/s, {name}, against the bare Bolt app, "
                "interleaved (where the front's excess goes; no goal)",
                med(name, "front_cpu"),
                "ms",
                med(name, "cpu"),
                "bare app",
                note=f"{what}; ratio {spread(name, 'cpu')}; ack p99 {med(name, 'p99'):.2f}x "
                f"({spread(name, 'p99')})",
            )
        )
    return figures
