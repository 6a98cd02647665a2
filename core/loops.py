"""What wakes a loop early (Wakeup, Bell) and the tick-then-sleep base every loop shares.

Each loop has `tick(now)`, one pass that tests drive on a simulated clock, and `run(stop)`, which
repeats ticks on the injected clock, sleeping until a wake-up or the poll interval.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from wakeful.core.clock import Clock, wall_clock
from wakeful.core.errors import StoreReplaced, StoreUnavailable

log = logging.getLogger("wakeful")
S = TypeVar("S")


class Kicker(Protocol):
    def kick(self) -> None: ...


class Wakeup:
    """A kick from ingest to an idle loop in the same process, so new work skips the poll wait."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._event = threading.Event()
        self._monotonic = monotonic
        self._first: float | None = None

    def time_with(self, monotonic: Callable[[], float]) -> None:
        """Time kicks on the timeline of the loop that reads them (a worker on a test's clock),
        so the duration it is handed and its own readings come from one clock."""
        self._monotonic = monotonic

    def kick(self) -> None:
        if self._first is None:
            self._first = self._monotonic()
        self._event.set()

    def since_first_kick(self) -> float | None:
        """Seconds since the first kick since the last call, or None: how long ago the news
        it carries arrived, however long the loop took to look, on the clock of `time_with`."""
        first, self._first = self._first, None
        return None if first is None else max(0.0, self._monotonic() - first)

    def wait(self, timeout: float) -> bool:
        fired = self._event.wait(timeout)
        self._event.clear()
        return fired


class Bell:
    """Rings every subscribed loop at once (shutdown).

    Everyday kicks are aimed instead (new events wake the worker, new outbox rows the
    dispatcher, new timers the scheduler): a loop woken for nothing still costs a thread switch
    and a look at the store, and those add up in the HTTP front's latency when they come
    hundreds of times a second."""

    def __init__(self) -> None:
        self._wakeups: list[Wakeup] = []

    def subscribe(self, wakeup: Wakeup | None = None) -> Wakeup:
        wakeup = wakeup or Wakeup()
        self._wakeups.append(wakeup)
        return wakeup

    def kick(self) -> None:
        for wakeup in self._wakeups:
            wakeup.kick()


@dataclass(kw_only=True)
class Loop(Generic[S]):
    store: S
    """The store as this loop uses it: each loop names the part it needs (a Protocol)."""
    clock: Clock = wall_clock
    poll: float = 1.0
    wakeup: Wakeup = field(default_factory=Wakeup)
    """What wakes this loop early: kicked by whoever has news for it."""

    def tick(self, now: int) -> int:
        raise NotImplementedError

    def idle_wait(self) -> float:
        """How long to sleep when a tick found nothing to do (a wake-up cuts it short)."""
        return self.poll

    def run(self, stop: threading.Event) -> None:
        """Tick until `stop` is set; a store outage is logged and retried, never fatal (a
        store file replaced under the process is said once: it does not pass by itself)."""
        replaced = False
        while not stop.is_set():
            try:
                busy = self.tick(self.clock())
            except StoreUnavailable as exc:
                if not replaced:
                    log.warning("%s: store unavailable, retrying: %s", type(self).__name__, exc)
                replaced = isinstance(exc, StoreReplaced)
                busy = 0
            except Exception:
                log.exception("%s: tick failed", type(self).__name__)
                busy = 0
            if busy:
                continue
            if stop.is_set():
                return
            self.sleep(self.wakeup, stop)

    def sleep(self, wakeup: Wakeup, stop: threading.Event) -> None:
        """Idle until a kick or `idle_wait()` seconds have passed."""
        wakeup.wait(self.idle_wait())
