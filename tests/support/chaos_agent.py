"""The agent chaos runs use: refund-desk, plus a deliberate poison pill.

Loaded by worker processes through `WAKEFUL_AGENT=tests.support.chaos_agent:build`, the way a
user's own agent is: a factory of `wakeful.agents.Setup`.
"""

from __future__ import annotations

from wakeful.agents import Agent, Message, Run, Setup
from wakeful.bot.builtin.refund_desk import RefundDesk

POISON = "poison pill"


class PoisonedDesk(Agent):
    def __init__(self, inner: RefundDesk) -> None:
        self.inner = inner
        self.tools = inner.tools
        self.greeting = inner.greeting

    def run(self, run: Run) -> None:
        for e in run.events:
            if isinstance(e, Message) and POISON in e.text:
                raise RuntimeError("deliberately poisoned event")
        self.inner.run(run)


def build(setup: Setup) -> PoisonedDesk:
    return PoisonedDesk(RefundDesk(setup))
