"""Entry points for the real worker processes the multi-process tests start.

`python -m tests.support.procs worker --db DB [--schema S] --holder H` runs a Worker with a
RecordingAgent until SIGTERM. The agent posts one outbox row per run describing it (holder,
generation, start, end, event ids), and those rows exist only for runs whose fenced finish
committed, which is exactly what the overlap check needs. With `--runs-log F` it also appends
every run it made, finished or fenced off, to F (real wall-clock start and end), so runs that
overlapped in time can be found even when fencing refused one of them. `--skew S` runs the
host clock S seconds off; `--clock server` reads the time as the database server's.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import threading
import time

from wakeful.core.clock import HostClock, LoopClock, ServerClock
from wakeful.core.effects import Effects, Post
from wakeful.core.run import Run
from wakeful.core.runner import AgentLike
from wakeful.core.settings import Settings
from wakeful.core.store import Store, open_store
from wakeful.core.worker import Worker


class RecordingAgent:
    def __init__(self, holder: str, max_sleep: float, runs_log: str | None = None) -> None:
        self.holder = holder
        self.max_sleep = max_sleep
        self.runs_log = runs_log
        self.gen = 0

    def run(self, run: Run) -> Effects:
        start = time.time()
        try:
            return self._run(run, start)
        finally:
            if self.runs_log:
                line = {"inbox": run.inbox, "holder": self.holder, "start": start}
                line["end"] = time.time()
                with open(self.runs_log, "a") as log:
                    log.write(json.dumps(line) + "\n")

    def _run(self, run: Run, start: float) -> Effects:
        time.sleep(random.uniform(0, self.max_sleep / 2))
        run.heartbeat()
        time.sleep(random.uniform(0, self.max_sleep / 2))
        run.heartbeat()
        record = {
            "holder": self.holder,
            "start": start,
            "end": time.time(),
            "events": [e.id for e in run.events],
        }
        return Effects(messages=[Post(f"C-{run.inbox}", json.dumps(record), priority="urgent")])


class NoopAgent:
    """A run that does nothing: what a benchmark of the engine's own cost needs."""

    def run(self, run: Run) -> Effects:
        return Effects()


def worker_cmd(db: str, schema: str | None, holder: str, *options: str) -> list[str]:
    """The command line of one worker process of this module."""
    cmd = [sys.executable, "-m", "tests.support.procs", "worker", "--db", db, "--holder", holder]
    return [*cmd, *(["--schema", schema] if schema else []), *options]


def open_for(db: str, schema: str | None, settings: Settings) -> Store:
    if db.startswith("postgresql://"):
        return open_store(db, settings, schema=schema, pool_size=2)
    return open_store(db, settings)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["worker"])
    parser.add_argument("--db", required=True)
    parser.add_argument("--schema")
    parser.add_argument("--holder", required=True)
    parser.add_argument("--lease-ttl", type=int, default=5)
    parser.add_argument("--max-sleep", type=float, default=0.005)
    parser.add_argument("--runs-log")
    parser.add_argument("--skew", type=float, default=0.0, help="host clock offset, seconds")
    parser.add_argument("--clock", choices=["host", "server"], default="host")
    parser.add_argument("--noop", action="store_true", help="runs return no effects (bench)")
    args = parser.parse_args(argv)
    store = open_for(args.db, args.schema, Settings(lease_ttl=args.lease_ttl))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def host() -> float:
        return time.time() + args.skew

    clock: LoopClock = ServerClock(store, host=host) if args.clock == "server" else HostClock(host)
    agent: AgentLike = (
        NoopAgent() if args.noop else RecordingAgent(args.holder, args.max_sleep, args.runs_log)
    )
    worker = Worker(
        store=store,
        agent=agent,
        holder=args.holder,
        poll=0.05,
        clock=clock,
    )
    print("ready", flush=True)
    worker.run(stop)
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
