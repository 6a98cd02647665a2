"""Whether a process that holds leases is still alive. Pure: the pid check comes in as a
function and the time as `now`, so each rule is tested on its own.

A lease's TTL has to cover the longest quiet stretch of a live run; a dead holder's leases
need not wait for it. On this host a dead process is known at once: its pid is gone, or now
belongs to a process that started at another time. Elsewhere the only sign is silence: a
process that has not recorded it is alive for `MISSED_BEATS` heartbeats is dead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from wakeful.core.records import ProcessRecord

MISSED_BEATS = 3
"""Heartbeats a process on another host may miss before it counts as dead."""

PidStart = Callable[[int], str | None]
"""The start time of a pid on this host: None when no live process has it, '' when one has
it but its start time cannot be read."""


@dataclass(frozen=True, slots=True)
class Host:
    """Where this process runs: the host's name, and its boot id with the pid namespace
    ('' when either is unknown: then no pid is checked, silence alone decides)."""

    name: str
    boot: str


@dataclass(frozen=True, slots=True)
class Verdict:
    alive: bool
    why: str = ""
    """For a dead process, what showed it: its pid is gone, or its silence."""


@dataclass(frozen=True, slots=True)
class Watch:
    """How one process judges the others.

    `silence`: seconds without a heartbeat that make a process elsewhere dead. `since`: when
    this watcher's own heartbeats began to land (at start, or after the store was unavailable
    to it): silence is counted from then at the earliest, so a store that was away for
    everyone does not make every other host look dead the moment it is back."""

    here: Host
    silence: int
    since: int
    pid_start: PidStart

    def same_host(self, p: ProcessRecord) -> bool:
        """Whether `p`'s pid can be checked from here (this host, this boot, these pids)."""
        return bool(self.here.boot) and p.host == self.here.name and p.boot == self.here.boot

    def judge(self, p: ProcessRecord, now: int) -> Verdict:
        """Alive or dead. On this host: dead when its pid is gone or was reused, alive while
        it runs however long it has been quiet (a stalled process keeps its leases for their
        TTL, as before); a pid whose start times cannot be compared is judged by silence.
        Elsewhere: dead once silent for more than `silence` seconds."""
        if self.same_host(p):
            start = self.pid_start(p.pid)
            if start is None:
                return Verdict(False, "its process has ended")
            if start and p.pid_start:
                if start == p.pid_start:
                    return Verdict(True)
                return Verdict(False, "its process has ended (its pid is another's now)")
        quiet = now - max(p.seen_at, self.since)
        if quiet > self.silence:
            return Verdict(False, f"silent for {now - p.seen_at} s")
        return Verdict(True)


def silence_for(heartbeat: int) -> int:
    """Seconds without a heartbeat after which a process on another host is dead."""
    if heartbeat < 1:
        raise ValueError(f"heartbeat must be at least 1 s, got {heartbeat!r}")
    return MISSED_BEATS * heartbeat
