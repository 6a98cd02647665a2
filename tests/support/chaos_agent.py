"""The agent chaos runs use: refund-desk, plus a deliberate poison pill.

Loaded by worker processes through `WAKEFUL_AGENT=tests.support.chaos_agent:build`.
"""

from __future__ import annotations

from collections.abc import Callable

from wakeful.bot.agents.refund_desk import RefundDesk
from wakeful.bot.config import Config
from wakeful.core.agent import Run
from wakeful.core.effects import Effects
from wakeful.core.store import Store

POISON = "poison pill"


class PoisonedDesk:
    def __init__(self, inner: RefundDesk) -> None:
        self.inner = inner

    def run(self, run: Run) -> Effects:
        for e in run.events:
            if POISON in str((e.payload or {}).get("text", "")):
                raise RuntimeError("deliberately poisoned event")
        return self.inner.run(run)


def build(config: Config, store: Store, tz_lookup: Callable[[str], str]) -> PoisonedDesk:
    return PoisonedDesk(RefundDesk(store, approvers=config.approvers, tz_lookup=tz_lookup))
