"""The inbox: deliveries in, stored once under their source's key, and what a reader sees of
them (events by id, key or inbox; which inboxes have work; an agent's saved session)."""

from __future__ import annotations

import json
from typing import Any, Literal

from wakeful.core import metrics, tracing
from wakeful.core.errors import InvalidInput, SessionUnusable
from wakeful.core.events import awaited
from wakeful.core.records import Ingested, ReadyList, StoredEvent
from wakeful.core.store.base import StoreBase
from wakeful.core.store.codec import event_body, event_record

EventStatus = Literal["open", "dead"] | None
_EVENTS = {None: "inbox_events", "open": "inbox_open_events", "dead": "inbox_dead_events"}


class Inbox(StoreBase):
    def ingest(self, inbox: str, source: str, source_id: str, payload: Any, now: int) -> Ingested:
        """Store one delivery, once: the pair (source, source_id) is unique, so a repeat is a
        no-op reported as a duplicate. Malformed input raises InvalidInput and stores nothing."""
        try:
            body = event_body(inbox, source, source_id, payload)
        except InvalidInput:
            metrics.count_ingest(metrics.source_label(source), "rejected")
            raise
        waiting = now if awaited(source, payload) else None
        trace = tracing.current_context()  # the request's span: the run joins its trace
        event_id = self.db.store_event((inbox, source, source_id, body, now, waiting, trace))
        metrics.count_ingest(source, "duplicate" if event_id is None else "stored")
        if tracing.ON:
            said = "duplicate" if event_id is None else "new"
            tracing.note({"wakeful.inbox": inbox, "wakeful.stored": said})
        return Ingested(stored=event_id is not None, event_id=event_id)

    def event(self, event_id: int) -> StoredEvent | None:
        with self._tx(write=False) as tx:
            row = tx.one("get_event", {"id": event_id})
        return None if row is None else event_record(row)

    def event_by_key(self, source: str, source_id: str) -> StoredEvent | None:
        with self._tx(write=False) as tx:
            row = tx.one("get_event_by_key", {"source": source, "source_id": source_id})
        return None if row is None else event_record(row)

    def events(self, inbox: str, status: EventStatus = None) -> list[StoredEvent]:
        """Events of one inbox, oldest first: every one (None), the `open` ones (pending or
        running: what a worker still has to do) or the `dead` ones (set aside after their
        attempts ran out)."""
        with self._tx(write=False) as tx:
            return [event_record(r) for r in tx.all(_EVENTS[status], {"inbox": inbox})]

    def waiting_after(self, inbox: str, after: int, limit: int = 20) -> list[StoredEvent]:
        """The inbox's events stored after event `after` that wait to be claimed, oldest
        first: a run that answers the newest words asks this at each step boundary (its
        interrupt flag, readable from any host)."""
        with self._tx(write=False) as tx:
            rows = tx.all("waiting_after", {"inbox": inbox, "after": after, "limit": limit})
        return [event_record(r) for r in rows]

    def source_counts(self, inbox: str, since: int) -> dict[str, int]:
        """How many events of one inbox arrived at or after `since`, by source: a digest
        counts webhook deliveries this way without reading their payloads."""
        with self._tx(write=False) as tx:
            rows = tx.all("inbox_source_counts", {"inbox": inbox, "since": since})
        return {str(r["source"]): int(r["n"]) for r in rows}

    def ready_list(self, now: int, limit: int = 100) -> ReadyList:
        """Inboxes with work a worker could claim now (pending events past their backoff, or
        events left running under a lease that has expired), each with its oldest claimable
        event id, and the newest event id stored when the list was read: a worker that sees a
        list cut at `limit` can tell later which inboxes were already stored (and waiting past
        the cut) at that look."""
        with self._tx(write=False) as tx:
            rows = tx.all("ready_inboxes", {"now": now, "limit": limit})
        return ReadyList(
            [(str(r["inbox"]), int(r["first"])) for r in rows],
            int(rows[0]["top"] or 0) if rows else 0,
        )

    def session(self, inbox: str) -> Any:
        """The agent's saved state for the inbox, or None (written by a run's fenced finish).
        Raises SessionUnusable when the stored text is not JSON."""
        with self._tx(write=False) as tx:
            row = tx.one("get_session", {"inbox": inbox})
        if row is None:
            return None
        try:
            return json.loads(row["state"])
        except ValueError as exc:
            raise SessionUnusable(f"the saved session is not valid JSON: {exc}") from exc
