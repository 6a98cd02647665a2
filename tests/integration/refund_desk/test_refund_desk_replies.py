"""RefundDesk's replies: one reply per batch, refunds that need a yes, reminders
(refund_desk/conftest.py)."""

from __future__ import annotations

import pytest

from tests.conftest import T0, MakeStore
from tests.support.refund_world import (
    BOSS,
    DAY,
    INBOX,
    TTL,
    USER,
    CrashAfterDelegatingOnce,
    Desk,
    ProcessDied,
)
from wakeful.agents.testing import Harness
from wakeful.bot.builtin.refund_desk import HELP_LINES, RefundDesk

# -- one reply per batch -------------------------------------------------------------------


def test_a_refund_ask_is_one_post_its_prompt(desk: Desk) -> None:
    desk.say("please refund order 42")
    desk.tick()
    [prompt] = desk.sender.parts
    assert prompt.text == f"Approval needed: refund order 42 for <@{USER}>"
    # Said with something else, the reply says the rest and the prompt says the ask.
    desk.say("refund order 43, and remind me in 1 minute to stretch")
    desk.tick(T0 + 5)
    assert [p.text for p in desk.sender.parts[1:]] == [
        "Handled 1 message.\nI'll remind you in 1 minute: stretch",
        f"Approval needed: refund order 43 for <@{USER}>",
    ]


def test_a_batch_of_messages_gets_one_urgent_reply_saying_how_many(desk: Desk) -> None:
    for text in ("hi", "are you there?", "hello?"):
        desk.say(text)
    desk.tick()
    rows = desk.rows()
    assert [(r.channel, r.thread_ts, r.text, r.priority) for r in rows] == [
        ("D1", "", "Handled 3 messages.", "urgent")
    ]
    assert [r.status for r in rows] == ["sent"]
    assert [(p.channel, p.thread_ts, p.text) for p in desk.sender.parts] == [
        ("D1", "", "Handled 3 messages.")
    ]


def test_urgent_reply_is_not_held_by_the_gap_after_a_normal_post(make_store: MakeStore) -> None:
    desk = Desk(make_store())
    desk.say("digest every 10 minutes")
    desk.tick()
    desk.tick(T0 + 600)  # the digest, a normal post, starts the one-hour gap in D1
    assert len(desk.with_prefix("Digest since")) == 1
    desk.say("still there?")
    desk.tick(T0 + 601)
    [reply] = desk.with_prefix("Handled 1 message.")[1:]
    assert reply.status == "sent"


@pytest.mark.parametrize(
    ("thread_ts", "expected_thread"),
    [(None, "1700000000.000100"), ("1699999999.000001", "1699999999.000001")],
    ids=["top-level", "in-a-thread"],
)
def test_a_mention_in_a_channel_is_answered_in_its_thread(
    desk: Desk, thread_ts: str | None, expected_thread: str
) -> None:
    desk.say(
        "<@UBOT> hello", channel="C1", kind="mention", ts="1700000000.000100", thread_ts=thread_ts
    )
    desk.tick()
    assert [(r.channel, r.thread_ts, r.text) for r in desk.rows()] == [
        ("C1", expected_thread, "Handled 1 message.")
    ]
    assert [(p.channel, p.thread_ts) for p in desk.sender.parts] == [("C1", expected_thread)]


def test_two_conversations_in_one_batch_get_one_reply_each(desk: Desk) -> None:
    desk.say("hi")
    desk.say("<@UBOT> over here", channel="C1", kind="mention", ts="1700000000.000200")
    desk.say("and here")
    desk.tick()
    replies = {(r.channel, r.thread_ts, r.text, r.priority) for r in desk.rows()}
    assert replies == {
        ("D1", "", "Handled 2 messages.", "urgent"),
        ("C1", "1700000000.000200", "Handled 1 message.", "urgent"),
    }
    assert len(desk.rows()) == 2
    assert sorted((p.channel, p.text) for p in desk.sender.parts) == [
        ("C1", "Handled 1 message."),
        ("D1", "Handled 2 messages."),
    ]


def test_help_is_one_reply_the_help_and_a_batch_keeps_its_own_reply() -> None:
    """`help` (in a DM or a mention) is answered by the help alone: one urgent reply, its lines
    as written (streamed; in the Harness a stream is one reply when the run finishes), no
    "Handled" beside it. Sent with other messages, those still get the batch's one reply."""
    text = "".join(HELP_LINES)
    assert text.count("\n") == len(HELP_LINES) - 1  # each line its own, the last unbroken
    with Harness(RefundDesk) as h:
        for said in (h.dm("help"), h.dm("Help?"), h.mention("help")):
            assert [(r.kind, r.text, r.urgent) for r in said.replies] == [("post", text, True)]
        [helped] = h.mention("help", thread_ts="1700000000.000001").replies
        assert (helped.channel, helped.thread_ts) == ("C0TEST", "1700000000.000001")
        both = h.batch(["status?", "help"]).replies
        assert sorted(r.text for r in both) == sorted(["Handled 2 messages.", text])


# -- refunds need a yes ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "order"),
    [
        ("refund order 42", "42"),
        ("Hi! Could you please REFUND Order #A-7 for me?", "A-7"),
        ("customer is upset, Refund ORDER 9001 asap", "9001"),
    ],
)
def test_refund_order_asks_for_approval_with_buttons(desk: Desk, text: str, order: str) -> None:
    desk.say(text)
    desk.tick()
    [approval] = desk.store.approvals(INBOX)
    assert approval.tool == "refund_order"
    assert [t.name for t in desk.agent.tools] == ["refund_order"]
    assert approval.args["order_id"] == order
    assert approval.requester == USER
    assert approval.approvers == (BOSS,)
    assert approval.deadline == T0 + TTL
    assert approval.answer is None
    assert desk.store.recorded_steps(name="refund_order") == []  # nothing refunded before a yes

    [prompt] = [r for r in desk.rows() if r.ref == approval.id]
    assert (prompt.kind, prompt.channel, prompt.priority) == ("post", "D1", "urgent")
    buttons = [el for b in prompt.blocks if b["type"] == "actions" for el in b["elements"]]
    assert sorted((b["action_id"], b["value"]) for b in buttons) == [
        ("approve", approval.id),
        ("deny", approval.id),
    ]
    # The prompt went out and its ts is where an answer's update will rewrite it.
    [part] = [p for p in desk.sender.parts if p.ref == approval.id]
    stored = desk.store.approval(approval.id)
    assert stored is not None and stored.prompt_ts == desk.sender.ts[part.part_id]
    # The approval keeps where it was asked: its answer is posted there, whatever runs it.
    assert (stored.channel, stored.thread_ts or None) == ("D1", None)


def test_text_without_refund_order_asks_for_nothing(desk: Desk) -> None:
    desk.say("can I get a refund? my order is late")
    desk.tick()
    assert desk.store.approvals(INBOX) == []
    assert desk.texts() == ["Handled 1 message."]


@pytest.mark.parametrize("crash", ["run-fails", "process-dies"])
def test_yes_refunds_once_even_when_the_answer_run_is_retried(
    make_store: MakeStore, crash: str
) -> None:
    store = make_store()
    desk = Desk(store)
    desk.say("refund order 42")
    desk.tick()
    [approval] = store.approvals(INBOX)
    prompt_ts = store.approval(approval.id).prompt_ts  # type: ignore[union-attr]
    assert prompt_ts

    # A new process answers: it knows the pending call only from the saved session.
    error: BaseException = RuntimeError("crash") if crash == "run-fails" else ProcessDied()
    crashing = Desk(
        store,
        clock=desk.clock,
        sender=desk.sender,
        holder="worker-b",
        wrap=lambda agent: CrashAfterDelegatingOnce(agent, error),
    )
    assert store.answer(approval.id, "yes", BOSS, T0 + 60).outcome == "yes"
    if crash == "run-fails":
        crashing.tick(T0 + 60)
    else:
        with pytest.raises(ProcessDied):
            crashing.tick(T0 + 60)
    assert len(store.recorded_steps(name="refund_order")) == 1  # the refund went through...
    assert not desk.with_prefix("Refunded")  # ...but the run never finished

    # Past the backoff and the lapsed lease, another worker runs the answer again.
    retry = Desk(store, clock=desk.clock, sender=desk.sender, holder="worker-c")
    retry.tick(T0 + 60 + 1000)
    calls = store.recorded_steps(name="refund_order")
    assert len(calls) == 1
    assert calls[0].key == approval.id
    refunded = desk.with_prefix("Refunded")
    assert [(r.text, r.priority, r.status) for r in refunded] == [
        ("Refunded order 42.", "urgent", "sent")
    ]
    assert [p.text for p in desk.sender.parts].count("Refunded order 42.") == 1
    [update] = desk.rows("update")
    assert (update.ref, update.status) == (approval.id, "sent")
    [sent_update] = [p for p in desk.sender.parts if p.kind == "update"]
    assert (sent_update.ref, sent_update.target_ts, sent_update.channel) == (
        approval.id,
        prompt_ts,
        "D1",
    )


def test_the_answer_is_posted_where_the_request_was_made(make_store: MakeStore) -> None:
    store = make_store()
    desk = Desk(store)
    desk.say("<@UBOT> refund order 7", channel="C1", kind="mention", ts="1700000000.000300")
    desk.tick()
    [approval] = store.approvals(INBOX)
    store.answer(approval.id, "yes", USER, T0 + 5)
    fresh = Desk(store, clock=desk.clock, sender=desk.sender, holder="worker-b")
    fresh.tick(T0 + 5)
    [refunded] = desk.with_prefix("Refunded")
    assert (refunded.channel, refunded.thread_ts) == ("C1", "1700000000.000300")


@pytest.mark.parametrize(
    ("outcome", "text"),
    [
        ("no", "Refund for order 42 denied; nothing was done."),
        ("expired", "Refund request for order 42 expired; nothing was done."),
    ],
)
def test_no_or_expiry_refunds_nothing_and_says_so(desk: Desk, outcome: str, text: str) -> None:
    desk.say("refund order 42")
    desk.tick()
    [approval] = desk.store.approvals(INBOX)
    prompt_ts = desk.store.approval(approval.id).prompt_ts  # type: ignore[union-attr]
    if outcome == "no":
        assert desk.store.answer(approval.id, "no", BOSS, T0 + 30).outcome == "no"
        desk.tick(T0 + 30)
    else:
        desk.tick(approval.deadline - 1)
        assert desk.texts()[-1] != text  # not a second early
        desk.tick(approval.deadline)
    state = desk.store.approval(approval.id)
    assert state is not None and state.answer == outcome
    assert desk.store.recorded_steps(name="refund_order") == []
    [row] = [r for r in desk.rows("post") if r.text == text]
    assert (row.channel, row.priority, row.status) == ("D1", "urgent", "sent")
    [update] = desk.rows("update")
    assert (update.ref, update.status) == (approval.id, "sent")
    assert not [b for b in update.blocks if b["type"] == "actions"]  # no buttons left to tap
    [sent_update] = [p for p in desk.sender.parts if p.kind == "update"]
    assert (sent_update.ref, sent_update.target_ts) == (approval.id, prompt_ts)


# -- reminders -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("amount", "seconds"),
    [("45 seconds", 45), ("2 minutes", 120), ("1 hour", 3600), ("3 hours", 10800)],
)
def test_remind_me_sets_a_one_off_timer_that_posts_once(
    desk: Desk, amount: str, seconds: int
) -> None:
    desk.say(f"remind me in {amount} to call the courier")
    desk.tick()
    [timer] = desk.store.timers(INBOX)
    assert (timer.kind, timer.next_at) == ("once", T0 + seconds)
    desk.tick(T0 + seconds - 1)
    assert not desk.with_prefix("Reminder:")
    desk.tick(T0 + seconds)
    [reminder] = desk.with_prefix("Reminder:")
    assert (reminder.text, reminder.channel, reminder.priority, reminder.status) == (
        "Reminder: call the courier",
        "D1",
        "urgent",
        "sent",
    )
    assert desk.store.timers(INBOX) == []
    desk.tick(T0 + seconds + DAY)
    assert len(desk.with_prefix("Reminder:")) == 1
