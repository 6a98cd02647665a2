"""Group commit: concurrent writers share one transaction and one fsync.

SQLite lets one writer in at a time, so sixteen HTTP threads each committing its own insert
queue up behind sixteen fsyncs. Here the first caller to find no commit in progress becomes the
leader: it takes every request queued so far, runs them in one transaction, commits, and hands
each caller its own result (or the transaction's error) only after the commit. A lone caller
leads at once, so it pays no hand-off; under load the batch grows by itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

In = TypeVar("In")
Out = TypeVar("Out")


class _Request(Generic[In, Out]):
    __slots__ = ("done", "error", "item", "result", "wake")

    def __init__(self, item: In) -> None:
        self.item = item
        self.done = False
        self.result: Out | None = None
        self.error: BaseException | None = None
        self.wake: threading.Lock | None = None

    def park(self) -> None:
        """Make the lock this caller will sleep on: a bare lock, taken now and released by the
        leader, is the cheapest one-shot wake-up CPython has (an Event is a Condition over a
        lock and allocates another lock per wait). A caller that leads at once never needs it."""
        self.wake = threading.Lock()
        self.wake.acquire()

    def unpark(self) -> None:
        assert self.wake is not None
        self.wake.release()


class GroupCommit(Generic[In, Out]):
    """`submit(item)` returns `run_batch([items...])[i]` for its item, after the batch commits.

    `run_batch` must be all-or-nothing (one transaction): if it raises, every caller in the
    batch gets that error and none of them was stored. A batch holds whatever was queued when
    its leader started, which is bounded by the number of calling threads. Each waiter sleeps on
    its own lock: a finished batch wakes exactly its members, and leadership passes to exactly
    one queued caller, so no herd of threads fights for the lock after every commit.

    Under steady load from many callers, batches would otherwise alternate between everyone
    and almost no one: the callers just released are still waking up when the next leader
    starts, so it commits alone (one whole fsync for one row) while they queue behind it. So a
    leader that follows a batch of at least `gather_from` callers first waits, up to `gather`
    seconds, for as many callers as that batch had (the idea of PostgreSQL's commit_delay and
    commit_siblings). A trickle of lone callers never waits; the first lone caller after a
    burst waits once, at most `gather`, and its batch size then ends the gathering.
    """

    def __init__(
        self,
        run_batch: Callable[[Sequence[In]], Sequence[Out]],
        gather: float = 0.0005,
        gather_from: int = 4,
    ) -> None:
        self._run_batch = run_batch
        self._gather = gather
        self._gather_from = gather_from
        self._lock = threading.Lock()
        self._grown = threading.Condition(self._lock)
        self._queue: list[_Request[In, Out]] = []
        self._leading = False
        self._last = 1  # size of the previous batch
        self._target = 0  # queue length a gathering leader waits for; 0 when none is

    def submit(self, item: In) -> Out:
        req: _Request[In, Out] = _Request(item)
        with self._lock:
            queued = self._leading
            if queued:
                req.park()
                self._queue.append(req)
                if self._target and len(self._queue) >= self._target:
                    self._grown.notify()
            else:
                self._leading = True
        if queued:
            req.wake.acquire()  # type: ignore[union-attr]  # parked above
            if not req.done:  # handed the lead; our request is still in the queue
                self._lead(None)
        else:
            self._lead(req)
        if req.error is not None:
            raise req.error
        return req.result  # type: ignore[return-value]

    def _lead(self, own: _Request[In, Out] | None) -> None:
        mine = 0 if own is None else 1
        with self._lock:
            if self._last >= self._gather_from and len(self._queue) + mine < self._last:
                self._target = self._last - mine
                self._grown.wait(self._gather)
                self._target = 0
            batch, self._queue = self._queue, []
            self._last = len(batch) + mine
        if own is not None:
            batch.insert(0, own)
        results: Sequence[Out] = ()
        error: BaseException | None = None
        try:
            results = self._run_batch([r.item for r in batch])
        except BaseException as exc:  # every caller of the batch gets it
            error = exc
        for i, r in enumerate(batch):
            if error is not None:
                r.error = error
            else:
                r.result = results[i]
            r.done = True
            if r is not own:
                r.unpark()
        with self._lock:
            if self._queue:
                self._queue[0].unpark()  # hand the lead to the longest waiter
            else:
                self._leading = False
