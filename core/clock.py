"""Clocks: every rule takes `now` in integer seconds, and these are where it comes from.

On one host (SQLite) the host's clock is the only clock there is. With many hosts sharing a
PostgreSQL database, hosts' clocks disagree, and a host whose clock runs ahead would see a live
lease as expired and take it over. So on PostgreSQL every process reads the time as the
database server's: `ServerClock` measures this host's offset to the server and adds it to the
host clock. Lease expiry, claim backoff, due times and approval deadlines are then decided on
one clock, within the offset's error (half a round trip, milliseconds on a LAN).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger("wakeful.clock")
Clock = Callable[[], int]


class LoopClock(Protocol):
    """A clock a loop can time itself by: integer seconds for every rule, plus a sub-second
    timeline (batch windows, commit sharing, run times) and epoch milliseconds (the run log),
    read from one source, so a loop driven by a test's clock never mixes in the machine's time."""

    def __call__(self) -> int: ...

    def monotonic(self) -> float:
        """Seconds that never go back; only differences mean anything."""
        ...

    def wall_ms(self) -> int:
        """Epoch milliseconds, for timestamps a person reads."""
        ...


class HostClock:
    """This machine's clock (`host` in seconds: a test gives it a skew); its sub-second
    readings are always the machine's own."""

    def __init__(self, host: Callable[[], float] = time.time) -> None:
        self._host = host

    def __call__(self) -> int:
        return int(self._host())

    def monotonic(self) -> float:
        return time.monotonic()

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000


wall_clock = HostClock()
"""The host's clock: the default of every loop, and on SQLite the only clock there is."""


class ManualClock:
    """A clock that only moves when told to: scenarios and tests drive the loops with it."""

    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def monotonic(self) -> float:
        """The loops' sub-second timeline (batch windows, commit sharing, run times) on this
        clock too, so a loop driven by it never mixes in the machine's time."""
        return float(self.now)

    def wall_ms(self) -> int:
        return self.now * 1000


class TimeSource(Protocol):
    def server_time(self) -> float | None:
        """The database server's clock in seconds, or None where there is no other clock."""
        ...


class ServerClock:
    """The database server's time, read through this host's clock plus a measured offset.

    The offset is measured at the first call and again every `refresh` seconds (one small
    read-only query); when a measurement fails the last offset stands, so an outage never
    stops the clock. Until a first measurement succeeds (a process started while the server
    was unreachable) it is retried every second rather than every `refresh`, so the process
    does not decide leases on its own clock for long. `host` is the host clock (a test gives it
    a skew)."""

    def __init__(
        self,
        source: TimeSource,
        refresh: float = 30.0,
        host: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._source = source
        self._refresh = refresh
        self._host = host
        self._monotonic = monotonic
        self._offset = 0.0
        self._next_at = 0.0  # monotonic time of the next measurement
        self._measured = False
        self._lock = threading.Lock()

    @property
    def offset(self) -> float:
        """Server time minus host time, in seconds, as last measured."""
        return self._offset

    def __call__(self) -> int:
        due = self._monotonic() >= self._next_at
        if due and self._lock.acquire(blocking=False):
            try:
                self._measure()
            finally:
                self._lock.release()
        return int(self._host() + self._offset)

    def monotonic(self) -> float:
        return self._monotonic()

    def wall_ms(self) -> int:
        """The host's: the run log's timestamps decide nothing, so they skip the offset."""
        return time.time_ns() // 1_000_000

    def _measure(self) -> None:
        before = self._host()
        try:
            server = self._source.server_time()
        except Exception as exc:  # keep the last offset; look again later
            log.warning("server clock: cannot read the database's time: %s", exc)
            self._next_at = self._monotonic() + (self._refresh if self._measured else 1.0)
            return
        after = self._host()
        self._next_at = self._monotonic() + self._refresh
        self._measured = True
        if server is None:
            self._offset = 0.0
            return
        offset = server - (before + after) / 2
        if abs(offset - self._offset) >= 1.0:
            log.info("server clock: this host is %+.1f s off the database server", -offset)
        self._offset = offset
