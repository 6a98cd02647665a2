"""The dispatcher loop: sends claimed outbox batches through a Sender, paced and fenced.

Each destination's batch is a flight of its own: it goes out part by part, each part recorded
as soon as it is sent, while the loop keeps claiming other destinations. No conversation waits
for another: a long batch at Slack's pace (a post a second per channel) holds a send thread
only for the length of one Web API call at a time, never for its whole run.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Collection, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from wakeful.core import metrics, tracing
from wakeful.core.effects import Post
from wakeful.core.errors import PermanentSendError, StoreUnavailable, TransientSendError
from wakeful.core.inbox_id import InboxId
from wakeful.core.loops import Loop
from wakeful.core.records import ApprovalState
from wakeful.core.rules.outbox import Batch, Part
from wakeful.core.settings import Settings
from wakeful.core.store import ops

log = logging.getLogger("wakeful")


class Sender(Protocol):
    """Delivers parts for the dispatcher. `reserve` and `workspace_of` have defaults (no
    pacing, one workspace) that a sender subclassing this class inherits."""

    def send(self, part: Part) -> str | None:
        """Deliver one part; the posted message's id (Slack ts) or None.

        When `part.retry` is set an earlier attempt may have reached the destination: look
        for `part.part_id` there first and return the existing id instead of posting twice.
        Raise TransientSendError or PermanentSendError on failure."""
        ...

    def reserve(self, part: Part) -> float:
        """Take the part's turn and return the seconds until it comes, so the running
        dispatcher waits for the turn without holding a send thread; `send(part)` then posts
        at that turn instead of taking a new one. A sender that paces its posts (Slack:
        about one a second per channel) overrides it; 0: no turn to wait for."""
        return 0.0

    def workspace_of(self, part: Part) -> str:
        """Whose limits the part's call counts against: a rate limit pauses only the sends
        of that workspace. A sender that posts in many workspaces overrides it; "": one."""
        return ""


@dataclass(eq=False)
class _Flight:
    """One claimed batch on its way out: how far it got, and the claim's deadline as this
    dispatcher last wrote it (the fence: it changes when another dispatcher takes over)."""

    batch: Batch
    held: int
    next: int = 0
    sent: int = 0
    turn_taken: bool = False
    told: bool = False
    """A refusal of one of its parts was told to the person (once per batch)."""

    @property
    def destination(self) -> tuple[str, str]:
        return self.batch.channel, self.batch.thread_ts


class DispatcherStore(Protocol):
    """The store as the dispatcher uses it: claim due batches, fence them, record each part."""

    @property
    def settings(self) -> Settings: ...

    def claim_batches(self, now: int, *, busy: Collection[tuple[str, str]] = ()) -> list[Batch]: ...

    def renew_batch(self, dispatch_id: str, held: int, until: int) -> bool: ...

    def defer_batch(
        self, dispatch_id: str, until: int, error: str, now: int, *, held: int, paused: str | None
    ) -> None: ...

    def mark_sent(self, part: Part, ts: str | None, now: int) -> None: ...

    def fail_part(self, part: Part, error: str, now: int, notice: Post | None) -> bool: ...

    def approval(self, request_id: str) -> ApprovalState | None: ...


if TYPE_CHECKING:
    from wakeful.core.store import Store

    def _kept(store: Store) -> DispatcherStore:
        return store  # mypy proves the real store keeps this contract


@dataclass(kw_only=True)
class Dispatcher(Loop[DispatcherStore]):
    """Sends claimed batches; never holds a database lock while a sender is on the network.

    Batches of different destinations go out independently (`concurrency` send threads), the
    parts of one batch in order. Before each part the claim's deadline is renewed, fenced: a
    dispatcher that lost its claim (it stalled past `send_timeout` and another one took the
    batch over) stops before posting anything more of it. A rate-limit answer pauses every
    send of its workspace until its Retry-After has passed: Slack's limits are per workspace,
    so pushing on in its other conversations would only earn more 429s, while another
    workspace's replies go on.
    """

    sender: Sender
    concurrency: int = 32
    """Send threads: Web API calls in flight at once. A part waiting for its channel's turn
    holds none."""

    def __post_init__(self) -> None:
        self._paused: dict[str, tuple[int, str]] = {}
        """Until when sends are paused, and why (the error that paused them: a rate limit, a
        token that cannot be opened), by workspace (the sender's `workspace_of`; one key, "",
        when it serves one workspace)."""
        self._pause_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Condition()
        self._flights: dict[tuple[str, str], _Flight] = {}
        """Destinations with a batch in flight in this process: the loop does not claim them."""
        self._turns: list[tuple[float, int, _Flight]] = []
        """Flights waiting for their next part's turn (a heap by when it comes)."""
        self._order = itertools.count()
        self._landing = threading.Event()
        self._running = False

    # -- the running loop ----------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """The loop (Loop.run), with the send threads and the turn-taker beside it: each tick
        only starts what is due and goes back to claiming; it never waits for a send."""
        self._pool = self._pool or self._new_pool()
        turns = threading.Thread(target=self._take_turns, name="wakeful-turns", daemon=True)
        turns.start()
        self._running = True
        try:
            super().run(stop)
        finally:
            self._running = False
            self._land()
            turns.join(5)
            self._landing.clear()

    def _launch(self, now: int) -> int:
        """Claim what is due for destinations not already in flight here and start each
        batch on the send threads; how many started."""
        with self._lock:
            busy = set(self._flights)
        batches = self.store.claim_batches(now, busy=busy)
        for batch in batches:
            flight = _Flight(batch, batch.until)
            with self._lock:
                self._flights[flight.destination] = flight
            self._submit(flight)
        return len(batches)

    def _new_pool(self) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(self.concurrency, thread_name_prefix="wakeful-send")

    def _submit(self, flight: _Flight) -> None:
        assert self._pool is not None
        self._pool.submit(self._fly_logged, flight)

    def _fly_logged(self, flight: _Flight) -> None:
        """A send thread's task: the flight until it lands or waits for a turn; any failure is
        logged and the batch left `sending`, to be retried (looking first) after its deadline."""
        try:
            if self._landing.is_set():
                self._release(flight)
            elif not self._fly(flight, turns=True):
                return  # waiting for its turn; the turn-taker resumes it
        except StoreUnavailable as exc:
            log.warning("Dispatcher: store unavailable mid-batch, retried later: %s", exc)
        except Exception:
            log.exception("Dispatcher: batch %s failed", flight.batch.dispatch_id)
        self._landed(flight)

    def _park(self, flight: _Flight, delay: float) -> None:
        """Wait for a part's turn without a send thread."""
        with self._lock:
            if not self._landing.is_set():
                due = time.monotonic() + delay
                first = not self._turns or due < self._turns[0][0]
                heapq.heappush(self._turns, (due, next(self._order), flight))
                if first:
                    self._lock.notify_all()
                return
        self._release(flight)  # stopping: nothing more starts
        self._landed(flight)

    def _take_turns(self) -> None:
        """Hand parked flights back to the send threads when their turn comes."""
        with self._lock:
            while not self._landing.is_set():
                now = time.monotonic()
                while self._turns and self._turns[0][0] <= now:
                    _, _, flight = heapq.heappop(self._turns)
                    self._submit(flight)
                timeout = self._turns[0][0] - now if self._turns else None
                self._lock.wait(timeout)

    def _landed(self, flight: _Flight) -> None:
        """A flight is over: its destination may be claimed again (the loop looks at once)."""
        with self._lock:
            if self._flights.get(flight.destination) is flight:
                del self._flights[flight.destination]
        self.wakeup.kick()

    def _land(self) -> None:
        """On stop: no part starts any more; batches not finished are released at once, so
        the next dispatcher takes them over (looking first) instead of waiting out their
        deadline."""
        self._landing.set()
        with self._lock:
            parked = [flight for _, _, flight in self._turns]
            self._turns.clear()
            self._lock.notify_all()
        for flight in parked:
            try:
                self._release(flight)
            except Exception:
                log.exception("Dispatcher: releasing batch %s failed", flight.batch.dispatch_id)
            self._landed(flight)
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _release(self, flight: _Flight) -> None:
        now = self.clock()
        self.store.renew_batch(flight.batch.dispatch_id, flight.held, now)

    # -- one pass --------------------------------------------------------------------------------

    def tick(self, now: int) -> int:
        """One pass. Under `run` it only starts each due batch (how many started) and returns.

        Called alone (tests that drive the clock by hand, one-shot drains) it is a whole pass,
        waited for: it claims what is due, sends it and returns the parts sent; every send it
        started ends before it returns, even when one of them fails."""
        if now < self._paused.get("", (0, ""))[0]:
            return 0
        if self._running:
            return self._launch(now)
        flights = [_Flight(b, b.until) for b in self.store.claim_batches(now)]
        if len(flights) <= 1 or self.concurrency <= 1:
            for flight in flights:
                self._fly(flight, turns=False)
        else:
            self._pool = self._pool or self._new_pool()
            futures = [self._pool.submit(self._fly, f, False) for f in flights]
            wait(futures)
            errors = [e for f in futures if (e := f.exception()) is not None]
            if errors:
                raise errors[0]
        return sum(f.sent for f in flights)

    # -- one batch -----------------------------------------------------------------------------

    def _fly(self, flight: _Flight, turns: bool) -> bool:
        """Send a flight's parts in order, each recorded once sent; False when it stopped to
        wait for a part's turn (with `turns`; otherwise the sender waits for it itself)."""
        parts = flight.batch.parts
        while flight.next < len(parts) and not self._landing.is_set():
            part = parts[flight.next]
            if turns and not flight.turn_taken:
                flight.turn_taken = True
                delay = self.sender.reserve(part)
                if delay > 0:
                    self._park(flight, delay)
                    return False
            flight.turn_taken = False
            if not self._send(flight, part):
                return True
            flight.next += 1
        if flight.next < len(parts):
            self._release(flight)
        return True

    def _send(self, flight: _Flight, part: Part) -> bool:
        """Send one part and record the outcome; False when the batch must stop here."""
        key = self.sender.workspace_of(part)
        paused, why = self._paused.get(key, (0, ""))
        if self.clock() < paused:
            self._defer(flight, paused, f"paused: {why}")
            return False
        if not self._renew(flight):
            log.info(
                "batch %s was taken over by another dispatcher; this one stops sending it",
                flight.batch.dispatch_id,
            )
            return False
        started = time.perf_counter()
        try:
            if part.kind == "update":
                part = self._resolve_target(part)
            with _post_span(flight, part):
                ts = self.sender.send(part)
                tracing.note({"wakeful.slack.ts": ts})
        except TransientSendError as exc:
            _count_part(part, "retry", started)
            # The clock counts whole seconds (floored): one more second guarantees at least
            # Retry-After has passed in real time.
            now = self.clock()
            until = now + max(1, exc.retry_after) + (1 if exc.retry_after else 0)
            said = None
            if exc.retry_after:
                with self._pause_lock:
                    ends = self._paused.get(key, (0, ""))[0]
                    if until >= ends:  # the last to end says why
                        self._paused[key] = (until, str(exc))
                metrics.PAUSES.inc()
                metrics.PAUSED_SECONDS.inc(exc.retry_after)
                if ends <= now and not InboxId(part.inbox).is_ops:
                    # A new pause, told to the operators once (not per deferred row; not when
                    # their own report met it: no loop).
                    said = ops.paused(key, exc.retry_after, str(exc))
            self._defer(flight, until, str(exc), paused=said)
            return False
        except PermanentSendError as exc:
            _count_part(part, "failed", started)
            log.warning(
                "outbox rows %s parked: Slack refused them for good (%s); %s"
                "`wakeful dead-letters`, then `wakeful requeue outbox ID`",
                list(part.row_ids),
                exc,
                # The one word of a refused ops report: never reported to the channel again.
                "an ops report, not reported again; " if InboxId(part.inbox).is_ops else "",
            )
            # The person is told once per batch: its other parts go to the same place, refused
            # alike.
            notice = exc.notice if isinstance(exc.notice, Post) and not flight.told else None
            if self.store.fail_part(part, str(exc), self.clock(), notice=notice) and notice:
                flight.told = True
                self.wakeup.kick()  # the notice goes at once, not on the next tick
            return True
        _count_part(part, "sent", started)
        self._record(part, ts)
        flight.sent += 1
        return True

    def _renew(self, flight: _Flight) -> bool:
        """Keep the claim alive for one more part: False when another dispatcher has it.

        A claim written this very second is still a whole `send_timeout` from its deadline:
        nobody can have taken it over, and the write is spared."""
        timeout = self.store.settings.send_timeout
        until = self.clock() + timeout
        if flight.held >= until:
            return True
        if not self.store.renew_batch(flight.batch.dispatch_id, flight.held, until):
            return False
        flight.held = until
        return True

    def _defer(self, flight: _Flight, until: int, error: str, paused: str | None = None) -> None:
        self.store.defer_batch(
            flight.batch.dispatch_id, until, error, self.clock(), held=flight.held, paused=paused
        )

    def _record(self, part: Part, ts: str | None) -> None:
        """A sent part in the store at once (a crash later never sends it again); the metrics
        after the commit."""
        self.store.mark_sent(part, ts, self.clock())
        if part.final:
            metrics.ROWS_SENT.inc(len(part.row_ids))

    def _resolve_target(self, part: Part) -> Part:
        """An update rewrites the approval prompt: find where that prompt was posted."""
        state = self.store.approval(part.ref or "")
        if state is None or not state.prompt_ts:
            raise PermanentSendError(f"the prompt of approval {part.ref!r} was never posted")
        return replace(
            part, channel=state.prompt_channel or part.channel, target_ts=state.prompt_ts
        )


def _post_span(flight: _Flight, part: Part) -> AbstractContextManager[None]:
    """The span of one Slack call (core/tracing.py): a child of its first row's trace (the
    run that queued it), linked to every row's, so a merged post joins each run it answers;
    a failure says what Slack answered (`wakeful.slack.error`)."""
    if not tracing.ON:
        return tracing.NOOP
    batch = flight.batch
    traces = batch.traces
    rows = [traces.get(i) for i in part.row_ids]
    attrs = {
        "wakeful.inbox": part.inbox,
        "wakeful.slack.channel": part.channel,
        "wakeful.slack.thread_ts": part.thread_ts or None,
        "wakeful.outbox.kind": part.kind,
        "wakeful.outbox.parts": len(batch.parts),
        "wakeful.outbox.rows": len(part.row_ids),
        "wakeful.dispatch_id": part.dispatch_id,
        "wakeful.retry": part.retry or None,  # each attribute costs: only a retry says so
        **tracing.content("wakeful.post.text", part.text),
    }
    return _failures_said(tracing.span("wakeful.post", attrs, rows[0], rows, kind="client"))


@contextmanager
def _failures_said(block: AbstractContextManager[None]) -> Iterator[None]:
    """`block`, with a send error's text (Slack's error code, the engine's own words: never
    the message's) as `wakeful.slack.error` on the span."""
    with block:
        try:
            yield
        except (TransientSendError, PermanentSendError) as exc:
            tracing.note({"wakeful.slack.error": str(exc)})
            raise


def _count_part(part: Part, outcome: str, started: float) -> None:
    metrics.SEND_SECONDS.observe(time.perf_counter() - started)
    metrics.PARTS.labels(part.kind, outcome).inc()
