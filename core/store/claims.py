"""Runs of an inbox: the lease (holder, generation, expiry), claiming a batch, and the fenced
finish that writes a run's effects in the same transaction that completes its events.

Claims and finishes take numbers from the inbox's lease sequence inside their transactions and
the finish records them in the run log, so overlapping runs can be proved absent afterwards."""

from __future__ import annotations

from collections.abc import Sequence

from wakeful.core import metrics
from wakeful.core.effects import Effects, RunTiming, check_json
from wakeful.core.errors import LeaseLost
from wakeful.core.inbox_id import InboxId
from wakeful.core.records import Claim, StoredEvent
from wakeful.core.rules.lease import grant, holds
from wakeful.core.store import ops
from wakeful.core.store.codec import (
    PreparedEffects,
    event_record,
    lease_record,
    message_params,
    prepare_effects,
    require,
)
from wakeful.core.store.dead_letters import record_attempt
from wakeful.core.store.finish_effects import write_effects
from wakeful.core.store.forget import erase_inbox
from wakeful.core.store.outbox import queue
from wakeful.core.store.restores import Restores, answer_marks
from wakeful.core.store.sql import Tx

TOO_MANY_ATTEMPTS = "too many attempts"
"""The error a dead event carries when it was claimed `max_attempts` times without finishing."""


class _Fenced(Exception):
    """A claimed event is no longer running under the claim's generation: undo the finish."""


class Claims(Restores):
    # -- the lease -------------------------------------------------------------------------

    def acquire(self, inbox: str, holder: str, now: int) -> int | None:
        """Take or renew the inbox's lease; return its generation, or None if held by another."""
        require(inbox=inbox, holder=holder)
        with self._tx() as tx:
            granted = self._acquire(tx, inbox, holder, now)
            return None if granted is None else granted[0]

    def _acquire(self, tx: Tx, inbox: str, holder: str, now: int) -> tuple[int, int] | None:
        """The generation granted and the lease sequence number this grant took, or None."""
        current = lease_record(tx.one("get_lease_for_acquire", {"inbox": inbox}))
        if current is None and tx.one("lease_row_exists", {"inbox": inbox}) is not None:
            return None  # another transaction is working on this lease right now
        granted = grant(current, inbox, holder, now, self.settings.lease_ttl)
        if granted is None:
            return None
        params = {
            "inbox": inbox,
            "holder": holder,
            "gen": granted.gen,
            "expires_at": granted.expires_at,
            "process": self.process,
        }
        row = tx.one("create_lease" if current is None else "take_lease", params)
        if row is None:
            return None  # another holder created the row first (PostgreSQL race)
        return granted.gen, int(row["seq"])

    def renew(self, inbox: str, holder: str, gen: int, now: int) -> bool:
        """Heartbeat: extend the lease only if still held in this generation (never revive)."""
        with self._tx() as tx:
            if not self._holds(tx, inbox, holder, gen, now):
                return False
            self._set_expiry(tx, inbox, holder, gen, now + self.settings.lease_ttl)
            return True

    def release(self, inbox: str, holder: str, gen: int, now: int) -> bool:
        """Let the lease lapse now, keeping its generation so the next holder gets gen + 1."""
        with self._tx() as tx:
            if not self._holds(tx, inbox, holder, gen, now):
                return False
            self._set_expiry(tx, inbox, holder, gen, now)
            return True

    def _holds(self, tx: Tx, inbox: str, holder: str, gen: int, now: int) -> bool:
        """Whether `holder` holds the lease in `gen`, read with the row locked for the write."""
        return holds(
            lease_record(tx.one("get_lease_for_update", {"inbox": inbox})), holder, gen, now
        )

    @staticmethod
    def _set_expiry(tx: Tx, inbox: str, holder: str, gen: int, expires_at: int) -> None:
        params = {"inbox": inbox, "holder": holder, "gen": gen, "expires_at": expires_at}
        tx.run("update_lease", params)

    # -- claiming ----------------------------------------------------------------------------

    def claim(self, inbox: str, holder: str, gen: int, now: int) -> Claim:
        """Claim the next batch of the inbox; raises LeaseLost unless `holder` holds it in `gen`.

        In one transaction: rows left running by an older generation go back to pending; rows
        that reached max_attempts become dead; a retried event is claimed alone; otherwise all
        pending events in arrival order up to the cap. Attempts are counted here, and the
        backoff a failure of this attempt must wait is fixed here too.
        """
        with self._tx() as tx:
            if not self._holds(tx, inbox, holder, gen, now):
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
                self._set_expiry(tx, inbox, holder, gen, now)
            return claim

    def claim_inboxes(self, inboxes: Sequence[str], holder: str, now: int) -> list[Claim]:
        """`acquire_and_claim` for several inboxes in one transaction, one commit for all.

        Returns the claims that got events, made events dead (their streams are the worker's
        to take back), or found a retried event next (`Claim.retry_next`: never claimed here,
        beside other inboxes); an inbox held by someone else is skipped, and one whose claim
        found nothing to run has its lease lapse at once. Under load this is how a worker
        takes many inboxes' work for the price of one commit."""
        for inbox in inboxes:
            require(inbox=inbox, holder=holder)
        claims: list[Claim] = []
        with self._tx() as tx:
            for inbox in inboxes:
                granted = self._acquire(tx, inbox, holder, now)
                if granted is None:
                    continue
                gen, seq = granted
                claim = self._claim(tx, inbox, holder, gen, now, seq=seq, alone=False)
                if claim.events or claim.dead or claim.retry_next:
                    # One with dead events alone: their streams to take back; one whose next
                    # event is a retry: to be claimed, and run, on its own.
                    claims.append(claim)
                if not claim.events:
                    self._set_expiry(tx, inbox, holder, gen, now)
        return claims

    def _claim(
        self,
        tx: Tx,
        inbox: str,
        holder: str,
        gen: int,
        now: int,
        seq: int | None = None,
        alone: bool = True,
    ) -> Claim:
        """`seq` reuses a lease sequence number this transaction already took. `alone`: the
        claim may take a retried event (by itself); otherwise one next makes the claim empty,
        `retry_next` (Claim.retry_next)."""
        s = self.settings
        params = {
            "inbox": inbox,
            "gen": gen,
            "max_attempts": s.max_attempts,
            "error": TOO_MANY_ATTEMPTS,
            "now": now,
        }
        rows = tx.all("settle_inbox", params)
        if any(r["status"] == "pending" for r in rows):
            tx.after_commit(metrics.TAKEOVERS.inc)  # an older generation's work was taken over
        dead = [event_record(r) for r in rows if r["status"] == "dead"]
        if dead:
            tx.after_commit(lambda: metrics.DEAD.labels("exhausted").inc(len(dead)))
            self._tell_dead(tx, dead, now)
            lines = [ops.dead(e.inbox, e.id, e.source, e.error) for e in dead]
            ops.queue_lines(tx, s, lines, now)  # and the operators, in the same transaction
        rows = tx.all("next_claimable", {"inbox": inbox, "now": now, "limit": s.claim_cap})
        retry_next = bool(rows) and int(rows[0]["attempts"]) > 0
        if retry_next:
            rows = rows[:1] if alone else []  # a retried event is claimed alone
        events: list[StoredEvent] = []
        waits = [max(0, now - max(int(r["created_at"]), int(r["not_before"]))) for r in rows]
        if waits:
            tx.after_commit(lambda: metrics.observe_waits(waits))
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
            events.append(event_record(r, status="running", attempts=attempts))
        tx.after_commit(lambda: metrics.count_claim([e.attempts for e in events]))
        if not events:
            seq = 0
        elif seq is None:
            seq = self._next_seq(tx, inbox)
        return Claim(
            inbox=inbox,
            holder=holder,
            gen=gen,
            events=tuple(events),
            seq=seq,
            claimed_at=now,
            dead=tuple(dead),
            retry_next=retry_next and not alone,
        )

    def _tell_dead(self, tx: Tx, dead: Sequence[StoredEvent], now: int) -> None:
        """Tell the person whose event ran out of attempts, once (in the transaction that
        makes it dead), where they wrote: `failure_notice` says what and where (the worker
        sets it from the agent's failure text); None tells no one."""
        notice = self.failure_notice
        if notice is None:
            return
        notices = [(e, m) for e in dead for m in notice(e)]
        for _, m in notices:
            self.kinds.check(m)
        told = [{**message_params(e.inbox, m), **answer_marks([e], None)} for e, m in notices]
        if told:
            queue(tx, told, now)

    @staticmethod
    def _next_seq(tx: Tx, inbox: str) -> int:
        row = tx.one("next_lease_seq", {"inbox": inbox})
        return int(row["seq"]) if row else 0

    # -- finishing ---------------------------------------------------------------------------

    def finish(self, claim: Claim, effects: Effects, now: int, release: bool = False) -> bool:
        """Complete a claim and write all of the run's effects, fenced, in one transaction.

        Succeeds only while the claimer holds the lease in the claim's generation and every
        claimed event is still running under it. Otherwise nothing changes and False is
        returned. Events in `effects.failed` go back to pending with their error (their backoff
        was fixed at claim time, or now if later).
        """
        prepared = prepare_effects(claim.inbox, effects, now, self.kinds)
        try:
            with self._tx() as tx:
                finished = self._finish(tx, claim, effects, prepared, now) is not None
                if finished and release:
                    self._set_expiry(tx, claim.inbox, claim.holder, claim.gen, now)
        except _Fenced:
            return False  # rolled back: nothing changed
        if finished and effects.forget is not None:
            self.scrub(now)  # a person's text erased: the files forget it too
        return finished

    def finish_and_claim(
        self, claim: Claim, effects: Effects, now: int
    ) -> tuple[bool, Claim | None]:
        """`finish`, then claim the inbox's next batch under the same lease, in one commit.

        Returns (finished, next claim). When nothing is left the lease is released in the same
        transaction and the next claim is None: a worker's whole cycle is two commits. A
        retried event next is not claimed (the lease lapses): the next claim is empty,
        `retry_next`, for the worker to claim it on its own.
        """
        prepared = prepare_effects(claim.inbox, effects, now, self.kinds)
        try:
            with self._tx() as tx:
                outcome = self._finish_then_claim(tx, claim, effects, prepared, now)
        except _Fenced:
            return False, None
        if outcome[0] and effects.forget is not None:
            self.scrub(now)
        return outcome

    def finish_and_claim_many(
        self, runs: Sequence[tuple[Claim, Effects]], now: int
    ) -> list[tuple[bool, Claim | None]]:
        """`finish_and_claim` for several runs of different inboxes in one transaction.

        Each run is fenced on its own: a run that lost its lease, or whose events are no longer
        running under its generation, is rolled back to a savepoint and reported unfinished,
        while the others commit. One commit for all of them."""
        kinds = self.kinds
        prepared = [prepare_effects(claim.inbox, effects, now, kinds) for claim, effects in runs]
        outcomes: list[tuple[bool, Claim | None]] = []
        with self._tx() as tx:
            for (claim, effects), p in zip(runs, prepared, strict=True):
                tx.run("savepoint")
                try:
                    outcomes.append(self._finish_then_claim(tx, claim, effects, p, now))
                except _Fenced:
                    tx.run("rollback_to_savepoint")
                    outcomes.append((False, None))
                tx.run("release_savepoint")
        if any(done and e.forget for (done, _), (_, e) in zip(outcomes, runs, strict=True)):
            self.scrub(now)  # a person's text erased: the files forget it too
        return outcomes

    def _finish_then_claim(
        self, tx: Tx, claim: Claim, effects: Effects, prepared: PreparedEffects, now: int
    ) -> tuple[bool, Claim | None]:
        finish_seq = self._finish(tx, claim, effects, prepared, now)
        if finish_seq is None:
            return False, None
        # Same transaction, same lease: nothing can have gone stale since our claim, and the
        # finish's sequence number orders the next claim too.
        following = self._claim(
            tx, claim.inbox, claim.holder, claim.gen, now, seq=finish_seq or None, alone=False
        )
        if following.events:
            # A new claim, a full lease: the next run may wait its turn behind other inboxes.
            ttl = self.settings.lease_ttl
            self._set_expiry(tx, claim.inbox, claim.holder, claim.gen, now + ttl)
            return True, following
        self._set_expiry(tx, claim.inbox, claim.holder, claim.gen, now)
        return True, following if following.dead or following.retry_next else None

    def give_back(self, claim: Claim, now: int) -> int:
        """Undo a claim whose run the store, not its events, ended (a finish it refused as
        unavailable, a claim never run): the claim's events go back to pending with the attempt
        it counted given back, and the lease, if still held, lapses now. Returns how many.

        Fenced by the claim's generation: an event some newer claim took is left alone. One a
        takeover's settle put back while the run waited is given back too, dead for too many
        attempts included, unless the claim's finish committed after all (its run is logged:
        a commit whose answer was lost). Then only what that finish claimed next, still
        running under the generation, goes back."""
        if not claim.events:
            return 0
        base = {"inbox": claim.inbox, "gen": claim.gen, "now": now}
        given = 0
        with self._tx() as tx:
            logged = tx.one("run_logged", {**base, "claim_seq": claim.seq}) is not None
            if not logged:  # before the running rows: those it turns pending are not settled
                for ev in claim.events:
                    params = {**base, "id": ev.id, "too_many": TOO_MANY_ATTEMPTS + "%"}
                    given += tx.run("give_back_settled", params)
            given += tx.run("give_back_running", base)
            if self._holds(tx, claim.inbox, claim.holder, claim.gen, now):
                self._set_expiry(tx, claim.inbox, claim.holder, claim.gen, now)
        return given

    def _finish(
        self, tx: Tx, claim: Claim, effects: Effects, prepared: PreparedEffects, now: int
    ) -> int | None:
        """Write the finish; return the lease sequence number it took (0 for an empty claim),
        None when the lease is no longer held. Raises _Fenced, which rolls the transaction
        back, when a claimed event is no longer running under the claim's generation."""
        if not self._holds(tx, claim.inbox, claim.holder, claim.gen, now):
            return None
        timing = effects.timing or RunTiming("", now * 1000, now * 1000)
        waits = prepared.tool_waits or {}
        released = set(effects.released)
        for ev in claim.events:
            error = effects.failed.get(ev.id)
            if ev.id in released:
                # Interrupted by the person's newer message: not the event's failure, so the
                # attempt goes back and it runs again at once, with that message.
                params = {"id": ev.id, "gen": claim.gen, "now": now, "error": INTERRUPTED}
                if tx.run("mark_waiting_fenced", {**params, "not_before": now}) != 1:
                    raise _Fenced(ev.id)
                continue
            if ev.id in waits:
                # An approved call waits on its service: not the event's failure, so the
                # attempt its claim counted goes back and it is tried again at `retry_at`.
                wait = waits[ev.id]
                params = {"id": ev.id, "gen": claim.gen, "now": now, "error": wait["error"]}
                changed = tx.run("mark_waiting_fenced", {**params, "not_before": wait["retry_at"]})
                if changed != 1:
                    raise _Fenced(ev.id)
                tx.run("set_tool_waiting", wait)
                continue
            if ev.id in effects.dead:
                params = {
                    "id": ev.id,
                    "gen": claim.gen,
                    "error": effects.dead[ev.id][:2000],
                    "traceback": prepared.traceback,
                }
                changed = tx.run("mark_dead_fenced", {**params, "now": now})
            elif error is None:
                changed = tx.run("mark_done_fenced", {"id": ev.id, "gen": claim.gen, "now": now})
            else:
                changed = tx.run(
                    "mark_failed_fenced",
                    {
                        "id": ev.id,
                        "gen": claim.gen,
                        "error": str(error)[:2000],
                        "traceback": prepared.traceback,
                        "now": now,
                        "not_before": now + self.settings.backoff(ev.attempts),
                    },
                )
            if changed != 1:
                raise _Fenced(ev.id)
            if ev.id in effects.dead or error is not None:
                record_attempt(
                    tx,
                    event_id=ev.id,
                    inbox=claim.inbox,
                    attempt=ev.attempts,
                    run_id=timing.run_id,
                    started_ms=timing.started_ms,
                    finished_ms=timing.finished_ms,
                    outcome="dead" if ev.id in effects.dead else "failed",
                    error=effects.dead.get(ev.id, error),
                    traceback=effects.traceback,
                )
        marks = answer_marks(claim.events, self.last_restored(tx))
        for row in [*prepared.messages, *(a.prompt for a in prepared.approvals if a.prompt)]:
            row.update(marks)  # the events these rows answer (their posts' metadata)
        if effects.forget is not None:  # the person pressed Forget (core/privacy.py)
            erase_inbox(tx, claim.inbox, effects.forget, now)  # first: "Forgotten." stays
        write_effects(tx, claim.inbox, prepared, now, self.settings)
        told = [
            ops.dead(claim.inbox, ev.id, ev.source, effects.dead[ev.id])
            for ev in claim.events
            if ev.id in effects.dead
        ]
        told += [ops.reported(claim.inbox, line) for line in effects.ops]
        ops.queue_lines(tx, self.settings, told, now)
        if not claim.events:
            return 0
        finish_seq = self._next_seq(tx, claim.inbox)
        tx.run(
            "insert_run",
            {
                "inbox": claim.inbox,
                "holder": claim.holder,
                "gen": claim.gen,
                "claim_seq": claim.seq,
                "finish_seq": finish_seq,
                "events": check_json(claim.ids, "events"),
                "usage": prepared.usage,
                "cost": prepared.cost,
                "team": InboxId(claim.inbox).team,
                "claimed_at": claim.claimed_at,
                "now": now,
                "run_id": timing.run_id or None,
                "outcome": run_outcome(effects),
                "started_ms": timing.started_ms,
                "finished_ms": timing.finished_ms,
            },
        )
        return finish_seq

    def log_fenced(self, claim: Claim, timing: RunTiming, error: str) -> None:
        """Record a fenced run's attempts (its finish was refused and rolled back, so they
        are written in a transaction of their own): `inspect` shows why the work ran twice."""
        if not claim.events:
            return
        with self._tx() as tx:
            for ev in claim.events:
                record_attempt(
                    tx,
                    event_id=ev.id,
                    inbox=claim.inbox,
                    attempt=ev.attempts,
                    run_id=timing.run_id,
                    started_ms=timing.started_ms,
                    finished_ms=timing.finished_ms,
                    outcome="fenced",
                    error=error,
                    traceback=None,
                )


INTERRUPTED = "interrupted: the person wrote again; run again with the newer message"


def run_outcome(effects: Effects) -> str:
    """What the run log says of a finished run: `dead` when it dead-lettered an event,
    `failed` when it failed any (they are retried), `interrupted` when it gave its events
    back for the person's newer message, else `ok`."""
    if effects.dead:
        return "dead"
    return "failed" if effects.failed else "interrupted" if effects.released else "ok"
