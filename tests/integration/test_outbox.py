"""The outbox through the store and the Dispatcher: paced, merged, ordered, and never lost."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import T0
from tests.support.approvals import ApprovalRequest
from wakeful.bot.slack.kinds import SLACK_TEXT_LIMIT
from wakeful.core.clock import ManualClock
from wakeful.core.dispatcher import Dispatcher
from wakeful.core.dispatcher import Sender as BaseSender
from wakeful.core.effects import Effects, Post
from wakeful.core.errors import PermanentSendError, TransientSendError
from wakeful.core.records import Ingested
from wakeful.core.rules.outbox import SEPARATOR, Part
from wakeful.core.store import Store, open_store
from wakeful.core.store.sqlite import SQLiteConnector

GAP = 3600
INBOX = "T1:U8"

MakeStore = Callable[..., Store]
Failure = Callable[[Part], BaseException | None]


class Sender(BaseSender):
    """Stands in for Slack. Keeps every call, and what was really posted, by part id; a retried
    part that already went out is found and not posted again, as the real sender does with
    message metadata. `fail(part)` may return an exception to raise instead of posting;
    `after` exceptions are raised after the post reached Slack (a lost response)."""

    def __init__(self) -> None:
        self.calls: list[Part] = []
        self.posted: list[Part] = []
        self.ts_of: dict[str, str] = {}
        self.duplicates: list[str] = []
        self.fail: Failure = lambda part: None
        self.after: Failure = lambda part: None
        self.during: Callable[[Part], None] = lambda part: None

    def send(self, part: Part) -> str:
        self.calls.append(part)
        self.during(part)
        if part.part_id in self.ts_of:
            if not part.retry:
                self.duplicates.append(part.part_id)
            else:
                return self.ts_of[part.part_id]
        exc = self.fail(part)
        if exc is not None:
            raise exc
        self.posted.append(part)
        ts = f"{1000 + len(self.posted)}.000100"
        self.ts_of[part.part_id] = ts
        late = self.after(part)
        if late is not None:
            raise late
        return ts

    @property
    def texts(self) -> list[str]:
        return [p.text for p in self.posted]

    def texts_to(self, channel: str, thread_ts: str = "") -> list[str]:
        return [p.text for p in self.posted if (p.channel, p.thread_ts) == (channel, thread_ts)]


class Rig:
    def __init__(self, store: Store, now: int = T0) -> None:
        self.store = store
        self.clock = ManualClock(now)
        self.sender = Sender()
        self.dispatcher = Dispatcher(store=store, clock=self.clock, sender=self.sender)

    def post(
        self,
        text: str,
        at: int,
        channel: str = "C1",
        thread: str | None = None,
        urgent: bool = False,
        **kw: Any,
    ) -> None:
        self.clock.now = at
        msg = Post(
            channel=channel,
            text=text,
            thread_ts=thread,
            priority="urgent" if urgent else "normal",
            **kw,
        )
        self.store.post(INBOX, [msg], at)

    def tick(self, at: int) -> int:
        self.clock.now = at
        return self.dispatcher.tick(at)


def statuses(store: Store) -> list[str]:
    return [r.status for r in store.outbox(inbox=INBOX)]


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
    _request_with_prompt(store, Post("C1", "Refund order 1?"), [])
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


# -- long posts --------------------------------------------------------------------------------


def test_a_merged_post_over_40k_is_split_in_order_and_nothing_is_truncated(store: Store) -> None:
    rig = Rig(store)
    texts = [c * 15_000 for c in "xyz"]
    for t in texts:
        rig.post(t, T0)
    assert rig.tick(T0) == 2
    posted = rig.sender.texts
    assert all(len(p) <= SLACK_TEXT_LIMIT for p in posted)
    assert "\n".join(posted) == SEPARATOR.join(texts)  # cut at a separator's newline
    assert statuses(store) == ["sent"] * 3


def test_a_100k_row_is_split_and_marked_sent_only_with_its_last_chunk(store: Store) -> None:
    rig = Rig(store)
    text = "".join(chr(ord("a") + i % 26) for i in range(100_000))
    rig.post(text, T0)
    seen: list[list[str]] = []
    rig.sender.during = lambda part: seen.append(statuses(store))
    assert rig.tick(T0) == 3
    assert seen == [["sending"]] * 3  # still sending while any chunk is on its way
    assert all(len(p) <= SLACK_TEXT_LIMIT for p in rig.sender.texts)
    assert "".join(rig.sender.texts) == text
    assert statuses(store) == ["sent"]


def test_a_cut_row_interrupted_mid_way_is_resent_without_duplicating_chunks(
    store: Store,
) -> None:
    rig = Rig(store)
    text = "".join(chr(ord("a") + i % 26) for i in range(90_000))
    rig.post(text, T0)
    rig.sender.fail = lambda part: (
        TransientSendError("503", retry_after=1) if part.part_id.endswith(".1") else None
    )
    rig.tick(T0)
    assert len(rig.sender.posted) == 1  # the first chunk went out, the second did not
    assert statuses(store) == ["sending"]
    rig.sender.fail = lambda part: None
    rig.tick(T0 + 1)
    assert len(rig.sender.calls) == 2  # whole-second clock: the wait rounds up by one second
    rig.tick(T0 + 2)
    assert [c.retry for c in rig.sender.calls] == [False, False, True, True, True]
    assert statuses(store) == ["sent"]
    assert rig.sender.duplicates == []
    assert "".join(rig.sender.texts) == text


# -- approval prompts --------------------------------------------------------------------------


def _request_with_prompt(store: Store, prompt: Post, before: list[Post]) -> None:
    store.ingest(INBOX, "slack", "ask", {"text": "refund"}, T0)
    claim = store.acquire_and_claim(INBOX, "W", T0)
    assert claim is not None
    req = ApprovalRequest(
        id="req-1",
        tool="refund",
        args={"order": 1},
        requester="U8",
        deadline=T0 + GAP,
        prompt=prompt,
    )
    assert store.finish(claim, Effects(messages=before, approvals=[req]), T0, release=True)


BUTTONS = [{"type": "actions", "elements": [{"type": "button", "text": "Yes"}]}]


@pytest.mark.parametrize(
    ("prompt", "before"),
    [
        (Post("C7", "Refund order 1?"), []),
        (Post("C7", "Refund order 1?", blocks=BUTTONS), []),
        (Post("C7", "Refund order 1?", priority="urgent"), []),
        (Post("C7", "Refund order 1?", blocks=BUTTONS), [Post("C7", "Let me check.")]),
        (Post("C7", "Refund order 1?"), [Post("C7", "Let me check.")]),
    ],
    ids=["normal-text", "normal-blocks", "urgent", "after-text-then-blocks", "merged-text"],
)
def test_posting_an_approval_prompt_records_where_it_went(
    store: Store, prompt: Post, before: list[Post]
) -> None:
    _request_with_prompt(store, prompt, before)
    rig = Rig(store)
    rig.tick(T0)
    carrying = [p for p in rig.sender.posted if "Refund order 1?" in p.text]
    assert len(carrying) == 1
    state = store.approval("req-1")
    assert state is not None
    assert state.prompt_channel == "C7"
    assert state.prompt_ts == rig.sender.ts_of[carrying[0].part_id]


def test_an_update_reaches_a_prompt_that_was_posted_urgently(store: Store) -> None:
    _request_with_prompt(store, Post("C7", "Refund order 1?", priority="urgent"), [])
    rig = Rig(store)
    assert rig.tick(T0) == 1
    prompt_ts = rig.sender.ts_of[rig.sender.posted[0].part_id]
    rig.post("Refund approved by U8", T0 + 5, channel="C7", kind="update", ref="req-1")
    rig.tick(T0 + 5)
    assert store.dead_letters().outbox == []
    assert [(p.kind, p.target_ts) for p in rig.sender.posted] == [
        ("post", None),
        ("update", prompt_ts),
    ]


def test_a_prompt_and_its_update_in_one_pass_rewrite_the_prompt(store: Store) -> None:
    # The answer came before the dispatcher ever ran: the prompt and its rewrite go out in one
    # batch. Sent parts are recorded together at the end of a pass, but the prompt's ts must
    # be recorded before the update looks it up, or the update is parked as "never posted".
    _request_with_prompt(store, Post("C7", "Refund order 1?", priority="urgent"), [])
    store.post(INBOX, [Post("C7", "Refund approved", kind="update", ref="req-1")], T0 + 1)
    rig = Rig(store, T0 + 1)
    assert rig.tick(T0 + 1) == 2
    assert store.dead_letters().outbox == []
    prompt_ts = rig.sender.ts_of[rig.sender.posted[0].part_id]
    assert [(p.kind, p.target_ts) for p in rig.sender.posted] == [
        ("post", None),
        ("update", prompt_ts),
    ]


def test_a_pass_ends_only_after_every_send_it_started(store: Store) -> None:
    # One send fails fast, another is still on the network: the pass must wait for it (and
    # record it) before it ends, or the next pass could reclaim that batch and post it twice.
    rig = Rig(store)
    rig.post("fails", T0, channel="C1", urgent=True)
    rig.post("slow", T0, channel="C2", urgent=True)
    finished: list[str] = []

    def during(part: Part) -> None:
        if part.channel == "C1":
            raise RuntimeError("the sender broke")
        time.sleep(0.3)
        finished.append(part.text)

    rig.sender.during = during
    with pytest.raises(RuntimeError, match="the sender broke"):
        rig.tick(T0)
    assert finished == ["slow"]
    sent = {r.text: r.status for r in store.outbox(inbox=INBOX)}
    assert sent == {"fails": "sending", "slow": "sent"}


def test_a_backlog_over_many_conversations_is_sent_to_32_of_them_at_once(store: Store) -> None:
    # Each send waits at the pace of its own conversation (Slack: about one post a second per
    # channel). A pass over a backlog must not queue 40 conversations behind 8 sleeping
    # threads: 32 sends are in flight together, or the barrier breaks. (At 8, the crash chaos
    # run's backlog drained at about 8 posts a second: 70 s after the traffic stopped.)
    rig = Rig(store)
    for n in range(40):
        rig.post(f"reply {n}", T0, channel=f"D{n}", urgent=True)
    together = threading.Barrier(32, timeout=10)

    def during(part: Part) -> None:
        if int(part.channel[1:]) < 32:
            together.wait()

    rig.sender.during = during
    assert rig.tick(T0) == 40
    assert not together.broken
    assert sorted(rig.sender.texts) == sorted(f"reply {n}" for n in range(40))


# -- nothing is ever lost ----------------------------------------------------------------------

DESTS = [("C1", None), ("C1", "9.000"), ("C2", None)]

step = st.one_of(
    st.tuples(st.just("post"), st.integers(0, len(DESTS) - 1), st.booleans(), st.integers(0, 400)),
    st.tuples(
        st.just("ephemeral"), st.integers(0, len(DESTS) - 1), st.just(False), st.integers(0, 400)
    ),
    st.tuples(st.just("tick"), st.just(0), st.just(False), st.integers(0, 400)),
    st.tuples(st.just("crash"), st.just(0), st.just(False), st.integers(0, 400)),
)
mode = st.sampled_from(["ok", "ok", "ok", "transient", "transient_after", "permanent"])


@given(
    steps=st.lists(step, min_size=1, max_size=30),
    modes=st.lists(mode, max_size=40),
    retry_after=st.integers(0, 90),
)
@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
def test_nothing_is_ever_lost(
    make_store: MakeStore,
    steps: list[tuple[str, int, bool, int]],
    modes: list[str],
    retry_after: int,
) -> None:
    # Closed after each example, so the next one gets its schema (or file) afresh.
    with contextlib.closing(make_store(outbox_gap=300, send_timeout=60)) as store:
        rig = Rig(store)
        queue = list(modes)
        failed_rows: set[int] = set()

        def fail(part: Part) -> BaseException | None:
            m = queue.pop(0) if queue else "ok"
            if m == "transient":
                return TransientSendError("ratelimited", retry_after=retry_after)
            if m == "permanent":
                failed_rows.update(part.row_ids)
                return PermanentSendError("channel_not_found")
            if m == "transient_after":
                queue.insert(0, "late")
            return None

        def after(part: Part) -> BaseException | None:
            if queue and queue[0] == "late":
                queue.pop(0)
                return TransientSendError("lost response", retry_after=retry_after)
            return None

        rig.sender.fail, rig.sender.after = fail, after
        now, n = T0, 0
        for what, dest, urgent, dt in steps:
            now += dt
            channel, thread = DESTS[dest]
            if what in ("post", "ephemeral"):
                n += 1
                extra: dict[str, Any] = (
                    {"kind": "ephemeral", "user": "U1"} if what != "post" else {}
                )
                rig.post(f"<m{n}>", now, channel=channel, thread=thread, urgent=urgent, **extra)
            elif what == "tick":
                rig.tick(now)
            else:
                store.claim_batches(now)  # a dispatcher that claims and dies

        # recovery: requeue what failed, stop failing, and let time pass
        rig.sender.fail, rig.sender.after = (lambda part: None), (lambda part: None)
        for _ in range(20):
            for r in store.dead_letters(limit=1000).outbox:
                assert store.requeue_outbox(r.id, now)
            now += 400
            rig.tick(now)
            if all(s == "sent" for s in statuses(store)):
                break
        rows = store.outbox(inbox=INBOX)
        assert len(rows) == n
        assert [r.status for r in rows] == ["sent"] * n
        # exactly once by part id: a part that went out is never posted again
        assert rig.sender.duplicates == []
        ids = [p.part_id for p in rig.sender.posted]
        assert len(ids) == len(set(ids))
        # every row reached the sender, once
        for r in rows:
            carrying = [p for p in rig.sender.posted if r.text in p.text.split(SEPARATOR)]
            assert len(carrying) == 1, (r.text, [p.text for p in rig.sender.posted])
        # per destination, rows that never failed went out in the order they were written
        for channel, thread in DESTS:
            order = [
                rid
                for p in rig.sender.posted
                if (p.channel, p.thread_ts) == (channel, thread or "")
                for rid in p.row_ids
                if rid not in failed_rows
            ]
            assert order == sorted(order), (channel, thread, order)
