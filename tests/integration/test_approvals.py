"""Approvals: one answer stands, whether it comes from a person or from the expiry."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import T0
from tests.support.approvals import ApprovalRequest
from wakeful.core.effects import Effects, Post
from wakeful.core.errors import InvalidInput
from wakeful.core.records import Answered, StoredEvent
from wakeful.core.store import Store

HOUR = 3600
WINDOW = 4 * HOUR
INBOX = "T1:U7"

MakeStore = Callable[..., Store]


def request(
    store: Store,
    rid: str,
    now: int = T0,
    *,
    inbox: str = INBOX,
    deadline: int | None = None,
    approvers: tuple[str, ...] = (),
    prompt: Post | None = None,
    args: Any = None,
) -> ApprovalRequest:
    """A run asks for approval of a tool call and finishes."""
    req = ApprovalRequest(
        id=rid,
        tool="refund_order",
        args={"order_id": rid, "amount": 42} if args is None else args,
        requester="U7",
        deadline=now + WINDOW if deadline is None else deadline,
        approvers=approvers,
        prompt=prompt,
    )
    n = len(store.events(inbox))
    store.ingest(inbox, "slack", f"ask-{rid}-{n}", {"text": "refund please"}, now)
    claim = store.acquire_and_claim(inbox, "W", now)
    assert claim is not None and claim.events
    assert store.finish(claim, Effects(approvals=[req]), now, release=True)
    return req


def answer_events(store: Store, inbox: str = INBOX) -> list[StoredEvent]:
    return [e for e in store.events(inbox) if e.source == "approval"]


# -- answering ---------------------------------------------------------------------------------


def test_request_is_stored_unanswered(store: Store) -> None:
    request(store, "r1", approvers=("U8",))
    state = store.approval("r1")
    assert state is not None
    assert (state.inbox, state.tool, state.requester) == (INBOX, "refund_order", "U7")
    assert state.args == {"order_id": "r1", "amount": 42}
    assert state.approvers == ("U8",)
    assert (state.deadline, state.created_at) == (T0 + WINDOW, T0)
    assert state.answer is None and state.answered_by is None and state.answered_at is None
    assert [a.id for a in store.approvals(INBOX)] == ["r1"]
    assert answer_events(store) == []


@pytest.mark.parametrize("value", ["yes", "no"])
def test_answer_returns_and_stores_yes_or_no(store: Store, value: str) -> None:
    request(store, "r1")
    assert store.answer("r1", value, "U7", T0 + 60).outcome == value
    state = store.approval("r1")
    assert state is not None
    assert (state.answer, state.answered_by, state.answered_at) == (value, "U7", T0 + 60)
    (ev,) = answer_events(store)
    assert (ev.inbox, ev.source, ev.source_id, ev.status) == (INBOX, "approval", "r1", "pending")


def test_answer_event_payload_carries_answer_user_tool_and_args(store: Store) -> None:
    args = {"order_id": "A-17", "amount": 12.5, "lines": [1, 2], "note": "ünïcode"}
    request(store, "r1", args=args, approvers=("U8",))
    store.answer("r1", "yes", "U8", T0 + 5)
    (ev,) = answer_events(store)
    assert ev.payload["answer"] == "yes"
    assert ev.payload["user"] == "U8"
    assert ev.payload["tool"] == "refund_order"
    assert ev.payload["args"] == args
    assert ev.payload["approval"] == "r1"


def test_the_answer_wakes_the_inbox(store: Store) -> None:
    request(store, "r1")
    assert INBOX not in [i for i, _ in store.ready_list(T0 + 5).inboxes]
    store.answer("r1", "yes", "U7", T0 + 5)
    assert INBOX in [i for i, _ in store.ready_list(T0 + 5).inboxes]


@pytest.mark.parametrize(("first", "second"), [("yes", "no"), ("no", "yes"), ("yes", "yes")])
def test_a_second_tap_returns_the_first_answer(store: Store, first: str, second: str) -> None:
    request(store, "r1", approvers=("U8",))
    assert store.answer("r1", first, "U7", T0 + 10) == Answered(first, stored=True)
    assert store.answer("r1", second, "U7", T0 + 20) == Answered(first, stored=False)
    assert store.answer("r1", second, "U8", T0 + 30) == Answered(first, stored=False)
    state = store.approval("r1")
    assert state is not None
    assert (state.answer, state.answered_by, state.answered_at) == (first, "U7", T0 + 10)
    assert len(answer_events(store)) == 1


def test_a_forbidden_user_stores_nothing(store: Store) -> None:
    request(store, "r1", approvers=("U8",))
    assert store.answer("r1", "yes", "U666", T0 + 10) == Answered("forbidden", stored=False)
    assert answer_events(store) == []
    state = store.approval("r1")
    assert state is not None and state.answer is None
    # and the rightful answer still stands afterwards
    assert store.answer("r1", "no", "U7", T0 + 20).outcome == "no"
    assert store.answer("r1", "yes", "U666", T0 + 30).outcome == "forbidden"
    assert len(answer_events(store)) == 1


def test_an_approver_listed_on_the_request_may_answer(store: Store) -> None:
    request(store, "r1", approvers=("U8", "U9"))
    assert store.answer("r1", "yes", "U9", T0 + 10).outcome == "yes"
    state = store.approval("r1")
    assert state is not None and (state.answer, state.answered_by) == ("yes", "U9")


def test_the_approvers_that_count_are_the_ones_configured_when_the_answer_arrives(
    store: Store,
) -> None:
    # U8 was an approver when the refund was asked for, then removed from WAKEFUL_APPROVERS:
    # their click no longer counts. U9, added since, may answer.
    request(store, "r1", approvers=("U8",))
    assert store.answer("r1", "yes", "U8", T0 + 10, approvers=("U9",)).outcome == "forbidden"
    assert answer_events(store) == []
    state = store.approval("r1")
    assert state is not None and state.answer is None
    assert store.answer("r1", "no", "U9", T0 + 20, approvers=("U9",)).outcome == "no"
    state = store.approval("r1")
    assert state is not None and (state.answer, state.answered_by) == ("no", "U9")
    # The requester keeps their say whatever the list is.
    request(store, "r2", approvers=("U8",))
    assert store.answer("r2", "yes", "U7", T0 + 30, approvers=()).outcome == "yes"
    with pytest.raises(InvalidInput, match="sequence of user ids"):
        store.answer("r2", "yes", "U9", T0 + 40, approvers="U9")


def test_never_requested_is_unknown_and_stores_nothing(store: Store) -> None:
    assert store.answer("nope", "yes", "U7", T0).outcome == "unknown"
    assert store.approval("nope") is None
    assert store.event_by_key("approval", "nope") is None


@pytest.mark.parametrize("value", ["maybe", "YES", "", "expired", None, 1])
def test_an_invalid_answer_value_is_invalid_input(store: Store, value: Any) -> None:
    request(store, "r1")
    with pytest.raises(InvalidInput):
        store.answer("r1", value, "U7", T0 + 10)
    state = store.approval("r1")
    assert state is not None and state.answer is None
    assert answer_events(store) == []


def test_an_answer_without_request_id_or_user_is_invalid_input(store: Store) -> None:
    request(store, "r1")
    with pytest.raises(InvalidInput):
        store.answer("", "yes", "U7", T0 + 10)
    with pytest.raises(InvalidInput):
        store.answer("r1", "yes", "", T0 + 10)
    assert answer_events(store) == []


# -- expiry ------------------------------------------------------------------------------------


def test_an_answer_after_the_deadline_without_a_scheduler_pass_is_expired_and_stored(
    store: Store,
) -> None:
    request(store, "r1")
    assert store.answer("r1", "yes", "U7", T0 + WINDOW).outcome == "expired"
    state = store.approval("r1")
    assert state is not None and state.answer == "expired"
    (ev,) = answer_events(store)
    assert ev.payload["answer"] == "expired"
    assert ev.source_id == "r1"
    # the expiry timer's own pass then adds nothing
    passed = store.fire_due_timers(T0 + WINDOW + 60)
    assert passed.expired_approvals == 0
    assert len(answer_events(store)) == 1
    assert store.answer("r1", "no", "U7", T0 + WINDOW + 61).outcome == "expired"


def test_an_answer_one_second_before_the_deadline_stands(store: Store) -> None:
    request(store, "r1")
    assert store.answer("r1", "yes", "U7", T0 + WINDOW - 1).outcome == "yes"
    store.fire_due_timers(T0 + WINDOW)
    state = store.approval("r1")
    assert state is not None and state.answer == "yes"
    assert len(answer_events(store)) == 1


def test_the_expiry_pass_writes_expired_into_the_inbox(store: Store) -> None:
    request(store, "r1")
    before = store.fire_due_timers(T0 + WINDOW - 1)
    assert before.expired_approvals == 0 and answer_events(store) == []
    passed = store.fire_due_timers(T0 + WINDOW)
    assert passed.expired_approvals == 1
    (ev,) = answer_events(store)
    assert (ev.inbox, ev.source, ev.source_id) == (INBOX, "approval", "r1")
    assert ev.payload["answer"] == "expired"
    assert ev.payload["user"] is None
    assert ev.payload["tool"] == "refund_order"
    assert ev.payload["args"] == {"order_id": "r1", "amount": 42}
    state = store.approval("r1")
    assert state is not None and state.answer == "expired"
    assert store.timers(INBOX) == []  # the expiry timer is gone
    again = store.fire_due_timers(T0 + WINDOW + HOUR)
    assert again.expired_approvals == 0
    assert len(answer_events(store)) == 1


def test_a_yes_after_the_expiry_is_expired(store: Store) -> None:
    request(store, "r1")
    store.fire_due_timers(T0 + WINDOW + 5)
    assert store.answer("r1", "yes", "U7", T0 + WINDOW + 10).outcome == "expired"
    state = store.approval("r1")
    assert state is not None and (state.answer, state.answered_by) == ("expired", None)
    assert len(answer_events(store)) == 1


def test_expiry_pass_after_an_answer_leaves_the_answer(store: Store) -> None:
    request(store, "r1")
    store.answer("r1", "no", "U7", T0 + 10)
    passed = store.fire_due_timers(T0 + WINDOW + 10)
    assert passed.expired_approvals == 0
    state = store.approval("r1")
    assert state is not None and state.answer == "no"
    assert [e.payload["answer"] for e in answer_events(store)] == ["no"]


def test_the_same_approval_requested_twice_stays_one_request(store: Store) -> None:
    request(store, "r1", now=T0)
    request(store, "r1", now=T0 + 100)  # a retried run asks again
    assert [a.id for a in store.approvals(INBOX)] == ["r1"]
    state = store.approval("r1")
    assert state is not None and state.created_at == T0 and state.deadline == T0 + WINDOW
    expiry = [t for t in store.timers(INBOX) if "approval" in t.id]
    assert len(expiry) == 1
    store.fire_due_timers(T0 + WINDOW + 100)
    assert len(answer_events(store)) == 1


def test_a_re_requested_approval_queues_its_prompt_once(store: Store) -> None:
    prompt = Post(channel="C7", text="Refund order r1 for 42?")
    request(store, "r1", now=T0, prompt=prompt)
    request(store, "r1", now=T0 + 100, prompt=prompt)  # a retried run asks again
    prompts = [r for r in store.outbox(inbox=INBOX) if r.ref == "r1"]
    assert len(prompts) == 1, "one request must show one prompt, not one per retried run"


def test_answers_of_different_requests_are_independent(store: Store) -> None:
    request(store, "r1")
    request(store, "r2")
    assert store.answer("r1", "yes", "U7", T0 + 1).outcome == "yes"
    assert store.answer("r2", "no", "U7", T0 + 2).outcome == "no"
    assert {e.source_id: e.payload["answer"] for e in answer_events(store)} == {
        "r1": "yes",
        "r2": "no",
    }


# -- one answer per request, whatever the order ------------------------------------------------

USERS = ["U7", "U8", "U666"]  # requester, approver, stranger

step = st.one_of(
    st.tuples(
        st.just("answer"),
        st.sampled_from(["a", "b", "c"]),
        st.sampled_from(["yes", "no"]),
        st.sampled_from(USERS),
        st.integers(0, 2 * WINDOW),
    ),
    st.tuples(st.just("tick"), st.just(""), st.just(""), st.just(""), st.integers(0, 2 * WINDOW)),
)


@given(steps=st.lists(step, min_size=1, max_size=25), monotonic=st.booleans())
@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
def test_exactly_one_answer_event_per_request_whatever_the_order(
    make_store: MakeStore, steps: list[tuple[str, str, str, str, int]], monotonic: bool
) -> None:
    # Closed after each example, so the next one gets its schema (or file) afresh.
    with contextlib.closing(make_store()) as store:
        windows = {"a": WINDOW, "b": HOUR, "c": 2 * WINDOW}
        for rid, window in windows.items():
            request(store, rid, inbox=f"I-{rid}", deadline=T0 + window, approvers=("U8",))
        offsets = sorted(s[4] for s in steps) if monotonic else [s[4] for s in steps]
        returned: dict[str, list[str]] = {rid: [] for rid in windows}
        for (what, rid, value, user, _), offset in zip(steps, offsets, strict=True):
            now = T0 + offset
            if what == "tick":
                store.fire_due_timers(now)
                continue
            outcome = store.answer(rid, value, user, now).outcome
            if user == "U666":
                assert outcome == "forbidden"
            else:
                assert outcome in ("yes", "no", "expired")
                returned[rid].append(outcome)
        store.fire_due_timers(T0 + 3 * WINDOW)  # every deadline has passed: all are settled now
        for rid in windows:
            events = answer_events(store, f"I-{rid}")
            assert len(events) == 1, (rid, events)
            state = store.approval(rid)
            assert state is not None and state.answer is not None
            stored = events[0].payload["answer"]
            assert state.answer == stored
            assert all(o == stored for o in returned[rid]), (rid, returned[rid], stored)
            # the first action that settles it decides: an allowed user's answer (expired when
            # late), or an expiry pass at or after the deadline; the final pass settles the rest
            assert stored == expected_outcome(steps, offsets, rid, T0 + windows[rid])
            if stored != "expired":
                assert state.answered_at is not None and state.answered_at < state.deadline
                assert state.answered_by in ("U7", "U8")


def expected_outcome(
    steps: list[tuple[str, str, str, str, int]], offsets: list[int], rid: str, deadline: int
) -> str:
    for (what, r, value, user, _), offset in zip(steps, offsets, strict=True):
        now = T0 + offset
        if what == "tick" and now >= deadline:
            return "expired"
        if what == "answer" and r == rid and user != "U666":
            return value if now < deadline else "expired"
    return "expired"


# -- the caps: asked per run, open per inbox ---------------------------------------------------

CAPS_NOTE = "(WAKEFUL_MAX_APPROVALS_PER_RUN, WAKEFUL_MAX_OPEN_APPROVALS)"


def ask_many(store: Store, run: int, orders: int, now: int = T0) -> None:
    """A run whose agent ignores the caps: it returns `orders` approvals, each with a prompt
    in C7 (what a custom agent given a 40,000-character message might do)."""
    approvals = [
        ApprovalRequest(
            id=f"cap-{run}-{n}",
            tool="refund_order",
            args={"order_id": f"{run}-{n}"},
            requester="U7",
            deadline=now + WINDOW,
            prompt=Post("C7", f"Approval needed: refund order {run}-{n}"),
        )
        for n in range(orders)
    ]
    store.ingest(INBOX, "slack", f"many-{run}", {"text": "refund order …"}, now)
    claim = store.acquire_and_claim(INBOX, "W", now)
    assert claim is not None and claim.events
    assert store.finish(claim, Effects(approvals=approvals), now, release=True)


def prompts_and_notes(store: Store) -> tuple[int, list[str]]:
    rows = store.outbox(inbox=INBOX)
    prompts = sum(r.text.startswith("Approval needed") for r in rows)
    return prompts, [r.text for r in rows if CAPS_NOTE in r.text]


def test_the_finish_asks_at_most_the_per_run_cap_and_says_how_many_were_not_asked(
    store: Store,
) -> None:
    ask_many(store, 1, 2222)
    assert len(store.approvals(INBOX)) == 5
    prompts, notes = prompts_and_notes(store)
    assert prompts == 5
    assert notes == [
        "I asked for 5 approvals; 2217 more were not asked: at most 5 per message and 20 open "
        f"at once {CAPS_NOTE}."
    ]
    [note] = [r for r in store.outbox(inbox=INBOX) if CAPS_NOTE in r.text]
    assert (note.channel, note.priority) == ("C7", "urgent")


def test_no_more_than_the_open_cap_is_open_in_one_inbox(make_store: MakeStore) -> None:
    store = make_store(max_approvals_per_run=5, max_open_approvals=12)
    for run in range(3):
        ask_many(store, run, 5, T0 + run)
    open_ids = [a.id for a in store.approvals(INBOX) if a.answer is None]
    assert len(open_ids) == 12
    ask_many(store, 3, 2, T0 + 10)  # the inbox is full: nothing is asked
    assert len(store.approvals(INBOX)) == 12
    assert store.answer(open_ids[0], "no", "U7", T0 + 20).outcome == "no"  # one place frees up
    ask_many(store, 4, 3, T0 + 30)
    assert len([a for a in store.approvals(INBOX) if a.answer is None]) == 12
    prompts, notes = prompts_and_notes(store)
    assert prompts == 13
    caps = f"at most 5 per message and 12 open at once {CAPS_NOTE}."
    assert notes == [
        f"I asked for 2 approvals; 3 more were not asked: {caps}",
        f"2 approvals were not asked: {caps}",
        f"I asked for 1 approval; 2 more were not asked: {caps}",
    ]
    # The budget an agent reads says the same before it asks.
    budget = store.approval_budget(INBOX)
    assert (budget.per_run, budget.max_open, budget.open) == (5, 12, 12)
    assert not budget.take() and budget.note() == f"1 approval was not asked: {caps}"
