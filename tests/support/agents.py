"""The built-in agents for the engine's tests: built from a store the way a worker builds them
(a factory given a Setup), without Slack."""

from __future__ import annotations

from collections.abc import Sequence

from wakeful.agents import Setup
from wakeful.bot.agents.refund_desk import RefundDesk
from wakeful.bot.config import Config
from wakeful.bot.loading import make_setup
from wakeful.core.clock import Clock, wall_clock
from wakeful.core.store import Store


def setup_for(store: Store, approvers: Sequence[str] = (), clock: Clock = wall_clock) -> Setup:
    config = Config(approvers=tuple(approvers), settings=store.settings)
    return make_setup(config, store, lambda _user: "", {}, clock)


def refund_desk(store: Store, approvers: Sequence[str] = (), min_digest: int = 60) -> RefundDesk:
    return RefundDesk(setup_for(store, approvers), min_digest=min_digest)
