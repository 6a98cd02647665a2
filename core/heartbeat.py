"""The heartbeat of a process: it records that it is alive, and ends the leases of the dead.

Every `WAKEFUL_HEARTBEAT` seconds one loop of each process says it is alive (store.beat) and
judges the others (store.reap, by core/rules/liveness.py). A lease whose holder is dead then
lapses at once, and the worker is woken to take its inboxes: a crash costs seconds, not a
lease's TTL. A live holder, however long its tool call, keeps its lease for the full TTL.

The pid check reads /proc (Linux); where it cannot, silence alone decides, as across hosts.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass, field, replace

from wakeful.core.errors import StoreUnavailable
from wakeful.core.loops import Kicker, Loop, Wakeup
from wakeful.core.records import ProcessRecord
from wakeful.core.rules.liveness import Host, PidStart, Watch, silence_for
from wakeful.core.store import Store
from wakeful.core.store.processes import Reaped

log = logging.getLogger("wakeful")


def read_pid_start(pid: int) -> str | None:
    """The start time of `pid` (field 22 of /proc/<pid>/stat, clock ticks since boot): None
    when no live process has it (none, or a zombie waiting for its parent), '' when one has
    it but /proc does not say when it started."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except (FileNotFoundError, ProcessLookupError):
        return None
    except OSError:
        return _exists(pid)
    # "pid (comm) state ... starttime ...": comm may hold spaces and parentheses.
    fields = stat[stat.rfind(")") + 2 :].split()
    if len(fields) < 20:
        return _exists(pid)
    if fields[0] in ("Z", "X"):  # zombie or dead: it runs no more
        return None
    return fields[19]


def _exists(pid: int) -> str | None:
    """'' when a process has `pid` (its start time unknown), None when none has."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except OSError:
        return ""  # it exists, but is not ours to signal
    return ""


def this_host() -> Host:
    """This host's name, and its boot id with this process's pid namespace: two containers
    that share a host name (host networking) have pid namespaces of their own, and one's
    pids mean nothing in the other. Unknown parts leave `boot` empty."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot_id = f.read().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return Host(socket.gethostname(), "")
    return Host(socket.gethostname(), f"{boot_id} {namespace}" if boot_id else "")


def utc(seconds: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


@dataclass(kw_only=True)
class Heartbeat(Loop[Store]):
    """Records this process alive every `poll` seconds and ends the leases of dead ones.

    `start` runs one beat before the process takes work or answers /healthz, so the leases of
    the process it replaces end before anything waits on them. A beat the store refuses is
    logged and tried again (the loop's rule): a heartbeat never stops its process."""

    role: str
    """What the process runs (`worker`, `worker,scheduler,dispatcher`, ...): for log lines."""
    wake_worker: Kicker = field(default_factory=Wakeup)
    """Kicked after leases were taken from a dead process, so its inboxes run now."""
    here: Host = field(default_factory=this_host)
    pid_start: PidStart = read_pid_start
    pid: int = field(default_factory=os.getpid)

    def __post_init__(self) -> None:
        self.id = f"{self.here.name}:{self.pid}:{uuid.uuid4().hex[:8]}"
        # From here on every lease this store grants names this process, even before its row
        # is written (a store unavailable at start): the row's first beat makes them reapable.
        self.store.process = self.id
        self._me: ProcessRecord | None = None
        self._watching_since: int | None = None  # since when this process's beats land

    def start(self, now: int) -> None:
        """The first beat: record this process and end the leases of dead ones, before the
        process takes work. A store that refuses it now is tried again at the next beat."""
        try:
            self.tick(now)
        except StoreUnavailable as exc:
            log.warning("heartbeat: store unavailable at start-up, retrying: %s", exc)

    def tick(self, now: int) -> int:
        try:
            self._beat(now)
            if self._watching_since is None:
                self._watching_since = now
            silence = silence_for(self.store.settings.heartbeat)
            watch = Watch(self.here, silence, self._watching_since, self.pid_start)
            reaped = self.store.reap(watch, now)
        except StoreUnavailable:
            self._watching_since = None  # others' silence counts again once it is back
            raise
        for r in reaped:
            self._say(r)
        if any(r.leases for r in reaped):
            self.wake_worker.kick()
        return 0  # never busy: the next beat is a heartbeat away

    def _beat(self, now: int) -> None:
        if self._me is not None and self.store.beat(self.id, now):
            return
        if self._me is not None:
            log.warning(
                "this process (%s) was judged dead while it did not record that it is alive, "
                "and its leases were taken over; recording it again",
                self._me.name,
            )
        me = self._me or ProcessRecord(
            id=self.id,
            host=self.here.name,
            boot=self.here.boot,
            pid=self.pid,
            pid_start=self.pid_start(self.pid) or "",
            role=self.role,
            started_at=now,
            seen_at=now,
        )
        self.store.register(replace(me, seen_at=now))
        self._me = me

    def stop(self, now: int) -> None:
        """A clean stop: forget this process, and let any lease it still holds lapse now."""
        try:
            self.store.forget(self.id, now)
        except Exception as exc:  # stopping anyway: its row is reaped once it is gone
            log.warning("heartbeat: could not forget this process at stop: %s", exc)

    @staticmethod
    def _say(r: Reaped) -> None:
        p = r.process
        if r.leases:
            inboxes = "1 inbox" if r.leases == 1 else f"{r.leases} inboxes"
            log.warning(
                "took over %s from %s, not alive since %s: %s",
                inboxes,
                p.name,
                utc(p.seen_at),
                r.why,
            )
        else:
            log.info(
                "%s is not alive since %s (%s); it held no inbox", p.name, utc(p.seen_at), r.why
            )
