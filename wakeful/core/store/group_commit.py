"""Group commit: concurrent writers share one transaction and one fsync.

SQLite lets one writer in at a time, so sixteen HTTP threads each committing its own insert
queue up behind sixteen fsyncs. Here the first caller to find no commit in progress becomes the
leader: it takes every request queued so far, runs them in one transaction, commits, and hands
each caller its own result (or the transaction's error) only after the commit. A lone caller
leads at once, so it pays no hand-off; under load the batch grows by itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

In = TypeVar("In")
Out = TypeVar("Out")


class _Request(Generic[In, Out]):
    __slots__ = ("done", "error", "item", "result")

    def __init__(self, item: In) -> None:
        self.item = item
        self.done = False
        self.result: Out | None = None
        self.error: BaseException | None = None


class GroupCommit(Generic[In, Out]):
    """`submit(item)` returns `run_batch([items...])[i]` for its item, after the batch commits.

    `run_batch` must be all-or-nothing (one transaction): if it raises, every caller in the
    batch gets that error and none of them was stored. A batch holds whatever was queued when
    its leader started, which is bounded by the number of calling threads.
    """

    def __init__(self, run_batch: Callable[[Sequence[In]], Sequence[Out]]) -> None:
        self._run_batch = run_batch
        self._cv = threading.Condition()
        self._queue: list[_Request[In, Out]] = []
        self._leading = False

    def submit(self, item: In) -> Out:
        req: _Request[In, Out] = _Request(item)
        with self._cv:
            if not self._leading and not self._queue:
                self._leading = True  # alone: lead at once, no hand-off
                batch = [req]
            else:
                batch = []
        if batch:
            # Give callers that are runnable right now one chance to join this commit.
            time.sleep(0)
            with self._cv:
                batch += self._queue
                self._queue = []
            self._lead(batch)
            if req.error is not None:
                raise req.error
            return req.result  # type: ignore[return-value]
        with self._cv:
            self._queue.append(req)
            while not req.done and self._leading:
                self._cv.wait()
            if not req.done:
                # No commit in progress and ours not done: lead the next batch (ours is in it).
                self._leading = True
                batch, self._queue = self._queue, []
            else:
                batch = []
        if batch:
            self._lead(batch)
        if req.error is not None:
            raise req.error
        return req.result  # type: ignore[return-value]

    def _lead(self, batch: list[_Request[In, Out]]) -> None:
        results: Sequence[Out] = ()
        error: BaseException | None = None
        try:
            results = self._run_batch([r.item for r in batch])
        except BaseException as exc:  # every caller of the batch gets it
            error = exc
        with self._cv:
            for i, r in enumerate(batch):
                if error is not None:
                    r.error = error
                else:
                    r.result = results[i]
                r.done = True
            self._leading = False
            self._cv.notify_all()
