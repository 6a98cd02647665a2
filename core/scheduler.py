"""The scheduler loop: turns due timers into inbox events, prunes aged rows and retries the
scrubs of erasures that could not finish (core/store/forget.py)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from wakeful.core.loops import Kicker, Loop, Wakeup
from wakeful.core.records import TimerFired
from wakeful.core.store.retention import Pruned
from wakeful.core.store.timers import DUE_PAGE

log = logging.getLogger("wakeful")


class SchedulerStore(Protocol):
    """The store as the scheduler uses it: fire what is due, prune what aged out, scrub what
    an erasure left in the files."""

    def fire_due_timers(self, now: int) -> TimerFired: ...

    def prune(self, now: int) -> Pruned: ...

    def scrub(self, now: int, retry: bool = False) -> bool: ...


if TYPE_CHECKING:
    from wakeful.core.store import Store

    def _kept(store: Store) -> SchedulerStore:
        return store  # mypy proves the real store keeps this contract


@dataclass(kw_only=True)
class Scheduler(Loop[SchedulerStore]):
    """Turns due timers into inbox events; kicks the worker when it stored some."""

    wake_worker: Kicker = field(default_factory=Wakeup)
    prune_every: float = 60.0
    """Seconds between retention passes once nothing aged is left."""
    prune_duty: float = 0.1
    """While a backlog of aged rows drains, the share of the time pruning may take: after a
    pass that left more, the next waits nine times as long as it took, so the HTTP front's
    inserts find SQLite's write lock free at least nine tenths of the time."""
    scrub_every: float = 5.0
    """Seconds between looks for an erasure whose files are not scrubbed yet (a lock, an older
    transaction or a reader held its scrub back), each retrying only the tables left: a
    person's erased text does not wait for the next erasure to leave the disk."""
    monotonic: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        self._prune_at = 0.0
        self._scrub_at = 0.0

    def tick(self, now: int) -> int:
        total = 0
        while True:
            result = self.store.fire_due_timers(now)
            total += result.fired + result.expired_approvals
            if result.due < DUE_PAGE:
                break
        if total:
            self.wake_worker.kick()
        started = self.monotonic()  # one reading paces both passes
        total += self._prune(now, started)
        if started >= self._scrub_at:
            self._scrub_at = started + self.scrub_every
            self.store.scrub(now, retry=True)
        return total

    def _prune(self, now: int, started: float) -> int:
        """One retention pass when one is due; the rows it deleted."""
        if started < self._prune_at:
            return 0
        pruned = self.store.prune(now)
        took = self.monotonic() - started
        self._prune_at = started + (took / self.prune_duty if pruned.more else self.prune_every)
        if pruned.total:
            log.info("retention: pruned %s", pruned.counts)
        return pruned.total

    def idle_wait(self) -> float:
        return max(0.0, min(self.poll, self._prune_at - self.monotonic()))
