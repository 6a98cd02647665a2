"""Lease, claim and fenced finish through the store."""

from __future__ import annotations

import pytest

from tests.conftest import T0, MakeStore
from tests.support.approvals import ApprovalRequest
from wakeful.core.effects import Effects, Post, Timer
from wakeful.core.errors import LeaseLost
from wakeful.core.store import Store, claims
from wakeful.core.store.claims import TOO_MANY_ATTEMPTS

INBOX = "T1:U1"


def add(store: Store, *ids: str, at: int = T0) -> None:
    for i in ids:
        store.ingest(INBOX, "slack", i, {"text": i}, at)


def names(claim: object) -> list[str]:
    return [e.source_id for e in claim.events]  # type: ignore[attr-defined]


# -- lease -----------------------------------------------------------------------------------


def test_lease_acquire_renew_takeover_refuse(store: Store) -> None:
    assert store.acquire(INBOX, "A", T0) == 1
    assert store.acquire(INBOX, "A", T0 + 100) == 1  # renewal keeps the generation
    assert store.acquire(INBOX, "B", T0 + 219) is None  # A's renewed lease runs to T0+220
    assert store.acquire(INBOX, "B", T0 + 220) == 2  # expired: takeover
    assert store.acquire(INBOX, "B", T0 + 340) == 3  # expired again: even B itself gets gen+1


def test_leases_of_different_inboxes_are_independent(store: Store) -> None:
    assert store.acquire("T1:U1", "A", T0) == 1
    assert store.acquire("T1:U2", "B", T0) == 1


def test_renew_extends_only_a_live_lease_of_the_same_generation(store: Store) -> None:
    gen = store.acquire(INBOX, "A", T0)
    assert gen == 1
    assert store.renew(INBOX, "A", 1, T0 + 100)
    assert store.acquire(INBOX, "B", T0 + 200) is None  # renewed until T0+220
    assert not store.renew(INBOX, "A", 1, T0 + 220)  # lapsed: a heartbeat never revives
    assert not store.renew(INBOX, "B", 1, T0 + 100)
    lease = store.inbox_view(INBOX, T0).lease
    assert lease is not None and lease["expires_at"] == T0 + 220


def test_release_keeps_the_generation_so_the_next_holder_gets_a_new_one(store: Store) -> None:
    assert store.acquire(INBOX, "A", T0) == 1
    assert store.release(INBOX, "A", 1, T0 + 5)
    assert store.acquire(INBOX, "A", T0 + 5) == 2
    assert not store.release(INBOX, "B", 2, T0 + 6)


# -- claim -----------------------------------------------------------------------------------


def test_claim_requires_the_lease(store: Store) -> None:
    add(store, "e1")
    store.acquire(INBOX, "A", T0)
    with pytest.raises(LeaseLost):
        store.claim(INBOX, "B", 1, T0)
    with pytest.raises(LeaseLost):
        store.claim(INBOX, "A", 2, T0)
    with pytest.raises(LeaseLost):
        store.claim(INBOX, "A", 1, T0 + 120)
    assert store.events(INBOX)[0].status == "pending"


def test_claim_takes_all_pending_in_arrival_order_up_to_the_cap(make_store: MakeStore) -> None:
    store = make_store(claim_cap=3)
    add(store, "e1", "e2", "e3", "e4")
    claim = store.acquire_and_claim(INBOX, "A", T0)
    assert claim is not None and names(claim) == ["e1", "e2", "e3"]
    assert [e.attempts for e in claim.events] == [1, 1, 1]
    store.finish(claim, Effects(), T0)
    assert names(store.claim(INBOX, "A", claim.gen, T0)) == ["e4"]


def test_attempts_are_counted_at_claim_time(store: Store) -> None:
    add(store, "e1")
    claim = store.acquire_and_claim(INBOX, "A", T0)
    assert claim is not None
    stored = store.events(INBOX)[0]
    assert (stored.status, stored.attempts) == ("running", 1)


def test_rows_left_running_by_an_older_generation_go_back_and_are_claimed_alone(
    store: Store,
) -> None:
    add(store, "e1", "e2")
    first = store.acquire_and_claim(INBOX, "A", T0)
    assert first is not None and names(first) == ["e1", "e2"]
    second = store.acquire_and_claim(INBOX, "B", T0 + 121)
    assert second is not None and second.gen == 2
    assert names(second) == ["e1"]  # retried: alone
    assert second.events[0].attempts == 2
    statuses = {e.source_id: e.status for e in store.events(INBOX)}
    assert statuses == {"e1": "running", "e2": "pending"}


def test_a_claim_of_many_inboxes_leaves_a_retried_event_for_a_claim_of_its_own(
    store: Store,
) -> None:
    """A worker killed while it held a group spent one attempt of each event in it: none of
    them may be claimed beside other inboxes again, or a poison event that kills its process
    would spend the same innocent attempts at every death, until they were dead too."""
    other = "T1:U2"
    add(store, "e1")
    store.ingest(other, "slack", "f1", {"text": "f1"}, T0)
    assert store.claim_inboxes([INBOX], "A", T0)  # A dies holding it
    later = T0 + store.settings.lease_ttl + 1
    by_inbox = {c.inbox: c for c in store.claim_inboxes([INBOX, other], "B", later)}
    assert names(by_inbox[other]) == ["f1"]
    left = by_inbox[INBOX]
    assert left.events == () and left.retry_next
    e1 = store.events(INBOX)[0]
    assert (e1.status, e1.attempts) == ("pending", 1)
    alone = store.acquire_and_claim(INBOX, "C", later)  # B let the lease lapse at once
    assert alone is not None and names(alone) == ["e1"] and alone.events[0].attempts == 2
    assert not alone.retry_next


def test_a_finish_leaves_a_retried_event_next_for_a_claim_of_its_own(store: Store) -> None:
    add(store, "flaky")
    claim = store.acquire_and_claim(INBOX, "A", T0)
    assert claim is not None
    assert store.finish(claim, Effects(failed={claim.events[0].id: "boom"}), T0)
    add(store, "fresh", at=T0 + 1)
    fresh = store.claim(INBOX, "A", claim.gen, T0 + 1)  # the retry waits out its backoff
    assert names(fresh) == ["fresh"]
    due = T0 + store.settings.backoff(1) + 1
    finished, following = store.finish_and_claim(fresh, Effects(), due)
    assert finished and following is not None
    assert following.events == () and following.retry_next
    assert store.events(INBOX)[0].status == "pending"
    retry = store.acquire_and_claim(INBOX, "B", due)  # the lease lapsed with the finish
    assert retry is not None and names(retry) == ["flaky"]


def test_events_reaching_max_attempts_become_dead(make_store: MakeStore) -> None:
    store = make_store(max_attempts=2)
    add(store, "bad")
    t = T0
    for _ in range(2):
        claim = store.acquire_and_claim(INBOX, f"W{t}", t)
        assert claim is not None and names(claim) == ["bad"]
        t += 121  # crash: the lease lapses
    claim = store.acquire_and_claim(INBOX, "W-last", t)
    assert claim is not None and claim.events == ()
    dead = store.events(INBOX)[0]
    assert (dead.status, dead.attempts, dead.error) == ("dead", 2, TOO_MANY_ATTEMPTS)
    assert [e.source_id for e in store.dead_letters().events] == ["bad"]


def test_a_retry_waits_for_its_backoff_without_blocking_fresh_events(store: Store) -> None:
    add(store, "flaky")
    claim = store.acquire_and_claim(INBOX, "A", T0)
    assert claim is not None
    assert store.finish(claim, Effects(failed={claim.events[0].id: "boom"}), T0 + 1)
    failed = store.events(INBOX)[0]
    assert (failed.status, failed.error) == ("pending", "boom")
    add(store, "fresh", at=T0 + 2)
    # Backoff after the first attempt is 10 s: the fresh event goes first.
    assert names(store.claim(INBOX, "A", claim.gen, T0 + 2)) == ["fresh"]
    store.finish(store.claim(INBOX, "A", claim.gen, T0 + 2), Effects(), T0 + 2)
    assert [i for i, _ in store.ready_list(T0 + 5).inboxes] == []
    assert names(store.claim(INBOX, "A", claim.gen, T0 + 5)) == []
    assert [i for i, _ in store.ready_list(T0 + 11).inboxes] == [INBOX] or store.inbox_view(
        INBOX, T0
    ).lease is not None
    retry = store.claim(INBOX, "A", claim.gen, T0 + 11)
    assert names(retry) == ["flaky"] and retry.events[0].attempts == 2


def test_backoff_doubles_between_failed_attempts(make_store: MakeStore) -> None:
    store = make_store(max_attempts=10, lease_ttl=100_000)
    add(store, "flaky")
    gen = store.acquire(INBOX, "A", T0)
    assert gen is not None
    t, waits = T0, []
    for _ in range(4):
        claim = store.claim(INBOX, "A", gen, t)
        assert names(claim) == ["flaky"]
        assert store.finish(claim, Effects(failed={claim.events[0].id: "again"}), t)
        wait = 0
        while not [i for i, _ in store.ready_list(t + wait).inboxes] and wait < 1000:
            store.release(INBOX, "A", gen, t)  # let ready_inboxes see the inbox
            wait += 1
        waits.append(wait)
        gen = store.acquire(INBOX, "A", t + wait)
        assert gen is not None
        t += wait
    assert waits == [10, 20, 40, 80]


def test_ready_inboxes_lists_claimable_work_only(store: Store) -> None:
    add(store, "e1")
    store.ingest("T1:U2", "slack", "x", {}, T0)
    assert set([i for i, _ in store.ready_list(T0).inboxes]) == {INBOX, "T1:U2"}
    store.acquire(INBOX, "A", T0)
    assert [i for i, _ in store.ready_list(T0).inboxes] == ["T1:U2"]
    assert set([i for i, _ in store.ready_list(T0 + 120).inboxes]) == {
        INBOX,
        "T1:U2",
    }  # lease lapsed


# -- finish ----------------------------------------------------------------------------------


def effects_of_everything() -> Effects:
    effects = Effects(
        messages=[Post(channel="D1", text="reply", priority="urgent")],
        approvals=[
            ApprovalRequest(
                id="r1",
                tool="refund_order",
                args={"order_id": "7"},
                requester="U1",
                deadline=T0 + 3600,
            )
        ],
        timers=[Timer.once("ping", T0 + 60, {"say": "hi"})],
    )
    effects.set_session({"turns": 1})
    return effects


def test_finish_writes_every_effect_and_marks_events_done(store: Store) -> None:
    add(store, "e1")
    claim = store.acquire_and_claim(INBOX, "A", T0)
    assert claim is not None
    assert store.finish(claim, effects_of_everything(), T0 + 1)
    assert [e.status for e in store.events(INBOX)] == ["done"]
    assert [r.text for r in store.outbox(inbox=INBOX)] == [
        "reply",
        "Approval needed: refund_order (request r1)",  # no approval without its prompt
    ]
    assert store.session(INBOX) == {"turns": 1}
    assert {t.id for t in store.timers(INBOX)} == {f"{INBOX}/ping", f"{INBOX}/approval:r1"}
    approval = store.approval("r1")
    assert approval is not None and approval.answer is None


def _assert_nothing_written(store: Store) -> None:
    assert store.outbox(inbox=INBOX) == []
    assert store.session(INBOX) is None
    assert store.timers(INBOX) == []
    assert store.approval("r1") is None


def test_finish_by_a_stale_generation_is_refused_and_changes_nothing(store: Store) -> None:
    add(store, "e1")
    old = store.acquire_and_claim(INBOX, "A", T0)
    assert old is not None
    new = store.acquire_and_claim(INBOX, "B", T0 + 121)
    assert new is not None
    assert not store.finish(old, effects_of_everything(), T0 + 122)
    _assert_nothing_written(store)
    assert store.events(INBOX)[0].status == "running"
    assert store.finish(new, Effects(), T0 + 123)


def test_finish_after_the_lease_expired_is_refused_even_with_no_successor(store: Store) -> None:
    add(store, "e1")
    claim = store.acquire_and_claim(INBOX, "A", T0)
    assert claim is not None
    assert not store.finish(claim, effects_of_everything(), T0 + 120)
    _assert_nothing_written(store)


def test_finish_is_refused_when_an_event_is_no_longer_running_under_the_generation(
    store: Store,
) -> None:
    add(store, "e1")
    claim = store.acquire_and_claim(INBOX, "A", T0)
    assert claim is not None
    assert store.finish(claim, Effects(), T0 + 1)
    # The same holder, same generation, tries to finish the same claim twice.
    assert not store.finish(claim, effects_of_everything(), T0 + 2)
    _assert_nothing_written(store)


def test_finish_is_all_or_nothing_when_a_write_fails_midway(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    add(store, "e1")
    claim = store.acquire_and_claim(INBOX, "A", T0)
    assert claim is not None
    original = claims.write_effects

    def failing(*args):  # type: ignore[no-untyped-def]
        original(*args)
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(claims, "write_effects", failing)
    with pytest.raises(RuntimeError):
        store.finish(claim, effects_of_everything(), T0 + 1)
    _assert_nothing_written(store)
    assert store.events(INBOX)[0].status == "running"


def test_finish_with_release_lets_the_lease_lapse(store: Store) -> None:
    add(store, "e1")
    claim = store.acquire_and_claim(INBOX, "A", T0)
    assert claim is not None
    assert store.finish(claim, Effects(), T0 + 1, release=True)
    assert store.acquire(INBOX, "B", T0 + 1) == 2


def test_dead_letters_are_listed_and_requeued_with_attempts_reset(make_store: MakeStore) -> None:
    store = make_store(max_attempts=1)
    add(store, "bad")
    assert store.acquire_and_claim(INBOX, "A", T0) is not None
    assert store.acquire_and_claim(INBOX, "B", T0 + 121) is not None  # buries it
    dead = store.dead_letters().events
    assert [(e.source_id, e.attempts, e.error) for e in dead] == [("bad", 1, TOO_MANY_ATTEMPTS)]
    assert store.requeue_event(dead[0].id, T0 + 200)
    assert not store.requeue_event(dead[0].id, T0 + 200)  # only dead events
    again = store.events(INBOX)[0]
    assert (again.status, again.attempts, again.error) == ("pending", 0, None)
    assert store.dead_letters().events == []


def test_the_run_log_orders_every_finished_run_and_has_no_overlaps(store: Store) -> None:
    from wakeful.devtools.audit import overlapping_runs, runs

    add(store, "e1", "e2")
    a = store.acquire_and_claim(INBOX, "A", T0)
    assert a is not None
    b = store.acquire_and_claim(INBOX, "B", T0 + 121)  # A stalled; B takes over
    assert b is not None
    assert store.finish(b, Effects(), T0 + 122)
    assert not store.finish(a, Effects(), T0 + 123)  # fenced: no run record for A
    logged = runs(store, INBOX)
    assert [(r.holder, r.gen, r.events) for r in logged] == [("B", 2, tuple(b.ids))]
    assert logged[0].claim_seq < logged[0].finish_seq
    assert overlapping_runs(runs(store)) == []


def test_overlap_detection_flags_a_run_claimed_before_the_previous_finished() -> None:
    from wakeful.core.records import RunRecord
    from wakeful.devtools.audit import overlapping_runs

    first = RunRecord(
        INBOX, "A", 1, claim_seq=1, finish_seq=4, events=(1,), claimed_at=0, finished_at=0
    )
    second = RunRecord(
        INBOX, "B", 2, claim_seq=2, finish_seq=3, events=(1,), claimed_at=0, finished_at=0
    )
    after = RunRecord(
        INBOX, "B", 2, claim_seq=5, finish_seq=6, events=(2,), claimed_at=0, finished_at=0
    )
    assert overlapping_runs([second, first]) == [(first, second)]
    assert overlapping_runs([first, after]) == []


def test_the_next_batch_a_finish_claims_gets_a_full_lease(make_store: MakeStore) -> None:
    store = make_store(claim_cap=1)
    add(store, "e1", "e2")
    first = store.acquire_and_claim(INBOX, "A", T0)
    assert first is not None and names(first) == ["e1"]
    finished, following = store.finish_and_claim(first, Effects(), T0 + 100)
    assert finished and following is not None and names(following) == ["e2"]
    lease = store.inbox_view(INBOX, T0).lease
    assert lease is not None and lease["expires_at"] == T0 + 100 + store.settings.lease_ttl
    # Its run may wait its turn behind other inboxes' runs and still finish.
    assert store.finish(following, Effects(), T0 + 200)


# -- giving an attempt back (the store, not the run, failed) --------------------------------


def test_give_back_returns_the_attempt_and_lets_the_lease_go(store: Store) -> None:
    add(store, "e1", "e2")
    claim = store.acquire_and_claim(INBOX, "A", T0)
    assert claim is not None
    assert store.give_back(claim, T0 + 5) == 2
    assert [(e.status, e.attempts) for e in store.events(INBOX)] == [("pending", 0)] * 2
    again = store.acquire_and_claim(INBOX, "B", T0 + 5)  # at once: no lease, no backoff
    assert again is not None and names(again) == ["e1", "e2"]
    assert [e.attempts for e in again.events] == [1, 1]
    assert not store.finish(claim, Effects(), T0 + 6)  # the old claim stays fenced


def test_give_back_revives_what_a_takeover_buried_while_the_store_refused_the_run(
    make_store: MakeStore,
) -> None:
    store = make_store(max_attempts=1)
    add(store, "e1")
    claim = store.acquire_and_claim(INBOX, "A", T0)
    assert claim is not None
    assert store.acquire_and_claim(INBOX, "B", T0 + 121) is not None  # settles: dead
    assert store.events(INBOX)[0].status == "dead"
    assert store.give_back(claim, T0 + 130) == 1
    ev = store.events(INBOX)[0]
    assert (ev.status, ev.attempts, ev.error) == ("pending", 0, None)
    assert store.dead_letters().events == []


def test_give_back_never_touches_a_newer_claim(store: Store) -> None:
    add(store, "e1")
    claim = store.acquire_and_claim(INBOX, "A", T0)
    assert claim is not None
    newer = store.acquire_and_claim(INBOX, "B", T0 + 121)
    assert newer is not None and names(newer) == ["e1"]
    assert store.give_back(claim, T0 + 130) == 0
    ev = store.events(INBOX)[0]
    assert (ev.status, ev.attempts) == ("running", 2)
    assert store.finish(newer, Effects(), T0 + 131)


def test_give_back_after_a_finish_that_did_commit_keeps_its_outcome(make_store: MakeStore) -> None:
    store = make_store(claim_cap=1)
    add(store, "e1", "e2")
    claim = store.acquire_and_claim(INBOX, "A", T0)
    assert claim is not None
    failed = Effects(failed={claim.events[0].id: "boom"})
    finished, following = store.finish_and_claim(claim, failed, T0 + 1)
    assert finished and following is not None and names(following) == ["e2"]
    # The commit's answer was lost: the worker gives the claim back. The failure it recorded
    # stands; the next batch that finish claimed, never run, goes back with its attempt.
    assert store.give_back(claim, T0 + 2) == 1
    status = {e.source_id: (e.status, e.attempts, e.error) for e in store.events(INBOX)}
    assert status == {"e1": ("pending", 1, "boom"), "e2": ("pending", 0, None)}
