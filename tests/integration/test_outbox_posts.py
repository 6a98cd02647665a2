"""The outbox through the store and the Dispatcher: long posts split, approval prompts and
their updates, many conversations at once, and nothing ever lost (tests/support/outbox_rig.py)."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import T0
from tests.support.outbox_rig import (
    INBOX,
    MakeStore,
    Rig,
    request_with_prompt,
    statuses,
)
from wakeful.bot.slack.kinds import SLACK_TEXT_LIMIT
from wakeful.core.effects import Post
from wakeful.core.errors import PermanentSendError, TransientSendError
from wakeful.core.rules.outbox import SEPARATOR, Part
from wakeful.core.store import Store

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
    request_with_prompt(store, prompt, before)
    rig = Rig(store)
    rig.tick(T0)
    carrying = [p for p in rig.sender.posted if "Refund order 1?" in p.text]
    assert len(carrying) == 1
    state = store.approval("req-1")
    assert state is not None
    assert state.prompt_channel == "C7"
    assert state.prompt_ts == rig.sender.ts_of[carrying[0].part_id]


def test_an_update_reaches_a_prompt_that_was_posted_urgently(store: Store) -> None:
    request_with_prompt(store, Post("C7", "Refund order 1?", priority="urgent"), [])
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
    request_with_prompt(store, Post("C7", "Refund order 1?", priority="urgent"), [])
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
