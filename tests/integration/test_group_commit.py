"""Group commit: callers share a transaction, each gets its own result only after the commit,
and a failed commit fails every caller in it."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from wakeful.core.store import Store, open_store
from wakeful.core.store.group_commit import GroupCommit
from wakeful.devtools.audit import count_events


def test_a_lone_caller_leads_its_own_batch() -> None:
    batches: list[list[int]] = []

    def run(items: Sequence[int]) -> list[int]:
        batches.append(list(items))
        return [i * 10 for i in items]

    gc = GroupCommit(run)
    assert gc.submit(1) == 10
    assert gc.submit(2) == 20
    assert batches == [[1], [2]]


def _wait_until(predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting for the callers to queue"
        time.sleep(0.001)


def test_concurrent_callers_share_batches_and_get_their_own_results() -> None:
    gate = threading.Event()
    batches: list[list[int]] = []

    def run(items: Sequence[int]) -> list[int]:
        batches.append(list(items))
        if len(batches) == 1:
            gate.wait(5)  # hold the first commit so the others queue up behind it
        return [i * 10 for i in items]

    gc = GroupCommit(run)
    results: dict[int, int] = {}

    def call(i: int) -> None:
        results[i] = gc.submit(i)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(17)]
    threads[0].start()
    _wait_until(lambda: bool(batches))
    for t in threads[1:]:
        t.start()
    _wait_until(lambda: len(batches[0]) + len(gc._queue) == 17)
    gate.set()
    for t in threads:
        t.join(5)
    assert results == {i: i * 10 for i in range(17)}
    assert sorted(i for b in batches for i in b) == list(range(17))
    assert len(batches) == 2, batches  # everyone who queued behind the first commit shared one


def test_a_failed_batch_fails_every_caller_in_it() -> None:
    gate = threading.Event()
    calls: list[list[int]] = []

    def run(items: Sequence[int]) -> list[int]:
        calls.append(list(items))
        if len(calls) == 1:
            gate.wait(5)
            return [0] * len(items)
        raise OSError("disk full")

    gc = GroupCommit(run)
    errors: list[BaseException] = []

    def call(i: int) -> None:
        try:
            gc.submit(i)
        except OSError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(5)]
    threads[0].start()
    _wait_until(lambda: bool(calls))
    for t in threads[1:]:
        t.start()
    _wait_until(lambda: len(calls[0]) + len(gc._queue) == 5)
    queued = len(gc._queue)
    gate.set()
    for t in threads:
        t.join(5)
    assert queued >= 1
    assert len(errors) == queued and all(str(e) == "disk full" for e in errors)


def test_ingest_under_concurrency_stores_every_event_once(store: Store) -> None:
    commits = 0
    group = store.db._group  # type: ignore[attr-defined]
    original = group._run_batch

    def counting(items):  # type: ignore[no-untyped-def]
        nonlocal commits
        commits += 1
        return original(items)

    group._run_batch = counting
    barrier = threading.Barrier(16)

    def worker(w: int) -> None:
        barrier.wait()
        for i in range(50):
            assert store.ingest(f"T1:U{w}", "slack", f"E{w}-{i}", {"i": i}, 1).stored
            assert store.ingest(f"T1:U{w}", "slack", f"E{w}-{i}", {"i": i}, 1).duplicate

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert count_events(store) == 16 * 50
    assert 0 < commits < 16 * 100, "no call ever shared a commit"


def test_a_batch_stores_new_keys_once_and_reports_repeats_and_existing_ones(
    store: Store,
) -> None:
    first = store.ingest("T1:U1", "slack", "old", {"n": 0}, 1)
    items = [
        ("T1:U1", "slack", "a", '{"n":1}', 2),
        ("T1:U1", "slack", "old", '{"n":2}', 2),  # stored before: duplicate
        ("T1:U2", "webhook", "a", '{"n":3}', 2),  # same id, other source: new
        ("T1:U1", "slack", "a", '{"n":4}', 2),  # repeat inside the batch: duplicate
        ("T1:U3", "slack", "b", '{"n":5}', 2),
    ]
    results = store.db.store_events(items)
    assert results[1] is None and results[3] is None
    ids = [results[0], results[2], results[4]]
    assert all(isinstance(i, int) for i in ids) and len(set(ids)) == 3
    for item, event_id in zip(items, results, strict=True):
        if event_id is None:
            continue
        event = store.event(event_id)
        assert event is not None
        assert (event.inbox, event.source, event.source_id) == item[:3]
    stored = store.event_by_key("slack", "a")
    assert stored is not None and stored.payload == {"n": 1}  # the first of the repeats
    assert count_events(store) == 4 and first.event_id is not None


def _echo() -> tuple[list[list[int]], Callable[[Sequence[int]], list[int]]]:
    """A batch runner that answers each item with itself, and the batches it was given."""
    batches: list[list[int]] = []

    def run(items: Sequence[int]) -> list[int]:
        batches.append(list(items))
        return list(items)

    return batches, run


def _queue_behind(gc: GroupCommit[int, int], batches: list[list[int]], items: list[int]) -> None:
    """Commit `items` as one batch: caller -1 leads a commit that is held until they queued."""
    hold = threading.Event()
    held = len(batches) + 1
    original = gc._run_batch

    def run(batch: Sequence[int]) -> Sequence[int]:
        out = original(batch)
        if len(batches) == held:
            hold.wait(5)
        return out

    gc._run_batch = run
    first = threading.Thread(target=gc.submit, args=(-1,))
    first.start()
    _wait_until(lambda: len(batches) == held)
    rest = [threading.Thread(target=gc.submit, args=(i,)) for i in items]
    for t in rest:
        t.start()
    _wait_until(lambda: len(gc._queue) == len(items))
    hold.set()
    for t in [first, *rest]:
        t.join(5)
    gc._run_batch = original


def test_after_a_big_batch_the_next_leader_waits_for_as_many_callers() -> None:
    # Without the wait the first caller back would commit alone, one fsync for one row, while
    # the others queue behind it: batches alternate between everyone and no one.
    batches, run = _echo()
    gc = GroupCommit(run, gather=30.0, gather_from=4)
    _queue_behind(gc, batches, [1, 2, 3, 4])
    assert sorted(batches[-1]) == [1, 2, 3, 4]
    lead = threading.Thread(target=gc.submit, args=(5,))
    lead.start()
    _wait_until(lambda: gc._target == 3)  # the lone caller is gathering, not committing
    assert sorted(batches[-1]) == [1, 2, 3, 4]
    others = [threading.Thread(target=gc.submit, args=(i,)) for i in (6, 7, 8)]
    for t in others:
        t.start()
    for t in [lead, *others]:
        t.join(5)
    assert sorted(batches[-1]) == [5, 6, 7, 8]


def test_a_gathering_leader_gives_up_after_its_wait_and_a_trickle_never_waits() -> None:
    batches, run = _echo()
    gc = GroupCommit(run, gather=0.05, gather_from=4)
    _queue_behind(gc, batches, [1, 2, 3, 4])
    assert gc.submit(5) == 5  # nobody came back within 50 ms: it commits alone
    assert batches[-1] == [5]
    slow = GroupCommit(run, gather=10.0, gather_from=4)
    _queue_behind(slow, batches, [10, 11])  # two at once: fewer than gather_from
    started = time.monotonic()
    for i in range(12, 20):  # then lone callers, one after another
        assert slow.submit(i) == i
    assert time.monotonic() - started < 5, "a lone caller waited for company"
    assert batches[-8:] == [[i] for i in range(12, 20)]


def test_a_batch_of_new_keys_maps_each_caller_to_its_own_row(store: Store) -> None:
    # A batch is one statement (its new rows come back with their keys, in no promised
    # order): each caller must still get the id of its own row.
    store.ingest("T1:U0", "slack", "before", {"n": 0}, 1)
    items = [(f"T1:U{i % 3}", "slack", f"k{i}", f'{{"n":{i}}}', 2) for i in range(1, 9)]
    results = store.db.store_events(items)
    assert len(set(results)) == 8
    for (inbox, source, key, body, _), event_id in zip(items, results, strict=True):
        assert event_id is not None
        event = store.event(event_id)
        assert event is not None
        assert (event.inbox, event.source, event.source_id) == (inbox, source, key)
        assert event.payload == json.loads(body)


def test_every_sqlite_ingest_commits_on_one_connection_whichever_thread_leads(
    tmp_path: Path,
) -> None:
    """Each HTTP thread's own connection re-read the pages another thread's ingest had just
    written (its page cache was stale): seven file reads a delivery. The ingests share one."""
    store = open_store(tmp_path / "one.db")
    try:
        opened = len(store.db._all)  # type: ignore[attr-defined]
        for w in range(8):
            t = threading.Thread(
                target=lambda w=w: store.ingest(f"T1:U{w}", "slack", f"E{w}", {"w": w}, 1)
            )
            t.start()
            t.join(10)
        assert count_events(store) == 8
        assert len(store.db._all) == opened + 1  # type: ignore[attr-defined]
    finally:
        store.close()
