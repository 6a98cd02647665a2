"""A restore of an older copy, as the store remembers it, so what the copy does not know was
answered is not answered twice.

A copy taken before some replies went out still holds their events as pending (and maybe their
rows as pending or in flight). After `wakeful restore` (which calls `mark_restored`), every
outbox row the copy had not sent, and every row a later run writes for events from before the
restore, is marked `look_first`: the dispatcher's sender looks in the conversation for a post
whose metadata names one of the row's events before it posts, and records the row sent when it
finds one. The copy's leases and in-flight batches are over at once (their holders are gone),
so nobody waits them out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from wakeful.core.records import StoredEvent
from wakeful.core.store.base import StoreBase
from wakeful.core.store.sql import Tx

ANSWERS_KEPT = 20
"""Event keys one row keeps (and its post's metadata carries): enough to find a run's post."""


@dataclass(frozen=True, slots=True)
class Restored:
    """What `mark_restored` did."""

    restored_at: int
    leases_expired: int
    rows_to_check: int


def answer_key(event: StoredEvent) -> str:
    """An event's key as outbox rows name it: its source's key, which a restore keeps."""
    return f"{event.source}:{event.source_id}"


def occurred_at(event: StoredEvent) -> int:
    """When an event happened: its storing, or, for a timer occurrence (`<timer>@<time>`),
    its scheduled time, so a reminder that fired between the copy and the restore (and fires
    again after it) counts as from before the restore."""
    if event.source == "timer":
        _, sep, at = event.source_id.rpartition("@")
        if sep and at.isdigit():
            return min(event.created_at, int(at))
    return event.created_at


def answer_marks(events: Sequence[StoredEvent], restored_at: int | None) -> dict[str, object]:
    """The `answers` and `look_first` columns of the rows a run over `events` writes."""
    if not events:
        return {"answers": None, "look_first": 0}
    keys = [answer_key(e) for e in events][:ANSWERS_KEPT]
    early = restored_at is not None and min(occurred_at(e) for e in events) <= restored_at
    return {"answers": json.dumps(keys), "look_first": int(early)}


class Restores(StoreBase):
    _restored_at: int | None = None
    _restored_read: bool = False
    """Whether `last_restored` has read the store's answer (once per open store)."""

    def mark_restored(self, now: int, source: str = "") -> Restored:
        """Record that this store was just restored from an older copy (`source`): leases
        and in-flight batches of the copy end now, and every row it had not sent is looked for
        in Slack before it is posted. Run by `wakeful restore`, before any process opens it."""
        with self._tx() as tx:
            leases = tx.run("expire_all_leases", {"now": now})
            tx.run("release_copied_sends", {"now": now})
            rows = tx.run("look_first_open_rows", {})
            params = {"now": now, "source": source[:1000], "leases": leases, "rows": rows}
            tx.run("insert_restore", params)
        self._restored_at, self._restored_read = now, True
        return Restored(now, leases, rows)

    def last_restored(self, tx: Tx | None = None) -> int | None:
        """When the store was last restored (None: never). Read once (within `tx` when the
        caller has one open): a restore happens only while no process has the store open."""
        if not self._restored_read:
            if tx is None:
                with self._tx(write=False) as own:
                    row = own.one("last_restore", {})
            else:
                row = tx.one("last_restore", {})
            at = None if row is None else row["restored_at"]
            self._restored_at = None if at is None else int(at)
            self._restored_read = True
        return self._restored_at
