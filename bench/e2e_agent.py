"""The built-in agent for the end-to-end benchmark, timed: each run's wall-clock start and end
go to WAKEFUL_E2E_RUNS (one JSON line), so the bench can split a message's way into the wait
for the worker, the run, and what follows it. Loaded with WAKEFUL_AGENT=bench.e2e_agent:build."""

from __future__ import annotations

import json
import os
import threading
import time

from wakeful.agents import Agent, Run, Setup
from wakeful.bot.builtin.refund_desk import RefundDesk


class TimedDesk(Agent):
    def __init__(self, inner: RefundDesk, path: str) -> None:
        self.inner = inner
        self.tools = inner.tools
        self.path = path
        self.lock = threading.Lock()

    def run(self, run: Run) -> None:
        start = time.time()
        try:
            self.inner.run(run)
        finally:
            line = json.dumps({"inbox": run.inbox, "start": start, "end": time.time()})
            with self.lock, open(self.path, "a") as out:
                out.write(line + "\n")


def build(setup: Setup) -> TimedDesk:
    return TimedDesk(RefundDesk(setup), os.environ["WAKEFUL_E2E_RUNS"])
