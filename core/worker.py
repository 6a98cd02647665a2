"""The worker loop: takes each ready inbox's lease, claims, runs the agent, finishes fenced.

Two kinds of failure stay apart. A finish the store refuses for a run's own content fails that
run alone (a group is finished again one run at a time) and is retried like an agent failure.
A store that cannot take writes at all (a full disk, a server refusing connections) is nobody's
fault: the runs it caught are held and their finish retried, or their attempt given back, and
nothing new is claimed until it accepts writes again, so no outage turns events dead.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from wakeful.core import logs, metrics, tracing
from wakeful.core.clock import LoopClock, wall_clock
from wakeful.core.effects import Effects, Post, RunTiming
from wakeful.core.errors import LeaseLost, StoreUnavailable
from wakeful.core.loops import Kicker, Loop, Wakeup
from wakeful.core.outage import Outage, OutageStore, Ran
from wakeful.core.records import Claim, ReadyList, StoredEvent
from wakeful.core.rules import turns
from wakeful.core.run_spans import RunSpans
from wakeful.core.runner import AgentLike, Runner, runner_for

if TYPE_CHECKING:
    from opentelemetry.trace import Span

log = logging.getLogger("wakeful")


class WorkerStore(OutageStore, Protocol):
    """The store as the worker uses it: list the ready inboxes, claim them, finish fenced."""

    failure_notice: Callable[[StoredEvent], list[Post]] | None

    def ready_list(self, now: int, limit: int) -> ReadyList: ...

    def claim_inboxes(self, inboxes: Sequence[str], holder: str, now: int) -> list[Claim]: ...

    def acquire_and_claim(
        self, inbox: str, holder: str, now: int, release_if_empty: bool = False
    ) -> Claim | None: ...

    def session(self, inbox: str) -> Any: ...

    def finish_and_claim(
        self, claim: Claim, effects: Effects, now: int
    ) -> tuple[bool, Claim | None]: ...

    def finish_and_claim_many(
        self, runs: Sequence[tuple[Claim, Effects]], now: int
    ) -> list[tuple[bool, Claim | None]]: ...

    def log_fenced(self, claim: Claim, timing: RunTiming, error: str) -> None: ...

    def attempt_trace(self, event_ids: Sequence[int]) -> str | None: ...


if TYPE_CHECKING:
    from wakeful.core.store import Store

    def _kept(store: Store) -> WorkerStore:
        return store  # mypy proves the real store keeps this contract


@dataclass(kw_only=True)
class Worker(Loop[WorkerStore]):
    """Takes the lease of each ready inbox, claims, runs the agent, finishes fenced."""

    clock: LoopClock = wall_clock
    """Seconds for the store, plus the sub-second timeline and epoch ms the loop times runs by."""
    agent: AgentLike | None = None
    """What runs each batch; `runner` instead gives it the surfaces around it (`agent` alone
    builds the engine's default runner, which reads more of the store: core/runner.py)."""
    runner: Runner | None = None
    holder: str = ""
    batch_inboxes: int = 20
    wake_dispatcher: Kicker = field(default_factory=Wakeup)
    """Kicked after a finish that queued messages."""
    wake_scheduler: Kicker = field(default_factory=Wakeup)
    """Kicked after a finish that added timers or approvals, so a timer already due, or an
    approval window already over, is not left to the next poll."""
    batch_window: float = 0.0
    """Seconds an inbox must have been ready before it runs, so a person's burst of quick
    messages lands in one batch. Counted per inbox from when this worker first saw it ready."""
    group: int = 16
    """Most inboxes one claim transaction takes, and one finish transaction writes: under load
    a worker pays one commit for many runs instead of two for each."""
    flush_after: float = 0.02
    """Seconds finished runs may wait for the next ones to share their commit. A run slower
    than this (a model call) is committed right after it, and its inbox is claimed alone, so a
    slow agent never holds one inbox's reply, or lease, behind another's run."""
    store_retry: float = 2.0
    """Most seconds between tries while the store refuses writes (0.1 s at first, doubling)."""
    monotonic: Callable[[], float] | None = None
    """Seconds for the sub-second timeline; None: the clock's (`LoopClock.monotonic`)."""
    wall_ms: Callable[[], int] | None = None
    """Epoch milliseconds, for the run log's start and finish of each run (None: the clock's)."""

    def __post_init__(self) -> None:
        self._mono = self.monotonic or self.clock.monotonic
        self.wakeup.time_with(self._mono)  # a batch window starts at a kick, on this timeline
        self._wall_ms = self.wall_ms or self.clock.wall_ms
        if self.runner is None:
            if self.agent is None:
                raise TypeError("a Worker needs an agent or a runner")
            self.runner = runner_for(self.agent, self.store)
        self.store.failure_notice = self.runner.notice_for
        if not self.holder:
            self.holder = f"worker-{uuid.uuid4().hex[:8]}"
        self._outage = Outage(self.store, self.clock, self.holder, self.store_retry)
        self._since: dict[str, float] = {}  # ready inboxes not yet run: when each arrived
        self._cuts: list[turns.Cut] = []  # looks that cut the ready list
        self._run_time: float | None = None  # seconds a run takes, smoothed; None: not known
        self._followers: list[Claim] = []  # next batches finishes claimed: the next round's
        self._holding: float | None = None  # since when followers wait for a batch window
        self._looked_at = float("-inf")  # when the ready list was last read (monotonic)
        self._spans = RunSpans(self.store.attempt_trace)  # tracing: each run's span
        self._retries: list[str] = []  # inboxes whose retried event is next: each run alone

    def tick(self, now: int) -> int:
        """One round: what the store refused last time first, then each newly ready inbox,
        then the next batch of an inbox this worker ran before (the one that waited longest;
        every one when runs are fast), so busy inboxes take turns and a newly ready one never
        waits behind a backlog, only behind the run in progress."""
        if self._mono() < self._outage.retry_at:
            return 0  # the store refused writes a moment ago: let it be
        try:
            runs = self._resume()
            runs += self._round(now)
        except StoreUnavailable:
            self._outage.give_back += self._followers  # not run: their attempts go back
            self._followers = []
            self._outage.keep_leases()
            self._outage.refused(self._mono())
            raise
        self._outage.accepted()
        return runs

    def _resume(self) -> int:
        """Finish the runs the store refused, with the effects they had (no run is repeated
        while its lease holds), then give back the attempts of those that cannot finish."""
        held = self._outage.take_held()
        runs = self._finish(held, None, resumed=True) if held else 0
        self._outage.give_back_claims()
        return runs

    def _round(self, now: int) -> int:
        previous, self._followers = self._followers, []
        try:
            runs = self._run_ready(now, previous)
        except BaseException:
            self._followers = previous + self._followers  # still claimed: kept, or given back
            raise
        t = self._mono()
        window_ends = turns.window_end(self._since, self.batch_window)
        turn = turns.followers_turn(
            len(previous),
            self._holding,
            t,
            window_ends,
            self.batch_window,
            self._run_time,
            self.flush_after,
        )
        self._holding = turn.holding
        self._followers = previous[turn.run :] + self._followers
        runs += self._run_claims(previous[: turn.run])
        return runs + self._run_retries()

    def _run_retries(self, held: list[Claim] | None = None) -> int:
        """Run each inbox whose retried event is next on its own, holding no other claim (the
        batches claimed ahead, `held` and the followers, are given back first): should the
        retry kill the process, as a poison event does, no other event loses an attempt to
        it. An event whose attempt a crash spent is a retry too, so a run that keeps killing
        its process goes dead alone, after `max_attempts` deaths of its own. Those found
        meanwhile wait for the next call."""
        runs = 0
        retries, self._retries = self._retries, []
        for inbox in retries:
            ahead = self._followers + (held or [])
            if ahead:
                self._outage.give_back += ahead
                self._followers = []
                if held:
                    held.clear()  # the caller's list: given back, not to be run
                self._outage.give_back_claims()
            claim = self.store.acquire_and_claim(
                inbox, self.holder, self.clock(), release_if_empty=True
            )
            if claim is not None and (claim.events or claim.dead):
                runs += self._run_claims([claim])
        return runs

    def _run_ready(self, now: int, held: list[Claim]) -> int:
        """Claim and run the ready inboxes in groups; a retried event a group's claim left
        runs alone right after that group (`_run_retries`: `held`, the batches claimed ahead
        of this round, are given back first)."""
        kicked = self.wakeup.since_first_kick()
        limit = self.batch_inboxes * 50
        listed = self.store.ready_list(now, limit)
        ready = [inbox for inbox, _ in listed.inboxes]
        t = self._looked_at = self._mono()
        # An inbox's batch window starts when its first event was stored (the kick that said
        # so), not when this tick got round to seeing it.
        arrived = t if kicked is None else t - kicked
        self._since = turns.arrivals(listed.inboxes, self._since, arrived, self._cuts)
        cut = len(ready) >= limit
        self._cuts = turns.note_cut(self._cuts, listed.top, arrived, t, cut, self.batch_window)
        # Workers on other hosts read the same list: each starts at a random place among the
        # first `batch_inboxes`, so they take different inboxes (turns.settled).
        start = random.randrange(min(len(ready), self.batch_inboxes)) if ready else 0
        settled = turns.settled(ready, self._since, start, t, self.batch_window, self.batch_inboxes)
        runs = 0
        size = self.group if turns.fast(self._run_time, self.flush_after) else 1
        for chosen in turns.groups(settled, size):
            claiming = time.time_ns() if tracing.ON else 0
            claims = self.store.claim_inboxes(chosen, self.holder, self.clock())
            runs += self._run_claims(claims, (claiming, time.time_ns()) if claiming else None)
            for inbox in chosen:
                self._since.pop(inbox, None)
            if self._retries:  # in its turn: a takeover's retry waits for no later group
                runs += self._run_retries(held)
        return runs

    def idle_wait(self) -> float:
        if self._outage.pending:
            return max(0.01, min(self.poll, self._outage.retry_at - self._mono()))
        ends = turns.window_end(self._since, self.batch_window)
        if ends is None:
            return self.poll
        return max(0.01, min(self.poll, ends - self._mono()))

    def sleep(self, wakeup: Wakeup, stop: threading.Event) -> None:
        if turns.window_end(self._since, self.batch_window) is None:
            return super().sleep(wakeup, stop)
        # An inbox is waiting out its batch window. A kick still matters (a new inbox's window
        # starts when a tick first sees it), but under load kicks come hundreds a second and
        # each would cost a tick: after one, let the next ones pile up for a tenth of a window.
        if wakeup.wait(self.idle_wait()):
            stop.wait(min(self.batch_window / 10, self.idle_wait()))

    def _run_claims(self, claims: list[Claim], claimed: tuple[int, int] | None = None) -> int:
        """Run each claim's agent; commit finished runs together (each fenced on its own) once
        `flush_after` has passed or nothing is left. Returns how many runs finished.
        `claimed`: when (ns) the claim of `claims` began and ended, for their runs' spans.
        A claim that found a retried event next is noted, to run alone (`_run_retries`).

        Should the store become unavailable, the runs not yet committed are held for a later
        finish, the claims not yet run are given back, and StoreUnavailable is raised."""
        queue, pending, runs = deque(claims), list[Ran](), 0
        fresh = {id(c) for c in claims} if claimed else set()
        since = 0.0
        claim: Claim | None = None
        try:
            while queue:
                claim = queue.popleft()
                if claim.retry_next and claim.inbox not in self._retries:
                    self._retries.append(claim.inbox)
                if claim.dead and self.runner is not None:
                    self.runner.take_back_dead(claim.dead, self.clock())
                if not claim.events or not self._still_holds(claim):
                    continue
                started, run_id = self._mono(), uuid.uuid4().hex[:12]
                started_ms = self._wall_ms()
                span = self._spans.start(claim, run_id, claimed if id(claim) in fresh else None)
                try:
                    with logs.context(
                        inbox=claim.inbox,
                        events=claim.ids,
                        gen=claim.gen,
                        run_id=run_id,
                        holder=self.holder,
                    ):
                        effects: Effects | None = self._run_agent(claim, span)
                except LeaseLost as exc:
                    log.warning("%s: %s; its finish is dropped", self.holder, exc)
                    _count_run("fenced", self._mono() - started, 0)
                    self._log_fenced(claim, RunTiming(run_id, started_ms, self._wall_ms()), exc)
                    tracing.end(span, {"wakeful.outcome": "fenced"})
                    effects = None
                except BaseException:
                    tracing.end(span, {"wakeful.outcome": "given_back"})  # the store refused
                    raise
                took = self._mono() - started
                self._run_time = turns.smoothed(self._run_time, took)
                if effects is not None:
                    effects.timing = RunTiming(run_id, started_ms, self._wall_ms())
                    since = since if pending else started
                    pending.append(Ran(claim, effects, started, run_id))
                    self._spans.keep(run_id, span)  # ended with its finish
                claim = None
                if pending and (not queue or self._mono() - since >= self.flush_after):
                    ready, pending = pending, []
                    runs += self._finish(ready, queue)
        except StoreUnavailable as exc:
            self._outage.caught(exc, pending, ([] if claim is None else [claim]) + list(queue))
            raise
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

    def _finish(self, pending: list[Ran], queue: deque[Claim] | None, resumed: bool = False) -> int:
        """Commit finished runs and act on each outcome; `resumed` for runs held from an
        earlier refusal, whose lapsed lease means their attempt goes back. Raises
        StoreUnavailable, after the outcomes that did commit, when the store refuses."""
        results, refused = self._spans.commit(pending, self._commit_now)
        done = 0
        for ran, finished, following in results:
            if finished is None:
                self._spans.end(ran, "unwritten")
                continue  # neither the run nor its failure could be written: logged
            claim, effects = ran.claim, ran.effects
            if not finished and resumed:
                self._spans.end(ran, "given_back")
                self._outage.give_back.append(claim)  # the lease lapsed while the store refused
                continue
            outcome = _outcome(effects) if finished else "fenced"
            self._spans.end(ran, outcome)
            _count_run(outcome, self._mono() - ran.started, len(effects.dead))
            with logs.context(
                inbox=claim.inbox,
                events=claim.ids,
                gen=claim.gen,
                run_id=ran.run_id,
                holder=self.holder,
            ):
                if not finished:
                    log.warning("%s: finish refused for %s (lease lost)", self.holder, claim.inbox)
                    if effects.timing is not None:
                        self._log_fenced(claim, effects.timing, LeaseLost("finish refused"))
                    continue
                log.debug("run %s: %d event(s)", outcome, len(claim.events))
            done += 1
            if effects.messages or effects.approvals or effects.dead or effects.ops:
                self.wake_dispatcher.kick()  # (dead events and run reports: ops rows too)
            if effects.timers or effects.approvals:
                self.wake_scheduler.kick()
            if following is not None:
                self._follow(following, queue)
        if refused is not None:
            raise refused
        return done

    def _commit_now(
        self, pending: list[Ran]
    ) -> tuple[list[tuple[Ran, bool | None, Claim | None]], StoreUnavailable | None]:
        """Several runs share one transaction (each fenced on its own); a group the store
        refuses for any reason but being unavailable (one run's effects it cannot hold) is
        finished again one run at a time, so only the run at fault fails. When the store is
        unavailable, the runs not committed are held and the error is returned with what did
        commit."""
        now = self.clock()
        if len(pending) > 1:
            try:
                many = [(ran.claim, ran.effects) for ran in pending]
                outcomes = self.store.finish_and_claim_many(many, now)
                return [(r, *o) for r, o in zip(pending, outcomes, strict=True)], None
            except StoreUnavailable as exc:
                self._outage.held += pending
                return [], exc
            except Exception as exc:
                log.warning(
                    "%s: the finish of %d runs failed (%s); finishing each alone",
                    self.holder,
                    len(pending),
                    exc,
                )
        results: list[tuple[Ran, bool | None, Claim | None]] = []
        for i, ran in enumerate(pending):
            try:
                results.append((ran, *self._finish_alone(ran, now)))
            except StoreUnavailable as exc:
                self._outage.held += pending[i:]
                return results, exc
        return results, None

    def _finish_alone(self, ran: Ran, now: int) -> tuple[bool | None, Claim | None]:
        """Finish one run. One the store refuses (not as unavailable) becomes the run's own
        failure, with the store's error: retried like an agent's failure, dead after the last
        attempt. (finished None: not even that could be written; the lease lapses.)"""
        try:
            return self.store.finish_and_claim(ran.claim, ran.effects, now)
        except StoreUnavailable:
            raise
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"[:2000]
            with logs.context(inbox=ran.claim.inbox, events=ran.claim.ids, run_id=ran.run_id):
                log.warning("the store refused the run's finish; the run failed: %s", error)
            last = self.store.settings.max_attempts
            events = ran.claim.events
            assert self.runner is not None
            ran.effects = Effects(
                failed={e.id: error for e in events if e.attempts < last},
                dead={e.id: error for e in events if e.attempts >= last},
                # Whoever caused an event that dies here is told, as on any other death.
                messages=[
                    m for e in events if e.attempts >= last for m in self.runner.notice_for(e)
                ],
                timing=ran.effects.timing,
            )
        try:
            return self.store.finish_and_claim(ran.claim, ran.effects, now)
        except StoreUnavailable:
            raise
        except Exception:
            log.exception("%s: could not record the failure of %s", self.holder, ran.claim.ids)
            return None, None

    def _log_fenced(self, claim: Claim, timing: RunTiming, exc: Exception) -> None:
        """Keep a fenced run's attempts for `inspect`; a store that refuses it loses only
        that record (the run's events are another generation's now)."""
        try:
            self.store.log_fenced(claim, timing, f"{type(exc).__name__}: {exc}")
        except Exception as failed:
            log.warning(
                "%s: could not record the fenced run of %s: %s", self.holder, claim.ids, failed
            )

    def _follow(self, following: Claim, queue: deque[Claim] | None) -> None:
        """Put an inbox's next batch in line: behind every inbox that became ready since the
        ready list was read (the next round), unless that was under `flush_after` ago, when
        fast runs go on in this one without reading it again for each."""
        if queue is not None and self._mono() - self._looked_at < self.flush_after:
            queue.append(following)
        else:
            self._followers.append(following)

    def _run_agent(self, claim: Claim, span: Span | None = None) -> Effects:
        def heartbeat() -> None:
            if not self.store.renew(claim.inbox, self.holder, claim.gen, self.clock()):
                raise LeaseLost(f"{self.holder} lost {claim.inbox} gen {claim.gen}")

        assert self.runner is not None
        session = partial(self.store.session, claim.inbox)
        if span is None:
            return self.runner.run(claim, session, self.clock(), heartbeat)
        name = type(self.runner.agent).__name__  # inside its run's span, so are its log lines
        with self._spans.agent(span, name) as said:
            effects = self.runner.run(claim, session, self.clock(), heartbeat)
            said(effects)
        return effects


def _outcome(effects: Effects) -> str:
    return "dead" if effects.dead else "failed" if effects.failed else "done"


def _count_run(outcome: str, seconds: float, dead: int) -> None:
    metrics.RUNS.labels(outcome).inc()
    metrics.RUN_SECONDS.observe(seconds)
    if outcome == "fenced":
        metrics.FENCED.inc()  # nothing the run asked for happened, dead letters included
    elif dead:
        metrics.DEAD.labels("agent").inc(dead)
