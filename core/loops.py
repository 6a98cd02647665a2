"""The three loops: worker (runs agents), scheduler (fires timers), dispatcher (sends posts).

Each has `tick(now)`, one pass that tests drive on a simulated clock, and `run(stop)`, which
repeats ticks on the injected clock, sleeping until a wake-up or the poll interval.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import traceback
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import Protocol

from wakeful.core import logs, metrics
from wakeful.core.agent import Agent, Run
from wakeful.core.clock import Clock, wall_clock
from wakeful.core.effects import Effects
from wakeful.core.errors import (
    LeaseLost,
    PermanentSendError,
    SessionUnusable,
    StoreUnavailable,
    TransientSendError,
)
from wakeful.core.records import Claim
from wakeful.core.rules.outbox import Batch, Part
from wakeful.core.store import Store
from wakeful.core.store.timers import DUE_PAGE

log = logging.getLogger("wakeful")


class Sender(Protocol):
    """Delivers one part; returns the posted message's id (Slack ts) or None.

    When `part.retry` is set an earlier attempt may have reached the destination: look for
    `part.part_id` there first and return the existing id instead of posting twice. Raise
    TransientSendError or PermanentSendError on failure.
    """

    def send(self, part: Part) -> str | None: ...


class Kicker(Protocol):
    def kick(self) -> None: ...


class Wakeup:
    """A kick from ingest to an idle loop in the same process, so new work skips the poll wait."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._first: float | None = None

    def kick(self) -> None:
        if self._first is None:
            self._first = time.monotonic()
        self._event.set()

    def first_kick(self) -> float | None:
        """When the first kick since the last call came (monotonic), or None: the time the
        news it carries arrived, however long the loop took to look."""
        first, self._first = self._first, None
        return first

    def wait(self, timeout: float) -> bool:
        fired = self._event.wait(timeout)
        self._event.clear()
        return fired


class Bell:
    """Rings every subscribed loop at once (shutdown).

    Everyday kicks are aimed instead (new events wake the worker, new outbox rows the
    dispatcher, new timers the scheduler): a loop woken for nothing still costs a thread switch
    and a look at the store, and those add up in the HTTP front's latency when they come
    hundreds of times a second."""

    def __init__(self) -> None:
        self._wakeups: list[Wakeup] = []

    def subscribe(self, wakeup: Wakeup | None = None) -> Wakeup:
        wakeup = wakeup or Wakeup()
        self._wakeups.append(wakeup)
        return wakeup

    def kick(self) -> None:
        for wakeup in self._wakeups:
            wakeup.kick()


@dataclass(kw_only=True)
class _Loop:
    store: Store
    clock: Clock = wall_clock
    poll: float = 1.0
    wakeup: Wakeup = field(default_factory=Wakeup)
    """What wakes this loop early: kicked by whoever has news for it."""

    def tick(self, now: int) -> int:
        raise NotImplementedError

    def idle_wait(self) -> float:
        """How long to sleep when a tick found nothing to do (a wake-up cuts it short)."""
        return self.poll

    def run(self, stop: threading.Event) -> None:
        """Tick until `stop` is set; a store outage is logged and retried, never fatal."""
        while not stop.is_set():
            try:
                busy = self.tick(self.clock())
            except StoreUnavailable as exc:
                log.warning("%s: store unavailable, retrying: %s", type(self).__name__, exc)
                busy = 0
            except Exception:
                log.exception("%s: tick failed", type(self).__name__)
                busy = 0
            if busy:
                continue
            if stop.is_set():
                return
            self.sleep(self.wakeup, stop)

    def sleep(self, wakeup: Wakeup, stop: threading.Event) -> None:
        """Idle until a kick or `idle_wait()` seconds have passed."""
        wakeup.wait(self.idle_wait())


@dataclass(kw_only=True)
class Worker(_Loop):
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
        self._run_time: float | None = None  # seconds a run takes, smoothed; None: not known

    def tick(self, now: int) -> int:
        kicked = self.wakeup.first_kick()
        ready = self.store.ready_inboxes(now, self.batch_inboxes * 5)
        t = self.monotonic()
        # An inbox's batch window starts when its first event was stored (the kick that said
        # so), not when this tick got round to seeing it.
        arrived = t if kicked is None else t - max(0.0, time.monotonic() - kicked)
        self._seen = {inbox: self._seen.get(inbox, arrived) for inbox in ready}
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


@dataclass(kw_only=True)
class Scheduler(_Loop):
    """Turns due timers into inbox events; kicks the worker when it stored some."""

    wake_worker: Kicker = field(default_factory=Wakeup)
    prune_every: float = 60.0
    """Seconds between retention passes once nothing aged is left."""
    prune_duty: float = 0.1
    """While a backlog of aged rows drains, the share of the time pruning may take: after a
    pass that left more, the next waits nine times as long as it took, so the HTTP front's
    inserts find SQLite's write lock free at least nine tenths of the time."""
    monotonic: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        self._prune_at = 0.0

    def tick(self, now: int) -> int:
        total = 0
        while True:
            result = self.store.fire_due_timers(now)
            total += result.fired + result.expired_approvals
            if result.due < DUE_PAGE:
                break
        if total:
            self.wake_worker.kick()
        return total + self._prune(now)

    def _prune(self, now: int) -> int:
        """One retention pass when one is due; the rows it deleted."""
        started = self.monotonic()
        if started < self._prune_at:
            return 0
        pruned = self.store.prune(now)
        took = self.monotonic() - started
        self._prune_at = started + (took / self.prune_duty if pruned.more else self.prune_every)
        if pruned.total:
            log.info("retention: pruned %s", pruned.counts)
        return pruned.total

    def idle_wait(self) -> float:
        return max(0.0, min(self.poll, self._prune_at - self.monotonic()))


@dataclass(kw_only=True)
class Dispatcher(_Loop):
    """Sends claimed batches; never holds a database lock while a sender is on the network.

    Batches of different destinations go out in parallel (`concurrency` threads), the parts of
    one batch in order. A rate-limit answer pauses every send until its Retry-After has passed:
    Slack's limits are per app, so pushing on in other conversations would only earn more 429s.
    """

    sender: Sender
    concurrency: int = 8

    def __post_init__(self) -> None:
        self._paused_until = 0
        self._pause_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def tick(self, now: int) -> int:
        if now < self._paused_until:
            return 0
        batches = self.store.claim_batches(now)
        if len(batches) <= 1 or self.concurrency <= 1:
            results = [self._send_batch(b) for b in batches]
            errors: list[BaseException] = []
        else:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="wakeful-send")
            futures = [self._pool.submit(self._send_batch, b) for b in batches]
            # Every send of this pass ends before the pass does, even when one of them fails:
            # a send still in flight when the next pass reclaims its batch could post twice.
            wait(futures)
            results = [f.result() for f in futures if f.exception() is None]
            errors = [e for f in futures if (e := f.exception()) is not None]
        # One commit records the whole pass. A crash before it leaves the rows `sending`: once
        # their deadline passes they are retried, and the sender finds the posts already there.
        self._record([done for _, unrecorded in results for done in unrecorded])
        if errors:
            raise errors[0]
        return sum(count for count, _ in results)

    def _record(self, sent: list[tuple[Part, str | None]]) -> None:
        self.store.mark_sent_many(sent, self.clock())
        for part, _ in sent:
            if part.final:
                metrics.ROWS_SENT.inc(len(part.row_ids))

    def _send_batch(self, batch: Batch) -> tuple[int, list[tuple[Part, str | None]]]:
        """Send a batch's parts in order: how many went out, and those not yet recorded."""
        sent: list[tuple[Part, str | None]] = []
        count = 0
        for part in batch.parts:
            if self.clock() < self._paused_until:
                self.store.defer_batch(
                    batch.dispatch_id, self._paused_until, "paused: rate limited", self.clock()
                )
                break
            started = time.perf_counter()
            try:
                if part.kind == "update":
                    self._record(sent)  # the prompt this rewrites may be among them
                    sent = []
                    part = self._resolve_target(part)
                ts = self.sender.send(part)
            except TransientSendError as exc:
                _count_part(part, "retry", started)
                # The clock counts whole seconds (floored): one more second guarantees at least
                # Retry-After has passed in real time.
                until = self.clock() + max(1, exc.retry_after) + (1 if exc.retry_after else 0)
                if exc.retry_after:
                    with self._pause_lock:
                        self._paused_until = max(self._paused_until, until)
                    metrics.PAUSES.inc()
                    metrics.PAUSED_SECONDS.inc(exc.retry_after)
                self.store.defer_batch(part.dispatch_id, until, str(exc), self.clock())
                break
            except PermanentSendError as exc:
                _count_part(part, "failed", started)
                self.store.fail_part(part, str(exc), self.clock())
                continue
            _count_part(part, "sent", started)
            sent.append((part, ts))
            count += 1
        return count, sent

    def _resolve_target(self, part: Part) -> Part:
        """An update rewrites the approval prompt: find where that prompt was posted."""
        state = self.store.approval(part.ref or "")
        if state is None or not state.prompt_ts:
            raise PermanentSendError(f"the prompt of approval {part.ref!r} was never posted")
        return replace(
            part, channel=state.prompt_channel or part.channel, target_ts=state.prompt_ts
        )


def _count_part(part: Part, outcome: str, started: float) -> None:
    metrics.SEND_SECONDS.observe(time.perf_counter() - started)
    metrics.PARTS.labels(part.kind, outcome).inc()
