"""The outbox through the store and the Dispatcher: paced, merged and ordered, no lock held
across the network, crashes and failures (tests/support/outbox_rig.py)."""

from __future__ import annotations

import threading

from tests.conftest import T0
from tests.support.outbox_rig import (
    GAP,
    INBOX,
    MakeStore,
    Rig,
    request_with_prompt,
    statuses,
)
from wakeful.core.effects import Post
from wakeful.core.errors import PermanentSendError, TransientSendError
from wakeful.core.records import Ingested
from wakeful.core.rules.outbox import SEPARATOR, Part
from wakeful.core.store import Store, open_store
from wakeful.core.store.sqlite import SQLiteConnector

# -- pacing ------------------------------------------------------------------------------------


def test_normal_rows_go_as_one_merged_post_per_gap(make_store: MakeStore) -> None:
    rig = Rig(make_store(outbox_gap=GAP))
    rig.post("first", T0)
    assert rig.tick(T0) == 1  # nothing sent before: the first post goes at once
    rig.post("update 1", T0 + 600)
    assert rig.tick(T0 + 600) == 0
    rig.post("update 2", T0 + 1200)
    assert rig.tick(T0 + 1200) == 0
    rig.post("update 3", T0 + 1800)
    assert rig.tick(T0 + GAP - 1) == 0
    assert rig.sender.texts == ["first"]
    assert rig.tick(T0 + GAP) == 1
    assert rig.sender.texts == ["first", SEPARATOR.join(["update 1", "update 2", "update 3"])]
    assert statuses(rig.store) == ["sent"] * 4
    # the gap restarts at that send
    rig.post("update 4", T0 + GAP + 10)
    assert rig.tick(T0 + 2 * GAP - 1) == 0
    assert rig.tick(T0 + 2 * GAP) == 1
    assert rig.sender.texts[-1] == "update 4"
    assert len(rig.sender.calls) == 3


def test_an_urgent_row_goes_at_once_and_takes_held_rows_along_in_order(
    make_store: MakeStore,
) -> None:
    rig = Rig(make_store(outbox_gap=GAP))
    rig.post("hello", T0)
    rig.tick(T0)
    rig.post("held 1", T0 + 10)
    rig.post("held 2", T0 + 20)
    assert rig.tick(T0 + 20) == 0
    rig.post("URGENT", T0 + 30, urgent=True)
    assert rig.tick(T0 + 30) == 1
    assert rig.sender.texts == ["hello", SEPARATOR.join(["held 1", "held 2", "URGENT"])]
    assert statuses(rig.store) == ["sent"] * 4


def test_an_urgent_row_alone_skips_the_gap(make_store: MakeStore) -> None:
    rig = Rig(make_store(outbox_gap=GAP))
    rig.post("hello", T0)
    rig.tick(T0)
    rig.post("fire!", T0 + 1, urgent=True)
    assert rig.tick(T0 + 1) == 1
    assert rig.sender.texts == ["hello", "fire!"]


def test_a_normal_post_waits_only_for_a_gap_a_post_with_normal_rows_started(
    make_store: MakeStore,
) -> None:
    """docs/agents.md: an urgent reply alone starts no gap, so a normal post after it goes at
    once; an urgent reply that took held normal rows along counts as their post and restarts
    the gap, which the next normal post waits for."""
    rig = Rig(make_store(outbox_gap=GAP))
    rig.post("answer", T0, urgent=True)
    assert rig.tick(T0) == 1
    rig.post("report", T0 + 1)
    assert rig.tick(T0 + 1) == 1, "the urgent reply started no gap"
    assert rig.sender.texts == ["answer", "report"]
    rig.post("held", T0 + 2)
    assert rig.tick(T0 + 2) == 0, "the normal post started one"
    rig.post("answer 2", T0 + 3, urgent=True)
    assert rig.tick(T0 + 3) == 1
    assert rig.sender.texts[-1] == SEPARATOR.join(["held", "answer 2"])
    rig.post("later", T0 + 4)
    assert rig.tick(T0 + 3 + GAP - 1) == 0, "the urgent post carried a normal row: a new gap"
    assert rig.tick(T0 + 3 + GAP) == 1
    assert rig.sender.texts[-1] == "later"


def test_destinations_are_paced_independently(make_store: MakeStore) -> None:
    rig = Rig(make_store(outbox_gap=GAP))
    dests = [("C1", None), ("C1", "111.000"), ("C2", None)]
    for i, (ch, th) in enumerate(dests):
        rig.post(f"first {i}", T0, channel=ch, thread=th)
    assert rig.tick(T0) == 3  # three destinations, none sent before: all go
    for i, (ch, th) in enumerate(dests):
        rig.post(f"second {i}", T0 + 100, channel=ch, thread=th)
    assert rig.tick(T0 + 100) == 0
    rig.post("thread urgent", T0 + 200, channel="C1", thread="111.000", urgent=True)
    assert rig.tick(T0 + 200) == 1
    assert rig.sender.texts_to("C1", "111.000") == ["first 1", "second 1\n\nthread urgent"]
    assert rig.sender.texts_to("C1") == ["first 0"]
    assert rig.sender.texts_to("C2") == ["first 2"]
    # the thread's gap restarted at T0+200; the others still count from T0
    assert rig.tick(T0 + GAP) == 2
    assert rig.sender.texts_to("C1") == ["first 0", "second 0"]
    assert rig.sender.texts_to("C2") == ["first 2", "second 2"]
    rig.post("third 1", T0 + GAP + 1, channel="C1", thread="111.000")
    assert rig.tick(T0 + GAP + 199) == 0
    assert rig.tick(T0 + GAP + 200) == 1
    assert rig.sender.texts_to("C1", "111.000")[-1] == "third 1"


def test_updates_and_ephemerals_are_never_held(make_store: MakeStore) -> None:
    store = make_store(outbox_gap=GAP)
    request_with_prompt(store, Post("C1", "Refund order 1?"), [])
    rig = Rig(store)
    assert rig.tick(T0) == 1  # the prompt: the first post of the destination
    state = store.approval("req-1")
    assert state is not None and state.prompt_ts is not None
    rig.post("only you", T0 + 5, kind="ephemeral", user="U1")
    assert rig.tick(T0 + 5) == 1
    rig.post("Refund approved", T0 + 6, kind="update", ref="req-1")
    assert rig.tick(T0 + 6) == 1
    assert [(p.kind, p.text) for p in rig.sender.posted[1:]] == [
        ("ephemeral", "only you"),
        ("update", "Refund approved"),
    ]
    assert rig.sender.posted[2].target_ts == state.prompt_ts
    assert statuses(store) == ["sent"] * 3


# -- no lock across the network ----------------------------------------------------------------


def test_no_write_lock_is_held_while_the_sender_is_on_the_network(store: Store) -> None:
    if isinstance(store.db, SQLiteConnector):
        other: Store = open_store(
            store.db.path, settings=store.settings, kinds=store.kinds, busy_timeout_ms=200
        )
    else:
        other = store
    rig = Rig(store)
    results: list[Ingested | BaseException] = []

    def ingest_elsewhere(part: Part) -> None:
        def work() -> None:
            try:
                results.append(other.ingest("T1:U9", "slack", f"ev-{part.part_id}", {}, T0))
            except BaseException as exc:  # pragma: no cover - reported below
                results.append(exc)

        t = threading.Thread(target=work)
        t.start()
        t.join(timeout=10)
        assert not t.is_alive()

    rig.sender.during = ingest_elsewhere
    try:
        rig.post("hello", T0)
        rig.post("now", T0, channel="C2", urgent=True)
        assert rig.tick(T0) == 2
    finally:
        if other is not store:
            other.close()
    assert len(results) == 2
    assert all(isinstance(r, Ingested) and r.stored for r in results), results
    assert len(store.events("T1:U9")) == 2


# -- crashes and failures ----------------------------------------------------------------------


def test_a_batch_left_sending_by_a_crash_is_retried_after_send_timeout_with_its_id(
    make_store: MakeStore,
) -> None:
    store = make_store(send_timeout=60)
    store.post(INBOX, [Post("C1", "one"), Post("C1", "two")], T0)
    (batch,) = store.claim_batches(T0)  # then the dispatcher dies
    assert not batch.retry and all(not p.retry for p in batch.parts)
    assert statuses(store) == ["sending", "sending"]
    store.post(INBOX, [Post("C1", "newer", priority="urgent")], T0 + 10)
    assert store.claim_batches(T0 + 59) == []
    (again,) = store.claim_batches(T0 + 60)
    assert again.dispatch_id == batch.dispatch_id
    assert again.retry and all(p.retry for p in again.parts)
    assert [p.part_id for p in again.parts] == [p.part_id for p in batch.parts]
    assert [p.text for p in again.parts] == ["one" + SEPARATOR + "two"]
    assert store.claim_batches(T0 + 61) == []  # in flight again
    # delivered through a dispatcher: the retried batch first, then the newer row
    rig = Rig(store)
    assert rig.tick(T0 + 120) == 1
    assert rig.sender.calls[0].retry and rig.sender.calls[0].dispatch_id == batch.dispatch_id
    assert rig.tick(T0 + 121) == 1
    assert rig.sender.texts == ["one\n\ntwo", "newer"]
    assert statuses(store) == ["sent"] * 3


def test_a_retried_part_that_already_went_out_is_not_posted_twice(store: Store) -> None:
    rig = Rig(store)
    rig.post("once only", T0)
    rig.sender.after = lambda part: TransientSendError("timeout reading response")
    assert rig.tick(T0) == 0
    rig.sender.after = lambda part: None
    assert rig.tick(T0 + store.settings.send_timeout) == 1
    assert [c.retry for c in rig.sender.calls] == [False, True]
    assert rig.sender.texts == ["once only"]
    assert rig.sender.duplicates == []
    assert statuses(store) == ["sent"]


def test_a_transient_failure_keeps_rows_and_retries_after_retry_after_in_order(
    store: Store,
) -> None:
    rig = Rig(store)
    rig.post("a", T0)
    rig.post("b", T0)
    rig.sender.fail = lambda part: TransientSendError("ratelimited", retry_after=30)
    assert rig.tick(T0) == 0
    assert statuses(store) == ["sending", "sending"]
    assert all(r.error and "ratelimited" in r.error for r in store.outbox(inbox=INBOX))
    first_dispatch = rig.sender.calls[0].dispatch_id
    rig.sender.fail = lambda part: None
    rig.post("c", T0 + 5, urgent=True)
    rig.post("d", T0 + 6, urgent=True)
    # The clock counts floored whole seconds, so the dispatcher adds one: never early.
    for t in (T0 + 1, T0 + 10, T0 + 29, T0 + 30):
        assert rig.tick(t) == 0
    assert len(rig.sender.calls) == 1
    assert rig.tick(T0 + 31) == 1
    retry = rig.sender.calls[1]
    assert retry.retry and retry.dispatch_id == first_dispatch and retry.text == "a\n\nb"
    assert rig.tick(T0 + 32) == 1
    assert rig.sender.texts == ["a\n\nb", "c\n\nd"]
    assert statuses(store) == ["sent"] * 4


def test_a_transient_failure_mid_batch_keeps_what_went_out(store: Store) -> None:
    rig = Rig(store)
    rig.post("p1", T0)
    rig.post("e1", T0, kind="ephemeral", user="U1")
    rig.post("p2", T0)
    rig.sender.fail = lambda part: (
        TransientSendError("503", retry_after=5) if part.kind == "ephemeral" else None
    )
    assert rig.tick(T0) == 1
    assert statuses(store) == ["sent", "sending", "sending"]
    rig.sender.fail = lambda part: None
    assert rig.tick(T0 + 5) == 0
    assert rig.tick(T0 + 6) == 2
    assert rig.sender.texts == ["p1", "e1", "p2"]
    assert statuses(store) == ["sent"] * 3


def test_a_permanent_failure_parks_rows_as_dead_letters_that_can_be_requeued(
    store: Store,
) -> None:
    rig = Rig(store)
    rig.post("to nowhere 1", T0, channel="C-gone")
    rig.post("to nowhere 2", T0, channel="C-gone")
    rig.post("fine", T0, channel="C1")
    rig.sender.fail = lambda part: (
        PermanentSendError("channel_not_found") if part.channel == "C-gone" else None
    )
    assert rig.tick(T0) == 1
    assert rig.sender.texts == ["fine"]
    rows = store.outbox(inbox=INBOX)
    assert [(r.channel, r.status) for r in rows] == [
        ("C-gone", "failed"),
        ("C-gone", "failed"),
        ("C1", "sent"),
    ]
    dead = store.dead_letters().outbox
    assert [r.text for r in dead] == ["to nowhere 1", "to nowhere 2"]
    assert all(r.error and "channel_not_found" in r.error for r in dead)
    assert store.outbox(status="failed") == dead
    # failed rows stay parked: later passes do not send them
    assert rig.tick(T0 + 10 * GAP) == 0
    rig.sender.fail = lambda part: None
    for r in dead:
        assert store.requeue_outbox(r.id, T0 + 10 * GAP)
    assert not store.requeue_outbox(dead[0].id, T0 + 10 * GAP)  # no longer failed
    assert store.dead_letters().outbox == []
    assert rig.tick(T0 + 10 * GAP + 1) == 1
    assert rig.sender.texts == ["fine", "to nowhere 1\n\nto nowhere 2"]
    assert statuses(store) == ["sent"] * 3
