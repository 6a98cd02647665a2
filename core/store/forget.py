"""Forgetting a person, and telling them what is kept (issue 38): the data-subject requests.

`erase_inbox` runs inside a transaction: the run's fenced finish when the person pressed
Forget (core/privacy.py), or `forget_inbox` from the command line, which first fences any
worker running the inbox (its lease expired: its finish changes nothing). It erases the
inbox's memory documents with every version, its saved conversation, the recorded model calls
and streams, timers and approval arguments, and the text of its events and outbox rows; the
rows themselves stay (counts, keys and the exactly-once guarantees hold). One audit line says
who asked, when and how much, never what.

Erased text must not linger in the store's files either: SQLite overwrites what it frees
(`secure_delete`, set on every connection) and the erasure ends with a WAL checkpoint that
truncates the -wal file; PostgreSQL rewrites the tables the erasure touched (`VACUUM FULL`,
which holds each table's lock while it copies it) so no dead tuple keeps the old text, once no
transaction older than the erasure is left (the copy keeps what one could still read). The
audit line names the tables not scrubbed yet; what a lock, a reader or an older transaction
held back is retried by the scheduler until done (`StoreBase.scrub`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import asdict, dataclass
from typing import Any

from wakeful.core.store.base import ERASED_TABLES, StoreBase
from wakeful.core.store.sql import Tx

log = logging.getLogger("wakeful.forget")

ERASED = json.dumps({"v": 2, "event": "erased"}, separators=(",", ":"))
"""An erased event's payload: decodes as an Unknown event, never as anyone's words."""
ERASED_STEP = json.dumps({"erased": True}, separators=(",", ":"))
"""A kept step's result once erased: the step still says it was done, not what it returned."""
WHY = "forgotten: erased at the person's request"


@dataclass(frozen=True, slots=True)
class Forgotten:
    """What one erasure reached: documents (current ones), their versions, events and outbox
    rows whose text went. `scrubbed`: the store's files hold none of it any more (False: a
    lock or an older transaction kept the scrub from finishing; the text is unreachable but
    may sit in free space until the scheduler's retry does it, `forgets.scrubbed_at`)."""

    documents: int
    versions: int
    events: int
    outbox: int
    scrubbed: bool = True


def erase_inbox(tx: Tx, inbox: str, asked_by: str, now: int) -> Forgotten:
    """Erase what `inbox` keeps about its person, inside the caller's transaction."""
    key = {"inbox": inbox}
    count = tx.one("forget_count_documents", key)
    documents = int(count["n"]) if count is not None else 0
    versions = tx.run("forget_memories", key)
    tx.run("forget_attempts", key)
    events = tx.run("forget_events", {**key, "erased": ERASED, "now": now})
    outbox = tx.run("forget_outbox", {**key, "why": WHY})
    for name in ("forget_sessions", "forget_set_aside_sessions", "forget_recorded_calls"):
        tx.run(name, key)
    tx.run("forget_step_args", {**key, "erased": ERASED_STEP})
    tx.run("forget_timers", key)
    tx.run("forget_approvals", {**key, "now": now})
    done = Forgotten(documents, versions, events, outbox)
    xid = tx.one("erase_xid")
    tx.run(
        "insert_forget",
        {
            **key,
            "asked_by": asked_by,
            "now": now,
            **_counts(done),
            "unscrubbed": ",".join(ERASED_TABLES),  # until the scrub (`StoreBase.scrub`)
            "xid": None if xid is None else xid["xid"],
        },
    )
    log.info(
        "forgot %s at the request of %s: %d documents (%d versions), %d events, %d outbox rows",
        inbox,
        asked_by,
        documents,
        versions,
        events,
        outbox,
    )
    return done


class ForgetRows(StoreBase):
    def forget_inbox(self, inbox: str, asked_by: str, now: int) -> Forgotten:
        """Erase what `inbox` keeps, whether or not a worker runs it (`wakeful forget`): the
        lease is expired in the same transaction, so a run in progress is fenced."""
        with self._tx() as tx:
            tx.run("expire_lease", {"inbox": inbox})
            done = erase_inbox(tx, inbox, asked_by, now)
        return dataclasses.replace(done, scrubbed=self.scrub(now))

    def forgets(self, inbox: str) -> list[dict[str, Any]]:
        """The audit lines of `inbox`'s erasures, oldest first."""
        with self._tx(write=False) as tx:
            return [dict(r) for r in tx.all("forgets_of", {"inbox": inbox})]

    def export_inbox(self, inbox: str) -> dict[str, Any]:
        """What is kept about one person, as JSON (`wakeful export`, the data-subject request):
        memory with every version, the saved conversation, events, outbox rows, timers and
        approvals, and the erasures already made."""
        key = {"inbox": inbox}
        with self._tx(write=False) as tx:
            memories = tx.all("export_memories", key)
            session = tx.one("export_session", key)
            events = tx.all("export_events", key)
            outbox = tx.all("export_outbox", key)
            timers = tx.all("export_timers", key)
            approvals = tx.all("export_approvals", key)
            forgets = tx.all("forgets_of", key)
        return {
            "inbox": inbox,
            "memory": [
                {
                    "path": r["path"],
                    "version": int(r["version"]),
                    "text": r["text"],
                    "written_at": int(r["written_at"]),
                    "current": bool(r["latest"]),
                }
                for r in memories
            ],
            "conversation": None if session is None else _json(session["state"]),
            "events": [{**dict(r), "payload": _json(r["payload"])} for r in events],
            "outbox": [dict(r) for r in outbox],
            "timers": [{**dict(r), "payload": _json(r["payload"])} for r in timers],
            "approvals": [{**dict(r), "args": _json(r["args"])} for r in approvals],
            "forgotten": [dict(r) for r in forgets],
        }


def _counts(done: Forgotten) -> dict[str, int]:
    counts = asdict(done)
    counts.pop("scrubbed")
    return counts


def _json(raw: Any) -> Any:
    """A stored JSON text, parsed (kept as text when it is not JSON)."""
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw
