"""The dispatcher loop: sends claimed outbox batches through a Sender, paced and fenced."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import Protocol

from wakeful.core import metrics
from wakeful.core.errors import PermanentSendError, TransientSendError
from wakeful.core.rules.outbox import Batch, Part
from wakeful.core.wakeups import Loop

log = logging.getLogger("wakeful")


class Sender(Protocol):
    """Delivers one part; returns the posted message's id (Slack ts) or None.

    When `part.retry` is set an earlier attempt may have reached the destination: look for
    `part.part_id` there first and return the existing id instead of posting twice. Raise
    TransientSendError or PermanentSendError on failure.
    """

    def send(self, part: Part) -> str | None: ...


@dataclass(kw_only=True)
class Dispatcher(Loop):
    """Sends claimed batches; never holds a database lock while a sender is on the network.

    Batches of different destinations go out in parallel (`concurrency` threads), the parts of
    one batch in order. A rate-limit answer pauses every send until its Retry-After has passed:
    Slack's limits are per app, so pushing on in other conversations would only earn more 429s.
    """

    sender: Sender
    concurrency: int = 32
    """Send threads. A send waits at its conversation's pace (about a post a second), holding
    its thread, so after a backlog a pass needs a thread per conversation it sends to: with 8,
    100 conversations drained at 8 posts a second."""

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
                log.warning(
                    "outbox rows %s parked: Slack refused them for good (%s); "
                    "`wakeful dead-letters`, then `wakeful requeue outbox ID`",
                    list(part.row_ids),
                    exc,
                )
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
