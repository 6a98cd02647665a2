"""Issue 38, the memory store (core/memory.py, core/store/memory.py), both stores: a run's memory
writes are effects, written by its fenced finish once or not at all; within the run its reads
see its own writes; every write is a version; what a write may hold is checked whole."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.conftest import T0, MakeStore
from tests.integration.test_streams import INBOX, said
from wakeful.core.clock import ManualClock
from wakeful.core.memory import MemoryChange, MemoryLimits, MemoryRefused
from wakeful.core.run import Run
from wakeful.core.runner import runner_for
from wakeful.core.store import Store
from wakeful.core.store.memory import write_memory
from wakeful.core.worker import Worker


class Remembering:
    """An agent whose run does `act(run)` with its memory."""

    def __init__(self, act: Callable[[Run], None]) -> None:
        self.act = act

    def run(self, run: Run) -> None:
        self.act(run)


def run_once(store: Store, act: Callable[[Run], None], key: str = "Ev1", n: int = 1) -> None:
    said(store, key, n)
    Worker(store=store, clock=ManualClock(T0), runner=runner_for(Remembering(act), store)).tick(T0)


def test_a_run_reads_its_own_writes_and_the_next_run_reads_them_after_its_finish(
    make_store: MakeStore,
) -> None:
    store = make_store()
    seen: list[object] = []

    def first(run: Run) -> None:
        run.memory.write("/memories/prefs.md", "Prefers answers in French.")
        seen.append(run.memory.read("/memories/prefs.md"))
        seen.append(store.memory_read(INBOX, "/memories/prefs.md"))  # not before the finish
        run.memory.edit("/memories/prefs.md", "French", "French, short")
        seen.append(run.memory.list())

    run_once(store, first)
    assert seen == ["Prefers answers in French.", None, ["/memories/prefs.md"]]
    assert store.memory_read(INBOX, "/memories/prefs.md") == "Prefers answers in French, short."
    [doc] = store.memory_docs(INBOX)
    assert (doc.path, doc.version, doc.bytes) == ("/memories/prefs.md", 1, 33)

    def second(run: Run) -> None:
        seen.append(run.memory.read("/memories/prefs.md"))
        run.memory.write("/memories/prefs.md", "Prefers English now.")
        run.memory.rename("/memories/prefs.md", "/memories/people/prefs.md")

    run_once(store, second, "Ev2", 2)
    assert seen[-1] == "Prefers answers in French, short."
    assert store.memory_paths(INBOX, "/memories") == ["/memories/people/prefs.md"]
    versions = store.memory_versions(INBOX, "/memories/prefs.md")
    assert [(v, t) for v, t, _ in versions] == [
        (1, "Prefers answers in French, short."),
        (2, None),  # the rename's delete: the version before it kept, restorable
    ]
    assert store.restore_memory(INBOX, "/memories/prefs.md", 1, T0 + 5)
    assert store.memory_read(INBOX, "/memories/prefs.md") == "Prefers answers in French, short."


def test_a_run_that_does_not_finish_writes_no_memory_and_a_fenced_finish_writes_none(
    make_store: MakeStore,
) -> None:
    store = make_store()

    def failing(run: Run) -> None:
        run.memory.write("/memories/a.md", "half")
        raise RuntimeError("the model call failed")

    run_once(store, failing)
    assert store.memory_docs(INBOX) == [], "a failed run wrote memory"

    # A stale worker's late finish: its lease was taken over, its finish is fenced.
    said(store, "Ev9", 9)
    claim = store.acquire_and_claim(INBOX, "stale", T0 + 100)
    assert claim is not None and claim.events
    effects = runner_for(
        Remembering(lambda run: run.memory.write("/memories/b.md", "late")), store
    ).run(claim, lambda: None, T0 + 100, lambda: None)
    later = T0 + 100 + 2 * store.settings.lease_ttl
    taken = store.acquire_and_claim(INBOX, "fresh", later)
    assert taken is not None
    newer = runner_for(
        Remembering(lambda run: run.memory.write("/memories/b.md", "newer")), store
    ).run(taken, lambda: None, later, lambda: None)
    assert store.finish(taken, newer, later + 1) is True
    # The slow worker wakes after the takeover: its late finish overwrites nothing.
    assert store.finish(claim, effects, later + 2) is False
    assert [(v, t) for v, t, _ in store.memory_versions(INBOX, "/memories/b.md")] == [
        (1, "newer")
    ], "a fenced finish wrote memory"


def test_a_retried_run_writes_each_change_once(make_store: MakeStore) -> None:
    store = make_store()
    tries: list[int] = []

    def flaky(run: Run) -> None:
        tries.append(run.events[0].attempt)
        run.memory.write("/memories/order.md", "Order 1002, not 1001.")
        if len(tries) == 1:
            raise RuntimeError("killed after its write, before its finish")

    said(store, "Ev1", 1)
    clock = ManualClock(T0)
    loop = Worker(store=store, clock=clock, runner=runner_for(Remembering(flaky), store))
    loop.tick(T0)
    clock.now = T0 + 3600  # past the retry's backoff
    loop.tick(clock.now)
    assert tries == [1, 2]
    assert [(v, t) for v, t, _ in store.memory_versions(INBOX, "/memories/order.md")] == [
        (1, "Order 1002, not 1001.")
    ]


@pytest.mark.parametrize(
    ("command", "why"),
    [
        (lambda m: m.write("/etc/passwd", "x"), "outside /memories"),
        (lambda m: m.write("/memories/../x", "x"), "outside /memories"),
        (lambda m: m.write("/memories/a.md", "x" * 101), "bytes"),
        (lambda m: m.write("/memories/a.md", "a\x00b"), "NUL"),
        (lambda m: m.write("/memories/a.md", "token xoxb-123-456-abc"), "a Slack token"),
        (lambda m: m.write("/memories/a.md", "key sk_live_abc123"), "a Stripe key"),
        (lambda m: m.edit("/memories/kept.md", "nowhere", "x"), "not found"),
        (lambda m: m.edit("/memories/kept.md", "yes", "no"), "found 2 times"),
        (lambda m: m.insert("/memories/kept.md", 0, "rk_test_abc"), "a Stripe key"),
        (lambda m: m.delete("/memories/none.md"), "no document"),
        (lambda m: m.write("/memories/third.md", "x"), "keeps 2 documents"),
    ],
)
def test_a_command_that_does_not_succeed_says_why_and_writes_nothing(
    make_store: MakeStore, command: Callable[..., None], why: str
) -> None:
    store = make_store()
    with store._tx() as tx:
        write_memory(
            tx,
            [
                MemoryChange(INBOX, "/memories/kept.md", "yes and yes"),
                MemoryChange(INBOX, "/memories/other.md", "x"),
            ],
            T0,
            None,
        )
    said(store, "Ev1", 1)
    runner = runner_for(Remembering(lambda run: None), store)
    runner.services.memory_limits = MemoryLimits(doc_bytes=100, docs=2)
    claim = store.acquire_and_claim(INBOX, "w", T0)
    assert claim is not None
    from wakeful.core.runner import typed

    run = Run(INBOX, [typed(e) for e in claim.events], None, T0, runner.services)
    with pytest.raises(MemoryRefused, match=why):
        command(run.memory)
    assert run.effects().memory == []
    assert "xoxb-123" not in str(run.memory.changes)


def test_versions_a_newer_one_followed_are_pruned_after_the_retention_the_newest_kept(
    make_store: MakeStore,
) -> None:
    store = make_store()
    path = "/memories/prefs.md"
    for n, text in enumerate(["tea", "coffee", "water"]):
        with store._tx() as tx:
            write_memory(tx, [MemoryChange(INBOX, path, text)], T0 + n, None)
    later = T0 + store.settings.retention + 10
    store.prune(later)
    assert [(v, t) for v, t, _ in store.memory_versions(INBOX, path)] == [(3, "water")]
    store.prune(later + store.settings.retention)
    assert store.memory_read(INBOX, path) == "water", "the newest version is never pruned"


class SharingWriter(Remembering):
    shared_memory = "write"


def test_the_shared_store_is_read_only_unless_the_agent_says_write(make_store: MakeStore) -> None:
    store = make_store()
    seen: list[object] = []

    def share(run: Run) -> None:
        run.memory.shared.write("/memories/policy.md", "Refunds over $500 need two approvers.")
        seen.append(run.memory.shared.read("/memories/policy.md"))  # its own write, at once

    said(store, "Ev1", 1)
    runner = runner_for(SharingWriter(share), store)
    Worker(store=store, clock=ManualClock(T0), runner=runner).tick(T0)
    assert seen == ["Refunds over $500 need two approvers."]
    assert store.memory_read("workspace:T1", "/memories/policy.md") == seen[0]
    assert store.memory_docs(INBOX) == []  # the inbox's own memory is untouched

    def read_only(run: Run) -> None:  # another person, an agent with the default `read`
        seen.append(run.memory.shared.read("/memories/policy.md"))
        seen.append(hasattr(run.memory.shared, "write"))

    said(store, "Ev2", 2, user="U2", inbox="T1:U2")
    run_once_in(store, read_only)
    assert seen[1:] == ["Refunds over $500 need two approvers.", False]


def run_once_in(store: Store, act: Callable[[Run], None]) -> None:
    Worker(store=store, clock=ManualClock(T0), runner=runner_for(Remembering(act), store)).tick(T0)


def test_an_agent_declaring_another_shared_memory_is_refused_at_load() -> None:
    from wakeful.core.errors import InvalidInput
    from wakeful.core.runner import Declared

    class Odd:
        shared_memory = "everyone"

        def run(self, run: Run) -> None: ...

    with pytest.raises(InvalidInput, match="shared_memory must be 'read' or 'write'"):
        Declared.of(Odd())
