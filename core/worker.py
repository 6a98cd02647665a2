"""The worker loop: takes each ready inbox's lease, claims, runs the agent, finishes fenced."""

from __future__ import annotations

import logging
import random
import threading
import time
import traceback
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from wakeful.core import logs, metrics
from wakeful.core.agent import Agent, Run
from wakeful.core.effects import Effects
from wakeful.core.errors import LeaseLost, SessionUnusable
from wakeful.core.records import Claim
from wakeful.core.wakeups import Kicker, Loop, Wakeup

log = logging.getLogger("wakeful")


@dataclass(kw_only=True)
class Worker(Loop):
    """Takes the lease of each ready inbox, claims, runs the agent, finishes fenced."""

    agent: Agent
    holder: str = ""
    batch_inboxes: int = 20
    wake_dispatcher: Kicker = field(default_factory=Wakeup)
    """Kicked after a finish that queued messages."""
    wake_scheduler: Kicker = field(default_factory=Wakeup)
    """Kicked after a finish that added timers or approvals, so a timer already due, or an
    approval window already over, is not left to the next poll."""
    settle: float = 0.0
    """Seconds an inbox must have been ready before it runs, so a person's burst of quick
    messages lands in one batch. Counted per inbox from when this worker first saw it ready."""
    group: int = 16
    """Most inboxes one claim transaction takes, and one finish transaction writes: under load
    a worker pays one commit for many runs instead of two for each."""
    flush_after: float = 0.02
    """Seconds finished runs may wait for the next ones to share their commit. A run slower
    than this (a model call) is committed right after it, and its inbox is claimed alone, so a
    slow agent never holds one inbox's reply, or lease, behind another's run."""
    monotonic: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        if not self.holder:
            self.holder = f"worker-{uuid.uuid4().hex[:8]}"
        self._seen: dict[str, float] = {}
        self._cuts: list[tuple[int, float]] = []  # looks that cut the ready list: (top id, kick)
        self._run_time: float | None = None  # seconds a run takes, smoothed; None: not known

    def tick(self, now: int) -> int:
        kicked = self.wakeup.first_kick()
        limit = self.batch_inboxes * 50
        listed = self.store.ready_list(now, limit)
        ready = [inbox for inbox, _ in listed.inboxes]
        t = self.monotonic()
        # An inbox's batch window starts when its first event was stored (the kick that said
        # so), not when this tick got round to seeing it.
        arrived = t if kicked is None else t - max(0.0, time.monotonic() - kicked)
        self._seen = {
            inbox: self._seen[inbox] if inbox in self._seen else self._cut_arrival(first, arrived)
            for inbox, first in listed.inboxes
        }
        self._note_cut(listed.top, arrived, t, cut=len(ready) >= limit)
        # Workers on other hosts read the same list, oldest first: each starts at a random
        # place among the first `batch_inboxes`, so they take different inboxes instead of
        # queueing on the same leases, and the oldest work still goes first.
        start = random.randrange(min(len(ready), self.batch_inboxes)) if ready else 0
        settled = [
            inbox
            for inbox in ready[start:] + ready[:start]
            if self.settle <= 0 or t - self._seen[inbox] >= self.settle
        ][: self.batch_inboxes]
        runs = 0
        fast = self._run_time is not None and self._run_time < self.flush_after
        size = self.group if fast else 1
        for i in range(0, len(settled), size):
            chosen = settled[i : i + size]
            runs += self._run_claims(self.store.claim_inboxes(chosen, self.holder, self.clock()))
            for inbox in chosen:
                self._seen.pop(inbox, None)
        return runs

    def _cut_arrival(self, first: int, arrived: float) -> float:
        """When an inbox first seen now arrived: this tick's kick, or, if its oldest event was
        already stored at an earlier look that cut the list before it, that look's kick."""
        for top, at in self._cuts:
            if first <= top:
                return min(at, arrived)
        return arrived

    def _note_cut(self, top: int, arrived: float, t: float, cut: bool) -> None:
        """Remember a look that left inboxes unseen (the newest event id then, and its kick);
        a look that listed every ready inbox ends the record. Looks whose kick is over a window
        old collapse into the newest of them: any inbox they date is due already."""
        if not cut:
            self._cuts.clear()
            return
        self._cuts.append((top, arrived))
        expired = [c for c in self._cuts if c[1] <= t - self.settle]
        if len(expired) > 1:
            self._cuts = [expired[-1], *(c for c in self._cuts if c[1] > t - self.settle)]

    def idle_wait(self) -> float:
        if not self._seen or self.settle <= 0:
            return self.poll
        due = min(self._seen.values()) + self.settle - self.monotonic()
        return max(0.01, min(self.poll, due))

    def sleep(self, wakeup: Wakeup, stop: threading.Event) -> None:
        if not (self.settle > 0 and self._seen):
            return super().sleep(wakeup, stop)
        # An inbox is waiting out its batch window. A kick still matters (a new inbox's window
        # starts when a tick first sees it), but under load kicks come hundreds a second and
        # each would cost a tick: after one, let the next ones pile up for a tenth of a window.
        if wakeup.wait(self.idle_wait()):
            stop.wait(min(self.settle / 10, self.idle_wait()))

    def run_inbox(self, inbox: str) -> int:
        """Run one inbox until it has nothing claimable; return how many runs finished."""
        return self._run_claims(self.store.claim_inboxes([inbox], self.holder, self.clock()))

    def _run_claims(self, claims: list[Claim]) -> int:
        """Run each claim's agent; commit finished runs together (each fenced on its own) once
        `flush_after` has passed or nothing is left; a finish that claims the inbox's next
        batch puts it back in line. Returns how many runs finished."""
        queue, pending, runs = deque(claims), list[_Ran](), 0
        since = 0.0
        while queue:
            claim = queue.popleft()
            if not self._still_holds(claim):
                continue
            started, run_id = self.monotonic(), uuid.uuid4().hex[:12]
            try:
                with logs.context(
                    inbox=claim.inbox,
                    events=claim.ids,
                    gen=claim.gen,
                    run_id=run_id,
                    holder=self.holder,
                ):
                    effects: Effects | None = self._run_agent(claim)
            except LeaseLost as exc:
                log.warning("%s: %s; its finish is dropped", self.holder, exc)
                _count_run("fenced", self.monotonic() - started, 0)
                effects = None
            took = self.monotonic() - started
            smoothed = self._run_time
            self._run_time = took if smoothed is None else 0.8 * smoothed + 0.2 * took
            if effects is not None:
                since = since if pending else started
                pending.append(_Ran(claim, effects, started, run_id))
            if pending and (not queue or self.monotonic() - since >= self.flush_after):
                runs += self._finish(pending, queue)
                pending = []
        return runs

    def _still_holds(self, claim: Claim) -> bool:
        """A claim that waited its turn for half its lease is renewed before its run starts,
        so no run begins on a lease that may already have passed to another worker."""
        now = self.clock()
        if now - claim.claimed_at < self.store.settings.lease_ttl / 2:
            return True
        if self.store.renew(claim.inbox, self.holder, claim.gen, now):
            return True
        log.warning("%s: lost %s before its run started; skipped", self.holder, claim.inbox)
        return False

    def _finish(self, pending: list[_Ran], queue: deque[Claim]) -> int:
        if len(pending) == 1:
            ran = pending[0]
            outcomes = [self.store.finish_and_claim(ran.claim, ran.effects, self.clock())]
        else:
            runs = [(ran.claim, ran.effects) for ran in pending]
            outcomes = self.store.finish_and_claim_many(runs, self.clock())
        done = 0
        for ran, (finished, following) in zip(pending, outcomes, strict=True):
            claim, effects = ran.claim, ran.effects
            outcome = _outcome(effects) if finished else "fenced"
            _count_run(outcome, self.monotonic() - ran.started, len(effects.dead))
            with logs.context(
                inbox=claim.inbox,
                events=claim.ids,
                gen=claim.gen,
                run_id=ran.run_id,
                holder=self.holder,
            ):
                if not finished:
                    log.warning("%s: finish refused for %s (lease lost)", self.holder, claim.inbox)
                    continue
                log.debug("run %s: %d event(s)", outcome, len(claim.events))
            done += 1
            if effects.messages or effects.approvals:
                self.wake_dispatcher.kick()
            if effects.timers or effects.approvals:
                self.wake_scheduler.kick()
            if following is not None:
                queue.append(following)
        return done

    def _run_agent(self, claim: Claim) -> Effects:
        def heartbeat() -> None:
            if not self.store.renew(claim.inbox, self.holder, claim.gen, self.clock()):
                raise LeaseLost(f"{self.holder} lost {claim.inbox} gen {claim.gen}")

        try:
            run = Run(
                inbox=claim.inbox,
                events=claim.events,
                session=self.store.session(claim.inbox),
                now=self.clock(),
                heartbeat=heartbeat,
            )
            return self.agent.run(run)
        except LeaseLost:
            raise
        except SessionUnusable as exc:
            return self._unusable_session(claim, exc)
        except Exception as exc:
            log.warning("agent failed on %s %s: %s", claim.inbox, claim.ids, exc)
            error = f"{type(exc).__name__}: {exc}"
            if log.isEnabledFor(logging.DEBUG):
                log.debug("%s", traceback.format_exc())
            return Effects(failed={e.id: error for e in claim.events})

    def _unusable_session(self, claim: Claim, exc: SessionUnusable) -> Effects:
        """Retry as any failure; on the last attempt dead-letter the events, set the session
        aside and tell the person (once: only this finish carries the notice)."""
        error = f"{SessionUnusable.ERROR_PREFIX}{exc}"
        if all(e.attempts < self.store.settings.max_attempts for e in claim.events):
            log.warning("agent failed on %s %s: %s", claim.inbox, claim.ids, error)
            return Effects(failed={e.id: error for e in claim.events})
        log.error(
            "%s: %s; events %s dead-lettered, session set aside, next run starts fresh",
            claim.inbox,
            error,
            claim.ids,
        )
        return Effects(
            messages=[] if exc.notice is None else [exc.notice],
            dead={e.id: error for e in claim.events},
            set_aside_session=str(exc),
        )


@dataclass(frozen=True, slots=True)
class _Ran:
    """A run whose agent has returned, waiting for its finish to be committed."""

    claim: Claim
    effects: Effects
    started: float
    run_id: str


def _outcome(effects: Effects) -> str:
    return "dead" if effects.dead else "failed" if effects.failed else "done"


def _count_run(outcome: str, seconds: float, dead: int) -> None:
    metrics.RUNS.labels(outcome).inc()
    metrics.RUN_SECONDS.observe(seconds)
    if outcome == "fenced":
        metrics.FENCED.inc()  # nothing the run asked for happened, dead letters included
    elif dead:
        metrics.DEAD.labels("agent").inc(dead)
