"""The outbox: what the agent wants said, held per destination by the gap, claimed in batches as
`sending` under a dispatch id before any network call, and marked sent, deferred or parked."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Sequence

from wakeful.core import metrics, tracing
from wakeful.core.effects import Post
from wakeful.core.inbox_id import InboxId
from wakeful.core.records import OutboxRow
from wakeful.core.rules.outbox import Batch, Part, plan_parts, ready
from wakeful.core.store import ops, threads
from wakeful.core.store.base import StoreBase
from wakeful.core.store.codec import Params, message_params, outbox_record
from wakeful.core.store.sql import Row, Tx

BATCH_ROW_CAP = 200
"""Rows one destination's batch takes at most; the rest go in the next batch."""


def queue(tx: Tx, rows: Iterable[Params], now: int) -> None:
    """Insert prepared messages (from `message_params`) as pending outbox rows."""
    for params in rows:
        tx.run("insert_outbox", {**params, "now": now})


def _traces(rows: Sequence[Row]) -> dict[int, str]:
    """The stored traces of `rows`, by id; none while this process is not tracing."""
    if not tracing.ON:
        return {}
    return {int(r["id"]): str(r["trace"]) for r in rows if r["trace"]}


def answered(tx: Tx, keys: Sequence[str], now: int) -> None:
    """The first post back to a person who waits on one of these events (by their answer
    keys, `source:source_id`): their wait ends now (`wakeful_unanswered_seconds`)."""
    waited: list[int] = []
    for key in keys:
        source, _, source_id = key.partition(":")
        row = tx.one("end_wait", {"source": source, "source_id": source_id})
        if row is not None:
            waited.append(max(0, now - int(row["created_at"])))
    if waited:
        tx.after_commit(lambda: metrics.observe_unanswered(waited))


class Outbox(StoreBase):
    def post(self, inbox: str, messages: Sequence[Post], now: int) -> None:
        """Queue messages outside a run (a click's ephemeral reply, an operator notice); each
        checked against the store's kinds first (InvalidInput: nothing queued)."""
        for m in messages:
            self.kinds.check(m)
        prepared = [message_params(inbox, m) for m in messages]
        with self._tx(urgent=True) as tx:
            queue(tx, prepared, now)

    def claim_batches(
        self, now: int, limit: int = 100, busy: Collection[tuple[str, str]] = ()
    ) -> list[Batch]:
        """Claim what may be sent now, one batch per destination, rows marked `sending` until
        `now + send_timeout` (the batch's `until`, which its sender renews part by part).

        A batch left `sending` past its deadline (a crashed or stalled dispatcher, or a
        transient failure whose wait is over) is handed out again with the same dispatch id and
        `retry` set, before anything newer for that destination, so order holds and the sender
        can look first. Destinations in `busy` (a batch of the caller's still on its way) and
        those with a batch in flight anywhere are passed over.
        """
        # Most wake-ups find nothing to send (rows held by the gap, or already in flight): look
        # first without the write lock, which the HTTP front's inserts are waiting for.
        with self._tx(write=False) as tx:
            dests = self._open(tx, now, limit, busy)
            if not any(self._claimable(tx, channel, thread, now) for channel, thread in dests):
                return []
        batches: list[Batch] = []
        with self._tx() as tx:
            for channel, thread in self._open(tx, now, limit, busy):
                lock = tx.one("lock_destination", {"channel": channel, "thread_ts": thread})
                if lock is None or not lock["ok"]:
                    continue  # another dispatcher is on this destination
                pick = self._claimable(tx, channel, thread, now)
                if pick is None:
                    continue
                rows, retry, traces = pick
                until = now + self.settings.send_timeout
                if retry:
                    dispatch_id = rows[0].dispatch_id
                    assert dispatch_id is not None
                    params = {"dispatch_id": dispatch_id, "now": now, "until": until}
                    if tx.run("reclaim_batch", params) == 0:
                        continue
                else:
                    dispatch_id = uuid.uuid4().hex
                    for r in rows:
                        tx.run(
                            "claim_row", {"id": r.id, "dispatch_id": dispatch_id, "until": until}
                        )
                parts = plan_parts(dispatch_id, rows, retry, kinds=self.kinds)
                if traces:
                    made = Batch(dispatch_id, channel, thread, parts, retry, until, traces)
                    batches.append(made)
                else:
                    batches.append(Batch(dispatch_id, channel, thread, parts, retry, until))
        return batches

    @staticmethod
    def _open(
        tx: Tx, now: int, limit: int, busy: Collection[tuple[str, str]]
    ) -> list[tuple[str, str]]:
        """Destinations that may have something to claim, oldest first."""
        found = tx.all("open_destinations", {"limit": limit + len(busy), "now": now})
        dests = [(str(d["channel"]), str(d["thread_ts"])) for d in found]
        return [d for d in dests if d not in busy][:limit]

    def renew_batch(self, dispatch_id: str, held: int, until: int) -> bool:
        """Move a claimed batch's deadline from `held` (as its sender last wrote it) to `until`:
        False when the deadline is no longer `held`, because another dispatcher took the batch
        over (or it is done). The sender's fence: it renews before each part, and stops when
        this fails. `until = now` releases the batch to whoever claims next."""
        params = {"dispatch_id": dispatch_id, "held": held, "until": until}
        with self._tx() as tx:
            return tx.run("renew_batch", params) > 0

    def _claimable(
        self, tx: Tx, channel: str, thread: str, now: int
    ) -> tuple[list[OutboxRow], bool, dict[int, str]] | None:
        """What one destination would send now, whether it is a retry, and the stored trace of
        each of its rows that has one; None if nothing.

        A batch still `sending` goes first, whole, once its deadline has passed (in flight or
        waiting out a retry-after until then); otherwise the pending rows, if the gap allows."""
        raw = tx.all("open_rows", {"channel": channel, "thread_ts": thread, "limit": BATCH_ROW_CAP})
        sending = [r for r in raw if r["status"] == "sending"]
        if sending:
            first = sending[0]
            if int(first["in_flight_until"]) > now:
                return None
            same = [r for r in sending if r["dispatch_id"] == first["dispatch_id"]]
            return [outbox_record(r) for r in same], True, _traces(same)
        rows = [outbox_record(r) for r in raw]
        last = tx.one("get_destination", {"channel": channel, "thread_ts": thread})
        last_sent = None if last is None else int(last["last_sent_at"])
        if not ready(rows, last_sent, now, self.settings.outbox_gap, kinds=self.kinds):
            return None
        return rows, False, _traces(raw)

    def mark_sent(self, part: Part, ts: str | None, now: int) -> None:
        """Record a delivered part (only its final piece marks its rows sent); posts containing
        normal rows restart the destination's gap."""
        if not part.final:
            return
        with self._tx() as tx:
            for row_id in part.row_ids:
                tx.run(
                    "mark_row_sent",
                    {"id": row_id, "dispatch_id": part.dispatch_id, "ts": ts, "now": now},
                )
            if self.kinds.paced(part.kind) and ts and not InboxId(part.inbox).is_ops:
                # A reply in its thread, or a top-level post (a reminder in a channel):
                # replies under either reach the agent without a new mention (an operator's
                # under an ops report are not for the agent).
                threads.remember(tx, part.channel, part.thread_ts or ts, "posted", now)
            if self.kinds.paced(part.kind) and part.normal:
                tx.run(
                    "touch_destination",
                    {"channel": part.channel, "thread_ts": part.thread_ts, "now": now},
                )
            if part.kind == "post" and part.ref and ts:
                tx.run("set_prompt", {"id": part.ref, "channel": part.channel, "ts": ts})
            if part.kind != "status":
                answered(tx, part.answers, now)

    def defer_batch(
        self,
        dispatch_id: str,
        until: int,
        error: str,
        now: int,
        *,
        held: int,
        paused: str | None = None,
    ) -> None:
        """A transient failure: keep the batch `sending` and retry it whole after `until`.
        Fenced like `renew_batch`: a sender that lost the batch cannot move its deadline.
        `paused`: the failure paused sends (the dispatcher says so once per pause), a line for
        the operators' channel written in the same transaction."""
        params = {"dispatch_id": dispatch_id, "until": until, "error": error[:2000], "now": now}
        with self._tx() as tx:
            tx.run("defer_batch", {**params, "held": held})
            if paused is not None:
                ops.queue_lines(tx, self.settings, [paused], now)

    def fail_part(self, part: Part, error: str, now: int, notice: Post | None = None) -> bool:
        """A permanent failure: park the part's rows as `failed`, visible and requeueable.

        `notice` (telling the person what happened) is queued in the same transaction, and only
        when this call parked rows: a dispatcher that lost the batch, or a second attempt at
        rows already parked, writes none, so a refusal is told once. The operators' channel is
        told alike, unless the part was its own report (a refused ops post is not reported
        again: no loop). False: nothing parked."""
        if notice is not None:
            self.kinds.check(notice)
        with self._tx() as tx:
            parked = 0
            for row_id in part.row_ids:
                parked += tx.run(
                    "fail_row",
                    {
                        "id": row_id,
                        "dispatch_id": part.dispatch_id,
                        "error": error[:2000],
                        "now": now,
                    },
                )
            if parked and notice is not None:
                queue(tx, [message_params(part.inbox, notice)], now)
            if parked and not InboxId(part.inbox).is_ops:
                line = ops.parked(part.inbox, part.kind, part.channel, part.row_ids, error)
                ops.queue_lines(tx, self.settings, [line], now)
        return parked > 0

    def outbox(self, status: str | None = None, inbox: str | None = None) -> list[OutboxRow]:
        """Outbox rows of one inbox, or of every inbox filtered by status, oldest first."""
        with self._tx(write=False) as tx:
            if inbox is not None:
                rows = tx.all("inbox_outbox", {"inbox": inbox})
                mine = map(outbox_record, rows)
                return [o for o in mine if status is None or o.status == status]
            return [outbox_record(r) for r in tx.all("all_outbox", {"status": status})]
