"""The store contract: every operation the engine owes, written once over named SQL.

A backend (SQLite, PostgreSQL) supplies only a transaction (`_tx`) that opens a connection,
begins, commits or rolls back, translates driver errors into `StoreError`s, and runs the
statements of its own `.sql` file. The rules themselves live here and in the pure modules
(lease, approvals, outbox, schedule), so both backends obey exactly the same ones.

Every method takes `now` in integer seconds: no backend reads a clock of its own.
"""

from __future__ import annotations

import json
import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from .. import approvals as approval_rules
from .. import lease as lease_rules
from .. import outbox as outbox_rules
from .. import schedule
from ..effects import ApprovalRequest, Effects, Message, Timer, check_json
from ..errors import InvalidInput, LeaseLost
from ..records import (
    AnswerOutcome,
    ApprovalState,
    Claim,
    Event,
    Ingested,
    Lease,
    OutboxRow,
    RunRecord,
    TimerFired,
    TimerState,
)
from ..settings import MAX_PAYLOAD_BYTES, Settings
from .sql import Row, Tx

TOO_MANY_ATTEMPTS = "too many attempts"
DUE_PAGE = 500
"""Timers one scheduler transaction fires at most; the scheduler pages through the rest."""
BATCH_ROW_CAP = 200


class _Fenced(Exception):
    """A claimed event is no longer running under the claim's generation: undo the finish."""


@dataclass(frozen=True, slots=True)
class DeadLetters:
    events: list[Event]
    outbox: list[OutboxRow]


class Store(ABC):
    """The durable state of every inbox, and the only way the engine touches it."""

    settings: Settings

    # -- backend -----------------------------------------------------------------------------

    @abstractmethod
    def _tx(self, write: bool = True, urgent: bool = False) -> AbstractContextManager[Tx]:
        """A transaction; a write one takes the write lock up front (BEGIN IMMEDIATE).

        `urgent` marks a write someone is waiting on (an HTTP answer to Slack): a backend with
        an in-process write queue lets it go before background writers."""

    @abstractmethod
    def close(self) -> None:
        """Release connections. The store is unusable afterwards."""

    @abstractmethod
    def schema_version(self) -> int:
        """The highest migration applied."""

    def healthy(self) -> bool:
        """True when the store answers a trivial query; for /healthz."""
        try:
            with self._tx(write=False) as tx:
                return tx.one("ping") is not None
        except Exception:
            return False

    # -- inbox -------------------------------------------------------------------------------

    def ingest(self, inbox: str, source: str, source_id: str, payload: Any, now: int) -> Ingested:
        """Store one delivery, once: the pair (source, source_id) is unique, so a repeat is a
        no-op reported as a duplicate. Malformed input raises InvalidInput and stores nothing."""
        body = _validate_event(inbox, source, source_id, payload)
        event_id = self._store_event(inbox, source, source_id, body, now)
        return Ingested(stored=event_id is not None, event_id=event_id)

    def _store_event(
        self, inbox: str, source: str, source_id: str, body: str, now: int
    ) -> int | None:
        """One committed insert; a backend may batch concurrent callers (group commit)."""
        with self._tx() as tx:
            return self._insert_event(tx, inbox, source, source_id, body, now)

    notifies = False
    """True for a backend that can wake workers in other processes when an event is stored."""

    def _insert_event(
        self, tx: Tx, inbox: str, source: str, source_id: str, body: str, now: int
    ) -> int | None:
        """The one door into the inbox: insert unless the key exists, and wake the workers."""
        params = {"inbox": inbox, "source": source, "source_id": source_id, "payload": body}
        row = tx.one("insert_event", {**params, "now": now})
        if row is None:
            return None
        if self.notifies:
            tx.one("notify_work", {"inbox": inbox})
        return int(row["id"])

    def event(self, event_id: int) -> Event | None:
        with self._tx(write=False) as tx:
            row = tx.one("get_event", {"id": event_id})
        return None if row is None else _event(row)

    def event_by_key(self, source: str, source_id: str) -> Event | None:
        with self._tx(write=False) as tx:
            row = tx.one("get_event_by_key", {"source": source, "source_id": source_id})
        return None if row is None else _event(row)

    def events(self, inbox: str) -> list[Event]:
        """Every event of one inbox in arrival order (for tests, status and digests)."""
        with self._tx(write=False) as tx:
            return [_event(r) for r in tx.all("inbox_events", {"inbox": inbox})]

    def open_events(self, inbox: str) -> list[Event]:
        """Pending and running events of one inbox, oldest first."""
        with self._tx(write=False) as tx:
            return [_event(r) for r in tx.all("open_events", {"inbox": inbox})]

    def dead_events(self, inbox: str) -> list[Event]:
        """Dead events of one inbox, oldest first (for status and digests)."""
        with self._tx(write=False) as tx:
            return [_event(r) for r in tx.all("inbox_dead_events", {"inbox": inbox})]

    def count_events(self, status: str | None = None) -> int:
        with self._tx(write=False) as tx:
            row = tx.one("count_events", {"status": status})
        return int(row["n"]) if row else 0

    def ready_inboxes(self, now: int, limit: int = 100) -> list[str]:
        """Inboxes with work a worker could claim now: pending events past their backoff, or
        events left running under a lease that has expired."""
        with self._tx(write=False) as tx:
            return [str(r["inbox"]) for r in tx.all("ready_inboxes", {"now": now, "limit": limit})]

    # -- lease -------------------------------------------------------------------------------

    def acquire(self, inbox: str, holder: str, now: int) -> int | None:
        """Take or renew the inbox's lease; return its generation, or None if held by another."""
        _require(inbox=inbox, holder=holder)
        with self._tx() as tx:
            granted = self._acquire(tx, inbox, holder, now)
            return None if granted is None else granted[0]

    def _acquire(self, tx: Tx, inbox: str, holder: str, now: int) -> tuple[int, int] | None:
        """The generation granted and the lease sequence number this grant took, or None."""
        current = _lease(tx.one("get_lease_for_acquire", {"inbox": inbox}))
        if current is None and tx.one("lease_row_exists", {"inbox": inbox}) is not None:
            return None  # another transaction is working on this lease right now
        granted = lease_rules.decide(current, inbox, holder, now, self.settings.lease_ttl)
        if granted is None:
            return None
        params = {
            "inbox": inbox,
            "holder": holder,
            "gen": granted.gen,
            "expires_at": granted.expires_at,
        }
        row = tx.one("create_lease" if current is None else "take_lease", params)
        if row is None:
            return None  # another holder created the row first (PostgreSQL race)
        return granted.gen, int(row["seq"])

    def renew(self, inbox: str, holder: str, gen: int, now: int) -> bool:
        """Heartbeat: extend the lease only if still held in this generation (never revive)."""
        with self._tx() as tx:
            current = _lease(tx.one("get_lease_for_update", {"inbox": inbox}))
            if not lease_rules.holds(current, holder, gen, now):
                return False
            tx.run(
                "update_lease",
                {
                    "inbox": inbox,
                    "holder": holder,
                    "gen": gen,
                    "expires_at": now + self.settings.lease_ttl,
                },
            )
            return True

    def release(self, inbox: str, holder: str, gen: int, now: int) -> bool:
        """Let the lease lapse now, keeping its generation so the next holder gets gen + 1."""
        with self._tx() as tx:
            return self._release(tx, inbox, holder, gen, now)

    def _release(self, tx: Tx, inbox: str, holder: str, gen: int, now: int) -> bool:
        current = _lease(tx.one("get_lease_for_update", {"inbox": inbox}))
        if not lease_rules.holds(current, holder, gen, now):
            return False
        self._lapse(tx, inbox, holder, gen, now)
        return True

    def lease(self, inbox: str) -> Lease | None:
        with self._tx(write=False) as tx:
            return _lease(tx.one("get_lease", {"inbox": inbox}))

    # -- claiming ----------------------------------------------------------------------------

    def claim(self, inbox: str, holder: str, gen: int, now: int) -> Claim:
        """Claim the next batch of the inbox; raises LeaseLost unless `holder` holds it in `gen`.

        In one transaction: rows left running by an older generation go back to pending; rows
        that reached max_attempts become dead; a retried event is claimed alone; otherwise all
        pending events in arrival order up to the cap. Attempts are counted here, and the
        backoff a failure of this attempt must wait is fixed here too.
        """
        with self._tx() as tx:
            current = _lease(tx.one("get_lease_for_update", {"inbox": inbox}))
            if not lease_rules.holds(current, holder, gen, now):
                raise LeaseLost(f"{holder} does not hold {inbox} in generation {gen}")
            return self._claim(tx, inbox, holder, gen, now)

    def acquire_and_claim(
        self, inbox: str, holder: str, now: int, release_if_empty: bool = False
    ) -> Claim | None:
        """`acquire` then `claim` in one transaction: the common start of a run, one commit.

        With `release_if_empty`, a claim that finds nothing lets the lease lapse at once.
        """
        with self._tx() as tx:
            granted = self._acquire(tx, inbox, holder, now)
            if granted is None:
                return None
            gen, seq = granted
            claim = self._claim(tx, inbox, holder, gen, now, seq=seq)
            if release_if_empty and not claim.events:
                self._lapse(tx, inbox, holder, gen, now)
            return claim

    def _claim(
        self,
        tx: Tx,
        inbox: str,
        holder: str,
        gen: int,
        now: int,
        seq: int | None = None,
        reset: bool = True,
    ) -> Claim:
        """`seq` reuses a lease sequence number this transaction already took; `reset=False`
        skips the stale-row reset when this transaction has just finished under the lease."""
        s = self.settings
        if reset:
            tx.run("reset_stale", {"inbox": inbox, "gen": gen, "now": now})
        tx.run(
            "bury_exhausted",
            {
                "inbox": inbox,
                "max_attempts": s.max_attempts,
                "error": TOO_MANY_ATTEMPTS,
                "now": now,
            },
        )
        rows = tx.all("next_claimable", {"inbox": inbox, "now": now, "limit": s.claim_cap})
        if rows and int(rows[0]["attempts"]) > 0:
            rows = rows[:1]  # a retried event is claimed alone
        events: list[Event] = []
        for r in rows:
            attempts = int(r["attempts"]) + 1
            tx.run(
                "mark_running",
                {
                    "id": r["id"],
                    "gen": gen,
                    "attempts": attempts,
                    "not_before": now + s.backoff(attempts),
                    "now": now,
                },
            )
            events.append(_event(r, status="running", attempts=attempts))
        if not events:
            seq = 0
        elif seq is None:
            row = tx.one("next_lease_seq", {"inbox": inbox})
            seq = int(row["seq"]) if row else 0
        return Claim(
            inbox=inbox, holder=holder, gen=gen, events=tuple(events), seq=seq, claimed_at=now
        )

    # -- finishing ---------------------------------------------------------------------------

    def finish(self, claim: Claim, effects: Effects, now: int, release: bool = False) -> bool:
        """Complete a claim and write all of the run's effects, fenced, in one transaction.

        Succeeds only while the claimer holds the lease in the claim's generation and every
        claimed event is still running under it. Otherwise nothing changes and False is
        returned. Events in `effects.failed` go back to pending with their error (their backoff
        was fixed at claim time, or now if later).
        """
        prepared = _prepare_effects(claim.inbox, effects, now)
        try:
            with self._tx() as tx:
                return self._finish(tx, claim, effects, prepared, now, release) is not None
        except _Fenced:
            return False  # rolled back: nothing changed

    def finish_and_claim(
        self, claim: Claim, effects: Effects, now: int
    ) -> tuple[bool, Claim | None]:
        """`finish`, then claim the inbox's next batch under the same lease, in one commit.

        Returns (finished, next claim). When nothing is left the lease is released in the same
        transaction and the next claim is None: a worker's whole cycle is two commits.
        """
        prepared = _prepare_effects(claim.inbox, effects, now)
        try:
            with self._tx() as tx:
                finish_seq = self._finish(tx, claim, effects, prepared, now, release=False)
                if finish_seq is None:
                    return False, None
                # Same transaction, same lease: nothing can have gone stale since our claim,
                # and the finish's sequence number orders the next claim too.
                following = self._claim(
                    tx,
                    claim.inbox,
                    claim.holder,
                    claim.gen,
                    now,
                    seq=finish_seq or None,
                    reset=False,
                )
                if following.events:
                    return True, following
                self._lapse(tx, claim.inbox, claim.holder, claim.gen, now)
                return True, None
        except _Fenced:
            return False, None

    def _lapse(self, tx: Tx, inbox: str, holder: str, gen: int, now: int) -> None:
        tx.run("update_lease", {"inbox": inbox, "holder": holder, "gen": gen, "expires_at": now})

    def _finish(
        self,
        tx: Tx,
        claim: Claim,
        effects: Effects,
        prepared: _Prepared,
        now: int,
        release: bool,
    ) -> int | None:
        """Write the finish; return the lease sequence number it took (0 for an empty claim),
        None when the lease is no longer held. Raises _Fenced, which rolls the transaction
        back, when a claimed event is no longer running under the claim's generation."""
        current = _lease(tx.one("get_lease_for_update", {"inbox": claim.inbox}))
        if not lease_rules.holds(current, claim.holder, claim.gen, now):
            return None
        ids = claim.ids
        for ev in claim.events:
            error = effects.failed.get(ev.id)
            if error is None:
                changed = tx.run("mark_done_fenced", {"id": ev.id, "gen": claim.gen, "now": now})
            else:
                changed = tx.run(
                    "mark_failed_fenced",
                    {
                        "id": ev.id,
                        "gen": claim.gen,
                        "error": str(error)[:2000],
                        "now": now,
                        "not_before": now + self.settings.backoff(ev.attempts),
                    },
                )
            if changed != 1:
                raise _Fenced(ev.id)
        self._write_effects(tx, claim.inbox, prepared, now)
        finish_seq = 0
        if ids:
            row = tx.one("next_lease_seq", {"inbox": claim.inbox})
            finish_seq = int(row["seq"]) if row else 0
            tx.run(
                "insert_run",
                {
                    "inbox": claim.inbox,
                    "holder": claim.holder,
                    "gen": claim.gen,
                    "claim_seq": claim.seq,
                    "finish_seq": finish_seq,
                    "events": check_json(ids, "events"),
                    "claimed_at": claim.claimed_at,
                    "now": now,
                },
            )
        if release:
            self._lapse(tx, claim.inbox, claim.holder, claim.gen, now)
        return finish_seq

    def _write_effects(self, tx: Tx, inbox: str, p: _Prepared, now: int) -> None:
        for params in p.messages:
            tx.run("insert_outbox", {**params, "now": now})
        if p.session is not None:
            tx.run("upsert_session", {"inbox": inbox, "state": p.session, "now": now})
        for name in p.cancel:
            if not name.startswith("approval:"):  # expiries are not the agent's to cancel
                tx.run("delete_timer", {"id": f"{inbox}/{name}"})
        for params in p.timers:
            tx.run("upsert_timer", {**params, "now": now})
        for req, params, prompt in p.approvals:
            # A retried run re-requests the same id: one approval, one prompt, one expiry.
            if tx.run("insert_approval", {**params, "now": now}):
                if prompt is not None:
                    tx.run("insert_outbox", {**prompt, "now": now})
                tx.run(
                    "upsert_timer",
                    {
                        "id": approval_rules.expiry_timer_id(inbox, req.id),
                        "inbox": inbox,
                        "kind": "once",
                        "action": "expire_approval",
                        "next_at": req.deadline,
                        "anchor": None,
                        "every_seconds": None,
                        "daily_at": None,
                        "tz": "UTC",
                        "policy": "coalesce",
                        "payload": check_json({"approval": req.id}, "payload"),
                        "now": now,
                    },
                )

    def runs(self, inbox: str | None = None) -> list[RunRecord]:
        """The run log: every finished run, ordered by its claim within each inbox."""
        with self._tx(write=False) as tx:
            rows = tx.all("all_runs") if inbox is None else tx.all("inbox_runs", {"inbox": inbox})
        return [
            RunRecord(
                inbox=str(r["inbox"]),
                holder=str(r["holder"]),
                gen=int(r["gen"]),
                claim_seq=int(r["claim_seq"]),
                finish_seq=int(r["finish_seq"]),
                events=tuple(json.loads(r["events"])),
                claimed_at=int(r["claimed_at"]),
                finished_at=int(r["finished_at"]),
            )
            for r in rows
        ]

    # -- sessions ----------------------------------------------------------------------------

    def session(self, inbox: str) -> Any:
        """The agent's saved state for the inbox, or None."""
        with self._tx(write=False) as tx:
            row = tx.one("get_session", {"inbox": inbox})
        return None if row is None else json.loads(row["state"])

    # -- timers ------------------------------------------------------------------------------

    def add_timer(self, inbox: str, timer: Timer, now: int) -> str:
        """Register or replace a timer outside a run (a run adds them through finish)."""
        _require(inbox=inbox)
        params = _timer_params(inbox, timer, now)
        with self._tx() as tx:
            tx.run("upsert_timer", {**params, "now": now})
        return str(params["id"])

    def cancel_timer(self, inbox: str, name: str) -> bool:
        with self._tx() as tx:
            return tx.run("delete_timer", {"id": f"{inbox}/{name}"}) > 0

    def timers(self, inbox: str) -> list[TimerState]:
        with self._tx(write=False) as tx:
            return [_timer_state(r) for r in tx.all("inbox_timers", {"inbox": inbox})]

    def next_timer_at(self) -> int | None:
        """When the earliest timer is due, so a scheduler can sleep until then."""
        with self._tx(write=False) as tx:
            row = tx.one("next_timer_at")
        return None if row is None or row["next_at"] is None else int(row["next_at"])

    def fire_due_timers(self, now: int, limit: int = DUE_PAGE) -> TimerFired:
        """Turn due timers into inbox events and advance each timer in the same transaction.

        Each occurrence's event key is `<timer id>@<scheduled time>`, so a replayed occurrence
        stays one event. Missed occurrences: `coalesce` stores one event for the latest (its
        payload says scheduled_for, late_by and how many were skipped); `catch_up` stores one per
        occurrence (at most settings.max_catch_up per pass, oldest dropped first). An approval's
        expiry timer stores the `expired` answer instead.
        """
        due = fired = expired = 0
        earliest = self.next_timer_at()  # most passes find nothing: no write lock for those
        if earliest is None or earliest > now:
            return TimerFired(0, 0, 0)
        with self._tx() as tx:
            for row in tx.all("due_timers", {"now": now, "limit": limit}):
                due += 1
                t = dict(row)
                if t["action"] == "expire_approval":
                    state = _approval(
                        tx.one(
                            "get_approval_for_update", {"id": json.loads(t["payload"])["approval"]}
                        )
                    )
                    if state is not None and state.answer is None:
                        expired += self._store_answer(tx, state, "expired", None, now)
                    tx.run("delete_timer", {"id": t["id"]})
                    continue
                shown, count, following = schedule.missed(
                    t["kind"],
                    t["next_at"],
                    now,
                    t["anchor"],
                    t["every_seconds"],
                    t["daily_at"],
                    t["tz"],
                    self.settings.max_catch_up if t["policy"] == "catch_up" else 1,
                )
                payload = json.loads(t["payload"])
                for at in shown:
                    body = {
                        "timer": t["id"].split("/", 1)[-1],
                        "timer_id": t["id"],
                        "scheduled_for": at,
                        "late_by": now - at,
                        "skipped": count - 1 if t["policy"] == "coalesce" else 0,
                        "payload": payload,
                    }
                    key = f"{t['id']}@{at}"
                    body_json = check_json(body, "timer event")
                    if self._insert_event(tx, t["inbox"], "timer", key, body_json, now):
                        fired += 1
                if following is None:
                    tx.run("delete_timer", {"id": t["id"]})
                else:
                    tx.run("advance_timer", {"id": t["id"], "next_at": following})
        return TimerFired(due=due, fired=fired, expired_approvals=expired)

    # -- approvals ---------------------------------------------------------------------------

    def answer(self, request_id: str, answer: str, user: str, now: int) -> AnswerOutcome:
        """Answer an approval; return the outcome that stands (see approvals.decide).

        The answer is stored as an inbox event under (`approval`, request id), the same key the
        expiry uses, so the database holds one answer whatever races with it.
        """
        return self.answer_detail(request_id, answer, user, now)[0]

    def answer_detail(
        self, request_id: str, answer: str, user: str, now: int
    ) -> tuple[AnswerOutcome, bool]:
        """`answer`, plus whether this call is the one that stored the outcome (False for a
        second tap, a forbidden user or an unknown request)."""
        if answer not in ("yes", "no"):
            raise InvalidInput(f"answer must be 'yes' or 'no', got {answer!r}")
        if not isinstance(request_id, str) or not request_id or len(request_id) > 255:
            raise InvalidInput("an answer needs a request id of 1 to 255 characters")
        if not isinstance(user, str) or not user:
            raise InvalidInput("an answer needs a user")
        try:
            request_id.encode("utf-8")
            user.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidInput("request id or user is not valid Unicode") from exc
        with self._tx(urgent=True) as tx:
            state = _approval(tx.one("get_approval_for_update", {"id": request_id}))
            outcome, action = approval_rules.decide(state, answer, user, now)
            if action != "store" or state is None:
                return outcome, False
            if self._store_answer(tx, state, outcome, user, now):
                return outcome, True
            stored = _approval(tx.one("get_approval_for_update", {"id": request_id}))
            assert stored is not None and stored.answer is not None
            return stored.answer, False

    def _store_answer(
        self, tx: Tx, state: ApprovalState, outcome: str, user: str | None, now: int
    ) -> int:
        payload = {
            "approval": state.id,
            "answer": outcome,
            "user": user,
            "tool": state.tool,
            "args": state.args,
            "answered_at": now,
        }
        body = check_json(payload, "answer")
        if self._insert_event(tx, state.inbox, "approval", state.id, body, now) is None:
            return 0
        tx.run("set_answer", {"id": state.id, "answer": outcome, "user": user, "now": now})
        return 1

    def approval(self, request_id: str) -> ApprovalState | None:
        with self._tx(write=False) as tx:
            return _approval(tx.one("get_approval", {"id": request_id}))

    def approvals(self, inbox: str) -> list[ApprovalState]:
        with self._tx(write=False) as tx:
            return [
                a
                for r in tx.all("inbox_approvals", {"inbox": inbox})
                if (a := _approval(r)) is not None
            ]

    # -- outbox ------------------------------------------------------------------------------

    def post(self, inbox: str, messages: Sequence[Message], now: int) -> None:
        """Queue messages outside a run (a click's ephemeral reply, an operator notice)."""
        prepared = [_message_params(inbox, m) for m in messages]
        with self._tx(urgent=True) as tx:
            for params in prepared:
                tx.run("insert_outbox", {**params, "now": now})

    def claim_batches(self, now: int, limit: int = 100) -> list[outbox_rules.Batch]:
        """Claim what may be sent now, one batch per destination, rows marked `sending`.

        A batch left `sending` past its deadline (a crashed dispatcher, or a transient failure
        whose wait is over) is handed out again with the same dispatch id and `retry` set, before
        anything newer for that destination, so order holds and the sender can look first.
        """
        # Most wake-ups find nothing to send (rows held by the gap, or already in flight): look
        # first without the write lock, which the HTTP front's inserts are waiting for.
        with self._tx(write=False) as tx:
            dests = tx.all("open_destinations", {"limit": limit})
            if not any(self._claimable(tx, d["channel"], d["thread_ts"], now) for d in dests):
                return []
        batches: list[outbox_rules.Batch] = []
        with self._tx() as tx:
            for dest in tx.all("open_destinations", {"limit": limit}):
                channel, thread = str(dest["channel"]), str(dest["thread_ts"])
                lock = tx.one("lock_destination", {"channel": channel, "thread_ts": thread})
                if lock is None or not lock["ok"]:
                    continue  # another dispatcher is on this destination
                pick = self._claimable(tx, channel, thread, now)
                if pick is None:
                    continue
                rows, retry = pick
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
                parts = outbox_rules.plan_parts(dispatch_id, rows, retry)
                batches.append(outbox_rules.Batch(dispatch_id, channel, thread, parts, retry))
        return batches

    def _claimable(
        self, tx: Tx, channel: str, thread: str, now: int
    ) -> tuple[list[OutboxRow], bool] | None:
        """What one destination would send now, and whether it is a retry; None if nothing.

        A batch still `sending` goes first, whole, once its deadline has passed (in flight or
        waiting out a retry-after until then); otherwise the pending rows, if the gap allows."""
        raw = tx.all("open_rows", {"channel": channel, "thread_ts": thread, "limit": BATCH_ROW_CAP})
        sending = [r for r in raw if r["status"] == "sending"]
        if sending:
            first = sending[0]
            if int(first["in_flight_until"]) > now:
                return None
            return [_outbox(r) for r in sending if r["dispatch_id"] == first["dispatch_id"]], True
        rows = [_outbox(r) for r in raw]
        last = tx.one("get_destination", {"channel": channel, "thread_ts": thread})
        gap = self.settings.outbox_gap
        if not outbox_rules.ready(
            rows, None if last is None else int(last["last_sent_at"]), now, gap
        ):
            return None
        return rows, False

    def mark_sent(self, part: outbox_rules.Part, ts: str | None, now: int) -> None:
        """Record a delivered part; posts containing normal rows restart the destination's gap."""
        if not part.final:
            return
        with self._tx() as tx:
            for row_id in part.row_ids:
                tx.run(
                    "mark_row_sent",
                    {"id": row_id, "dispatch_id": part.dispatch_id, "ts": ts, "now": now},
                )
            if part.kind == "post" and part.normal:
                tx.run(
                    "touch_destination",
                    {"channel": part.channel, "thread_ts": part.thread_ts, "now": now},
                )
            if part.kind == "post" and part.ref and ts:
                tx.run("set_prompt", {"id": part.ref, "channel": part.channel, "ts": ts})

    def defer_batch(self, dispatch_id: str, until: int, error: str, now: int) -> None:
        """A transient failure: keep the batch `sending` and retry it whole after `until`."""
        with self._tx() as tx:
            tx.run(
                "defer_batch",
                {"dispatch_id": dispatch_id, "until": until, "error": error[:2000], "now": now},
            )

    def fail_part(self, part: outbox_rules.Part, error: str, now: int) -> None:
        """A permanent failure: park the part's rows as `failed`, visible and requeueable."""
        with self._tx() as tx:
            for row_id in part.row_ids:
                tx.run(
                    "fail_row",
                    {
                        "id": row_id,
                        "dispatch_id": part.dispatch_id,
                        "error": error[:2000],
                        "now": now,
                    },
                )

    def outbox(self, status: str | None = None, inbox: str | None = None) -> list[OutboxRow]:
        """Outbox rows of one inbox, or of every inbox filtered by status, oldest first."""
        with self._tx(write=False) as tx:
            if inbox is not None:
                rows = tx.all("inbox_outbox", {"inbox": inbox})
                return [o for o in map(_outbox, rows) if status is None or o.status == status]
            return [_outbox(r) for r in tx.all("all_outbox", {"status": status})]

    # -- dead letters ------------------------------------------------------------------------

    def dead_letters(self, limit: int = 100) -> DeadLetters:
        """Dead events and failed outbox rows with their errors: a quiet agent's first clue."""
        with self._tx(write=False) as tx:
            events = [_event(r) for r in tx.all("dead_events", {"limit": limit})]
            rows = [_outbox(r) for r in tx.all("failed_outbox", {"limit": limit})]
        return DeadLetters(events=events, outbox=rows)

    def requeue_event(self, event_id: int, now: int) -> bool:
        """Give a dead event a fresh start (attempts reset)."""
        with self._tx() as tx:
            return tx.run("requeue_event", {"id": event_id, "now": now}) > 0

    def requeue_outbox(self, row_id: int, now: int) -> bool:
        """Send a failed outbox row again (attempts reset)."""
        with self._tx() as tx:
            return tx.run("requeue_outbox", {"id": row_id, "now": now}) > 0

    # -- idempotent tools --------------------------------------------------------------------

    def record_tool_call(self, key: str, tool: str, args: Any, inbox: str, now: int) -> bool:
        """Record a side effect under an idempotency key; False if it was already recorded, in
        which case the tool must not act again."""
        _require(key=key, tool=tool)
        with self._tx() as tx:
            return (
                tx.run(
                    "insert_tool_call",
                    {
                        "key": key,
                        "tool": tool,
                        "inbox": inbox,
                        "args": check_json(args, "tool args"),
                        "now": now,
                    },
                )
                > 0
            )

    def tool_calls(self, tool: str | None = None, inbox: str | None = None) -> list[Row]:
        with self._tx(write=False) as tx:
            return [dict(r) for r in tx.all("list_tool_calls", {"tool": tool, "inbox": inbox})]


# -- helpers -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Prepared:
    messages: list[dict[str, Any]]
    session: str | None
    timers: list[dict[str, Any]]
    cancel: list[str]
    approvals: list[tuple[ApprovalRequest, dict[str, Any], dict[str, Any] | None]]


def _prepare_effects(inbox: str, effects: Effects, now: int) -> _Prepared:
    """Validate and serialise everything before the transaction opens, so it stays short and a
    malformed effect fails the run without touching the store."""
    messages = [_message_params(inbox, m) for m in effects.messages]
    approvals: list[tuple[ApprovalRequest, dict[str, Any], dict[str, Any] | None]] = []
    for req in effects.approvals:
        approvals.append(
            (
                req,
                {
                    "id": req.id,
                    "inbox": inbox,
                    "tool": req.tool,
                    "args": check_json(req.args, "args"),
                    "requester": req.requester,
                    "approvers": check_json(list(req.approvers), "approvers"),
                    "deadline": req.deadline,
                },
                None if req.prompt is None else _message_params(inbox, req.prompt, ref=req.id),
            )
        )
    return _Prepared(
        messages=messages,
        session=check_json(effects.session, "session") if effects.save_session else None,
        timers=[_timer_params(inbox, t, now) for t in effects.timers],
        cancel=list(effects.cancel_timers),
        approvals=approvals,
    )


def _message_params(inbox: str, m: Message, ref: str | None = None) -> dict[str, Any]:
    return {
        "inbox": inbox,
        "kind": m.kind,
        "channel": m.channel,
        "thread_ts": m.thread_ts or "",
        "text": m.text,
        "blocks": None if m.blocks is None else check_json(m.blocks, "blocks"),
        "priority": m.priority,
        "ref": m.ref or ref,
        "user_id": m.user,
    }


def _timer_params(inbox: str, t: Timer, now: int) -> dict[str, Any]:
    return {
        "id": f"{inbox}/{t.name}",
        "inbox": inbox,
        "kind": t.kind,
        "action": "event",
        "next_at": schedule.first_occurrence(t.kind, now, t.first_at, t.daily_at, t.tz),
        "anchor": t.first_at,
        "every_seconds": t.every_seconds,
        "daily_at": t.daily_at,
        "tz": t.tz,
        "policy": t.policy,
        "payload": check_json(t.payload, "timer payload"),
    }


def _require(**fields: str) -> None:
    for name, value in fields.items():
        if not isinstance(value, str) or not value:
            raise InvalidInput(f"{name} must be a non-empty string, got {value!r}")


def _validate_event(inbox: str, source: str, source_id: str, payload: Any) -> str:
    _require(inbox=inbox, source=source, source_id=source_id)
    for name, value in (("inbox", inbox), ("source", source), ("source_id", source_id)):
        if len(value) > 512:
            raise InvalidInput(f"{name} is longer than 512 characters")
    body = check_json(payload, "payload")
    try:
        size = len(body.encode("utf-8"))
        for value in (inbox, source, source_id):
            value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"text is not valid Unicode (lone surrogate?): {exc.reason}") from exc
    if size > MAX_PAYLOAD_BYTES:
        raise InvalidInput(f"payload is {size} bytes of JSON; the cap is {MAX_PAYLOAD_BYTES}")
    return body


def _event(row: Row, status: str | None = None, attempts: int | None = None) -> Event:
    return Event(
        id=int(row["id"]),
        inbox=str(row["inbox"]),
        source=str(row["source"]),
        source_id=str(row["source_id"]),
        payload=json.loads(row["payload"]),
        status=status or row["status"],  # type: ignore[arg-type]
        attempts=int(row["attempts"]) if attempts is None else attempts,
        created_at=int(row["created_at"]),
        error=row["error"],
    )


def _lease(row: Row | None) -> Lease | None:
    if row is None:
        return None
    return Lease(str(row["inbox"]), str(row["holder"]), int(row["gen"]), int(row["expires_at"]))


def _approval(row: Row | None) -> ApprovalState | None:
    if row is None:
        return None
    return ApprovalState(
        id=str(row["id"]),
        inbox=str(row["inbox"]),
        tool=str(row["tool"]),
        args=json.loads(row["args"]),
        requester=str(row["requester"]),
        approvers=tuple(json.loads(row["approvers"])),
        deadline=int(row["deadline"]),
        created_at=int(row["created_at"]),
        answer=row["answer"],
        answered_by=row["answered_by"],
        answered_at=row["answered_at"],
        prompt_channel=row["prompt_channel"],
        prompt_ts=row["prompt_ts"],
    )


def _outbox(row: Row) -> OutboxRow:
    return OutboxRow(
        id=int(row["id"]),
        inbox=str(row["inbox"]),
        kind=str(row["kind"]),
        channel=str(row["channel"]),
        thread_ts=str(row["thread_ts"]),
        text=str(row["text"]),
        blocks=None if row["blocks"] is None else json.loads(row["blocks"]),
        priority=str(row["priority"]),
        status=row["status"],
        ref=row["ref"],
        user=row["user_id"],
        attempts=int(row["attempts"]),
        error=row["error"],
        created_at=int(row["created_at"]),
        dispatch_id=row["dispatch_id"],
    )


def _timer_state(row: Row) -> TimerState:
    return TimerState(
        id=str(row["id"]),
        inbox=str(row["inbox"]),
        kind=str(row["kind"]),
        next_at=int(row["next_at"]),
        policy=str(row["policy"]),
        payload=json.loads(row["payload"]),
    )
