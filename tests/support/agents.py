"""The built-in agents for the engine's tests: built from a store the way a worker builds them
(a factory given a Setup), without Slack."""

from __future__ import annotations

from collections.abc import Sequence

from wakeful.agents import Agent, Message, Run, Setup
from wakeful.bot.builtin.refund_desk import RefundDesk
from wakeful.bot.process.config import Config
from wakeful.bot.process.loading import make_setup
from wakeful.core.clock import Clock, wall_clock
from wakeful.core.store import Store


def setup_for(
    store: Store,
    approvers: Sequence[str] = (),
    clock: Clock = wall_clock,
    min_digest_period: int = Config.min_digest_period,
) -> Setup:
    config = Config(
        approvers=tuple(approvers), settings=store.settings, min_digest_period=min_digest_period
    )
    return make_setup(config, store, lambda _user: "", {}, clock)


def refund_desk(store: Store, approvers: Sequence[str] = (), min_digest: int = 60) -> RefundDesk:
    """The refund desk, setting no digest period under `min_digest` seconds
    (WAKEFUL_MIN_DIGEST_PERIOD)."""
    return RefundDesk(setup_for(store, approvers, min_digest_period=min_digest))


BOOM = "boom"
"""The poison of issue 33's "done when": a message that says it fails every attempt."""


class BoomDesk(Agent):
    """The refund desk, except that a message saying `boom` makes the run raise
    `RuntimeError("boom")` (every attempt: it goes dead). Loaded by `wakeful serve` through
    `WAKEFUL_AGENT=tests.support.agents:boom_desk`."""

    def __init__(self, inner: RefundDesk) -> None:
        self.inner = inner
        self.tools = inner.tools
        self.greeting = inner.greeting

    def run(self, run: Run) -> None:
        if any(isinstance(e, Message) and e.text.strip() == BOOM for e in run.events):
            raise RuntimeError(BOOM)
        self.inner.run(run)


def boom_desk(setup: Setup) -> BoomDesk:
    return BoomDesk(RefundDesk(setup))
