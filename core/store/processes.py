"""Which processes are alive, so a dead one's leases end at once instead of after their TTL.

Every wakeful process records itself (`register`) and says it is still alive every heartbeat
(`beat`); each lease it takes names it (`Store.process`, written by the claims). `reap` judges
the others by the liveness rule (core/rules/liveness.py) and, for each one found dead, deletes
its row and lets its live leases lapse now in one short transaction, the events of its runs
due at once. A lease that lapses keeps its generation, so the next holder takes the next one
and a stalled holder that wakes up is refused by the fence exactly as after a TTL.
"""

from __future__ import annotations

from dataclasses import dataclass

from wakeful.core.records import ProcessRecord
from wakeful.core.rules.liveness import Watch
from wakeful.core.store.base import StoreBase
from wakeful.core.store.codec import require
from wakeful.core.store.sql import Row, Tx


@dataclass(frozen=True, slots=True)
class Reaped:
    """A process found dead and forgotten, and how many live leases it lost."""

    process: ProcessRecord
    leases: int
    why: str


class Processes(StoreBase):
    def register(self, me: ProcessRecord) -> None:
        """Record this process as running, seen at `me.seen_at` (again, when it was judged
        dead while stalled: the same row comes back), and name it on every lease this store
        grants from now on."""
        require(id=me.id, host=me.host, role=me.role)
        params = {
            "id": me.id,
            "host": me.host,
            "boot": me.boot,
            "pid": me.pid,
            "pid_start": me.pid_start,
            "role": me.role,
            "started_at": me.started_at,
            "now": me.seen_at,
        }
        with self._tx() as tx:
            tx.run("register_process", params)
        self.process = me.id

    def beat(self, process: str, now: int) -> bool:
        """Say that `process` is alive now; False when its row is gone (it was judged dead
        while it stalled, and its leases were taken over: it must register again)."""
        with self._tx() as tx:
            return tx.run("beat_process", {"id": process, "now": now}) == 1

    def forget(self, process: str, now: int) -> int:
        """A clean stop: delete the process's row and let the leases it still holds lapse
        now (a run its loops could not end in time). Returns how many lapsed."""
        with self._tx() as tx:
            tx.run("forget_process", {"id": process})
            return _end_leases(tx, process, now)

    def reap(self, watch: Watch, now: int) -> list[Reaped]:
        """Judge every process that may be dead (those of this host, whose pids can be
        checked, and those silent longer than `watch.silence`) and forget each one `watch`
        finds dead, its live leases lapsing now; returns them. This process (`self.process`)
        is never judged. One read, then one short write per dead process; a process that
        beat between the two is left alone."""
        here = {"host": watch.here.name, "boot": watch.here.boot}
        with self._tx(write=False) as tx:
            rows = tx.all("processes_here", here) if watch.here.boot else []
            rows += tx.all("processes_silent", {"before": now - watch.silence})
        seen: set[str] = set()
        reaped: list[Reaped] = []
        for p in map(process_record, rows):
            if p.id in seen or p.id == self.process:
                continue
            seen.add(p.id)
            verdict = watch.judge(p, now)
            if verdict.alive:
                continue
            with self._tx() as tx:
                if tx.run("forget_dead_process", {"id": p.id, "seen_at": p.seen_at}) != 1:
                    continue  # it beat since it was read, or another process reaped it
                leases = _end_leases(tx, p.id, now)
            reaped.append(Reaped(p, leases, verdict.why))
        return reaped

    def processes(self) -> list[ProcessRecord]:
        """Every process that says it runs, oldest first."""
        with self._tx(write=False) as tx:
            return [process_record(r) for r in tx.all("all_processes")]

    def lease_process(self, inbox: str, now: int) -> ProcessRecord | None:
        """The process holding the inbox's live lease, when its holder recorded one."""
        with self._tx(write=False) as tx:
            row = tx.one("lease_process", {"inbox": inbox, "now": now})
        return None if row is None else process_record(row)


def _end_leases(tx: Tx, process: str, now: int) -> int:
    """Let the live leases of a process that is gone lapse now, its runs' events due at once
    (their attempt stays counted, and each is a retry now, claimed and run alone: a run that
    kills its process is dead after MAX_ATTEMPTS deaths of its own, sooner than before).
    Returns how many leases lapsed."""
    inboxes = [
        str(r["inbox"]) for r in tx.all("end_process_leases", {"process": process, "now": now})
    ]
    for inbox in inboxes:  # the leases first, then their events: the order a worker locks them
        tx.run("due_running_events", {"inbox": inbox, "now": now})
    return len(inboxes)


def process_record(row: Row) -> ProcessRecord:
    return ProcessRecord(
        id=str(row["id"]),
        host=str(row["host"]),
        boot=str(row["boot"]),
        pid=int(row["pid"]),
        pid_start=str(row["pid_start"]),
        role=str(row["role"]),
        started_at=int(row["started_at"]),
        seen_at=int(row["seen_at"]),
    )
