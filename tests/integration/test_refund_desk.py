"""RefundDesk, the built-in agent, through the real engine on a simulated clock.

Each test drives a real store with the three loops (Scheduler, Worker, Dispatcher) tick by tick
and asserts what a Slack user would see: the outbox rows the runs wrote and the parts a
recording sender was handed. The agent is built by its factory and run behind the runner
`wakeful serve` builds (`build_runner`: Slack approval prompts, the surfaces' hooks); events are
the typed events the Slack front stores (`Message(...).to_wire()`).
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.conftest import T0, MakeStore
from wakeful.agents import Agent, ApprovalAnswer, InvalidInput, Message, Run, Setup, Tool
from wakeful.agents.testing import Harness
from wakeful.bot.builtin.refund_desk import HELP_LINES, RefundDesk
from wakeful.bot.process.config import Config
from wakeful.bot.process.loading import build_runner, make_setup
from wakeful.bot.slack.zones import ZoneLookup
from wakeful.core.clock import ManualClock
from wakeful.core.dispatcher import Dispatcher, Sender
from wakeful.core.inbox_id import InboxId
from wakeful.core.records import OutboxRow
from wakeful.core.rules.outbox import Part
from wakeful.core.runner import Runner
from wakeful.core.scheduler import Scheduler
from wakeful.core.store import Store
from wakeful.core.worker import Worker

TEAM = "T1"
USER = "U1"
BOSS = "UBOSS"
INBOX = InboxId.person(TEAM, USER)
TTL = 600
HOUR = 3600
DAY = 86400
_event_ids = itertools.count(1)


def utc(ts: int) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


class RecordingSender(Sender):
    """Stands in for Slack: keeps every part and answers with a fresh message ts."""

    def __init__(self) -> None:
        self.parts: list[Part] = []
        self.ts: dict[str, str] = {}

    def send(self, part: Part) -> str:
        self.parts.append(part)
        ts = f"1.000{len(self.parts)}"
        self.ts[part.part_id] = ts
        return ts


class Poisonable:
    """The refund desk, failing every run that holds an event it cannot read (`Unknown`: a
    half-stored Slack message): the way a test makes an event that dies."""

    def __init__(self, inner: RefundDesk) -> None:
        self.inner = inner
        self.tools = inner.tools
        self.greeting = inner.greeting
        self.suggested_prompts = inner.suggested_prompts
        self.home = inner.home

    def run(self, run: Run) -> None:
        unread = [e.id for e in run.events if type(e).__name__ == "Unknown"]
        if unread:
            raise ValueError(f"cannot read events {unread}")
        self.inner.run(run)


def desk_config(store: Store, *, ttl: int = TTL, quiet_digests: bool = False) -> Config:
    """The configuration `wakeful serve` would read: the boss approves, the store's settings
    with the test's approval window."""
    settings = dataclasses.replace(store.settings, approval_ttl=ttl)
    return Config(approvers=(BOSS,), quiet_digests=quiet_digests, settings=settings)


def desk_setup(
    store: Store,
    config: Config,
    clock: Callable[[], int],
    tz_lookup: Callable[[str], str] | None = None,
) -> Setup:
    """The Setup the refund desk's factory is given (a zone look-up without Slack: UTC)."""
    return make_setup(config, store, tz_lookup or ZoneLookup(None), {}, clock)


def desk_runner(
    store: Store,
    *,
    clock: Callable[[], int] = lambda: T0,
    ttl: int = TTL,
    quiet_digests: bool = False,
    tz_lookup: Callable[[str], str] | None = None,
    wrap: Callable[[Any], Any] | None = None,
) -> tuple[RefundDesk, Runner]:
    """The refund desk built by production's loader, and the runner around it."""
    config = desk_config(store, ttl=ttl, quiet_digests=quiet_digests)
    desk = RefundDesk(desk_setup(store, config, clock, tz_lookup))
    agent = Poisonable(desk)
    wrapped = wrap(agent) if wrap else agent
    runner = build_runner(config, store, None, factory=lambda _setup: wrapped, env={}, clock=clock)
    return desk, runner


class Desk:
    """One user's world: RefundDesk, the three loops, a clock and a recording sender."""

    def __init__(
        self,
        store: Store,
        *,
        clock: ManualClock | None = None,
        sender: RecordingSender | None = None,
        holder: str = "worker-a",
        tz_lookup: Callable[[str], str] | None = None,
        wrap: Callable[[Any], Any] | None = None,
        ttl: int = TTL,
        quiet_digests: bool = False,
    ) -> None:
        self.store = store
        self.clock = clock or ManualClock(T0)
        self.sender = sender or RecordingSender()
        self.agent, self.runner = desk_runner(
            store,
            clock=self.clock,
            ttl=ttl,
            quiet_digests=quiet_digests,
            tz_lookup=tz_lookup,
            wrap=wrap,
        )
        self.worker = Worker(store=store, clock=self.clock, runner=self.runner, holder=holder)
        self.scheduler = Scheduler(store=store, clock=self.clock)
        self.dispatcher = Dispatcher(store=store, clock=self.clock, sender=self.sender)

    @property
    def now(self) -> int:
        return self.clock.now

    def say(
        self,
        text: str,
        *,
        channel: str = "D1",
        kind: str = "message",
        ts: str | None = None,
        thread_ts: str | None = None,
        payload: dict[str, Any] | None = None,
    ) -> int:
        """Store a Slack message or mention as the app does; return its event id."""
        n = next(_event_ids)
        message = Message(
            text=text,
            user=USER,
            team=TEAM,
            channel=channel,
            ts=ts or f"{self.now}.{n:06d}",
            thread_ts=thread_ts,
            channel_type="im" if kind == "message" else "channel",
            mention=kind == "mention",
        )
        body = payload or message.to_wire()
        result = self.store.ingest(INBOX, "slack", f"Ev{n:08d}", body, self.now)
        assert result.event_id is not None
        return result.event_id

    def poison(self) -> int:
        """An event the agent cannot handle (a Slack message stored without its conversation):
        every run of it fails."""
        return self.say("", payload={"kind": "message", "text": "?", "user": USER})

    def tick(self, at: int | None = None) -> None:
        if at is not None:
            self.clock.now = at
        now = self.clock.now
        self.scheduler.tick(now)
        self.worker.tick(now)
        self.dispatcher.tick(now)

    def settle(self, at: int) -> None:
        """Tick at `at` until no event of the inbox waits or runs (a bounded number of rounds:
        a retried event runs alone, and a slow round leaves the next for the next tick)."""
        for _ in range(20):
            self.tick(at)
            if not self.store.events(INBOX, "open"):
                return
        raise AssertionError(f"events still open: {self.store.events(INBOX, 'open')}")

    def rows(self, kind: str | None = None) -> list[OutboxRow]:
        return [r for r in self.store.outbox(inbox=INBOX) if kind is None or r.kind == kind]

    def texts(self) -> list[str]:
        return [r.text for r in self.rows("post")]

    def with_prefix(self, prefix: str) -> list[OutboxRow]:
        posts = [r for r in self.rows() if r.kind in ("post", "digest")]
        return [r for r in posts if r.text.startswith(prefix)]

    def kill_poison(self, event_id: int) -> None:
        """Run the poison event until it is dead (max_attempts claims, then one more)."""
        for _ in range(4):
            self.tick(self.now + 100)
        event = self.store.event(event_id)
        assert event is not None and event.status == "dead"


class CrashAfterDelegatingOnce:
    """Runs the real agent, then fails the first run that handled an approval answer: the
    refund tool has run, `finish` has not."""

    def __init__(self, inner: Any, crash: BaseException) -> None:
        self.inner = inner
        self.tools = inner.tools
        self.crash = crash
        self.crashed = False

    def run(self, run: Run) -> None:
        self.inner.run(run)
        if not self.crashed and any(isinstance(e, ApprovalAnswer) for e in run.events):
            self.crashed = True
            raise self.crash


class ProcessDied(BaseException):
    """A crash nothing in the worker catches: no finish, the lease is left to lapse."""


@pytest.fixture
def desk(store: Store) -> Desk:
    return Desk(store)


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


# -- digests -------------------------------------------------------------------------------


def _busy_period(desk: Desk) -> int:
    """A digest every 2 hours, and a first period with one of everything a digest counts.

    Returns the dead event's id.
    """
    desk.say("digest every 2 hours")  # message 1
    desk.tick()
    assert [(t.kind, t.next_at) for t in desk.store.timers(INBOX)] == [("every", T0 + 2 * HOUR)]
    for order in ("1", "2", "3"):  # messages 2-4
        desk.say(f"refund order {order}")
    desk.tick(T0 + 10)
    ids = [a.id for a in desk.store.approvals(INBOX)]
    assert len(ids) == 3
    desk.store.answer(ids[0], "yes", BOSS, T0 + 20)
    desk.store.answer(ids[1], "no", BOSS, T0 + 20)
    desk.tick(T0 + 20)
    desk.tick(T0 + 10 + TTL)  # order 3 expires
    dead = desk.poison()
    desk.kill_poison(dead)
    desk.tick(T0 + 2 * HOUR - 100)
    desk.say("refund order 4")  # message 5, still pending at the digest
    desk.tick()
    assert not desk.with_prefix("Digest since")
    return dead


def test_a_digest_summarises_the_period_as_a_normal_post(make_store: MakeStore) -> None:
    desk = Desk(make_store())
    dead = _busy_period(desk)
    desk.tick(T0 + 2 * HOUR)
    [digest] = desk.with_prefix("Digest since")
    assert (digest.channel, digest.priority, digest.status) == ("D1", "normal", "sent")
    text = digest.text
    assert f"Digest since {utc(T0)}" in text
    assert "messages handled: 5" in text
    assert "1 approved, 1 denied, 1 expired, 1 pending" in text
    assert "refunds done: 1" in text
    assert re.search(rf"dead events: 1 \(ids {dead}\)", text), text


def test_digest_counts_reset_after_each_digest(make_store: MakeStore) -> None:
    desk = Desk(make_store())
    dead = _busy_period(desk)
    desk.tick(T0 + 2 * HOUR)
    desk.say("one more thing")
    desk.tick(T0 + 2 * HOUR + 10)
    desk.tick(T0 + 2 * HOUR - 100 + TTL)  # order 4 expires in the second period
    desk.tick(T0 + 4 * HOUR)
    _, second = desk.with_prefix("Digest since")
    text = second.text
    assert f"Digest since {utc(T0 + 2 * HOUR)}" in text
    assert "messages handled: 1" in text
    assert "0 approved, 0 denied, 1 expired, 0 pending" in text
    assert "refunds done: 0" in text
    assert f"ids {dead}" in text  # still dead: still reported
    assert second.status == "sent"


@pytest.mark.parametrize(
    ("command", "period", "skipped", "unit"),
    [("digest every 1 hour", HOUR, 4, "periods"), ("digest daily at 09:00", DAY, 2, "days")],
    ids=["every", "daily"],
)
def test_a_digest_after_an_outage_says_how_much_it_covers(
    desk: Desk, command: str, period: int, skipped: int, unit: str
) -> None:
    desk.say(command)
    desk.tick()
    [timer] = desk.store.timers(INBOX)
    first = timer.next_at
    desk.tick(first + skipped * period + 5)  # the scheduler was down for several periods
    [digest] = desk.with_prefix("Digest since")
    assert re.search(rf"\b{skipped + 1} {unit}\b", digest.text), digest.text
    desk.tick(first + (skipped + 1) * period)  # the next one is an ordinary digest
    assert len(desk.with_prefix("Digest since")) == 2
    assert not re.search(rf"\b\d+ {unit}\b", desk.with_prefix("Digest since")[1].text)


def test_digest_daily_uses_the_users_time_zone(store: Store) -> None:
    zones = {USER: "America/New_York"}
    desk = Desk(store, tz_lookup=lambda user: zones.get(user, ""))
    desk.say("digest daily at 07:30")
    desk.tick()
    [timer] = store.timers(INBOX)
    local = datetime.fromtimestamp(timer.next_at, ZoneInfo("America/New_York"))
    assert local.strftime("%H:%M") == "07:30"
    assert T0 < timer.next_at <= T0 + DAY
    desk.tick(timer.next_at)
    [digest] = desk.with_prefix("Digest since")
    assert digest.priority == "normal"


@pytest.mark.parametrize(
    "tz_lookup",
    [None, lambda user: "", lambda user: "Mars/Olympus_Mons"],
    ids=["no-lookup", "unknown-user", "unknown-zone"],
)
def test_digest_daily_falls_back_to_utc(
    store: Store, tz_lookup: Callable[[str], str] | None
) -> None:
    desk = Desk(store, tz_lookup=tz_lookup)
    desk.say("digest daily at 07:30")
    desk.tick()
    [timer] = store.timers(INBOX)
    assert timer.next_at == int(datetime(2023, 11, 15, 7, 30, tzinfo=UTC).timestamp())
    assert desk.texts() and desk.texts()[0].startswith("Handled 1 message.")


def test_digest_off_removes_the_timer(desk: Desk) -> None:
    desk.say("digest every 1 hour")
    desk.tick()
    assert [t.id for t in desk.store.timers(INBOX)] == [f"{INBOX}/digest"]
    desk.say("digest off")
    desk.tick(T0 + 60)
    assert desk.store.timers(INBOX) == []
    desk.tick(T0 + 5 * HOUR)
    assert not desk.with_prefix("Digest since")


def test_digest_off_withdraws_the_digest_the_gap_still_holds(desk: Desk) -> None:
    """`digest off` sends nothing more: a digest earned before it, still held by the gap, is
    neither merged into the confirmation nor sent later."""
    desk.say("digest every 1 minute")
    desk.tick()
    desk.tick(T0 + 60)  # the first digest goes out and starts the gap
    desk.say("hello")
    desk.tick(T0 + 61)
    desk.tick(T0 + 120)  # the second is earned and held by the gap
    assert [r.status for r in desk.rows("digest")] == ["sent", "pending"]
    desk.say("digest off")
    desk.tick(T0 + 130)
    assert desk.sender.parts[-1].text == "Handled 1 message.\nDigest off."
    assert [r.status for r in desk.rows("digest")] == ["sent"]
    desk.tick(T0 + 5 * HOUR)
    assert sum("Digest since" in p.text for p in desk.sender.parts) == 1


# -- status --------------------------------------------------------------------------------


def _status_scene(desk: Desk) -> tuple[int, int, str, str]:
    """A dead event, a pending one (failed once, in backoff), an open approval, a digest."""
    desk.say("digest every 1 hour")
    desk.tick()
    dead = desk.poison()
    desk.kill_poison(dead)
    desk.say("refund order 77")
    desk.tick(desk.now + 1)
    [approval] = desk.store.approvals(INBOX)
    pending = desk.poison()
    desk.tick(desk.now + 1)  # fails once: pending again, waiting out its backoff
    assert desk.store.event(pending).status == "pending"  # type: ignore[union-attr]
    desk.say("status")
    desk.tick()
    [status] = [t for t in desk.texts() if "Status:" in t]
    return dead, pending, approval.id, status


def test_status_reports_events_approvals_and_next_digest(desk: Desk) -> None:
    dead, _, approval_id, status = _status_scene(desk)
    assert "1 pending event" in status
    assert re.search(rf"1 dead \(ids {dead}\)", status), status
    assert f"Open approvals: {approval_id}" in status
    assert f"Next digest: {utc(T0 + HOUR)}" in status


def test_status_names_the_pending_events(desk: Desk) -> None:
    dead, pending, _, status = _status_scene(desk)
    lines = [x for x in status.splitlines() if not x.startswith(("Open approvals", "Next digest"))]
    about_events = "\n".join(lines).replace(f"ids {dead}", "")
    assert re.search(rf"\b{pending}\b", about_events), status


# -- retried runs --------------------------------------------------------------------------


def test_a_retried_run_does_not_double_count_or_ask_twice(make_store: MakeStore) -> None:
    store = make_store()
    desk = Desk(store, holder="worker-b", ttl=2 * HOUR)
    desk.say("digest every 1 hour")
    desk.tick()
    for text in ("refund order 9", "hello", "anyone?"):
        desk.say(text)
    # Worker A claims the batch, runs the agent, then stalls: its lease lapses unfinished.
    claim = store.acquire_and_claim(INBOX, "worker-a", T0 + 10)
    assert claim is not None and len(claim.events) == 3
    _, runner_a = desk_runner(store, clock=desk.clock, ttl=2 * HOUR)
    stalled = runner_a.run(claim, lambda: store.session(INBOX), T0 + 10, lambda: None)
    [asked] = stalled.approvals
    # Worker B takes over once the lease has lapsed and runs the same events again (each
    # retried event alone: as many rounds as that takes).
    desk.settle(T0 + 10 + store.settings.lease_ttl + 1)
    assert [e.status for e in store.events(INBOX)] == ["done"] * 4
    # Worker A wakes up and tries to finish: fenced off, nothing of it is written.
    assert store.finish(claim, stalled, desk.now) is False
    # The same message asks under the same request id on every run: one approval, one prompt.
    assert [a.id for a in store.approvals(INBOX)] == [asked.id]
    assert len([r for r in desk.rows() if r.ref is not None]) == 1
    # The refund's message is answered by its prompt alone; the other three by replies.
    assert sum(int(r.text.split()[1]) for r in desk.with_prefix("Handled")) == 3
    desk.tick(T0 + HOUR)
    [digest] = desk.with_prefix("Digest since")
    assert "messages handled: 4" in digest.text
    assert "0 expired, 1 pending" in digest.text


# -- the agent's boundaries ----------------------------------------------------------------


def test_the_agent_is_never_given_a_token(store: Store) -> None:
    env = {
        "SLACK_BOT_TOKEN": "xoxb-secret",
        "SLACK_APP_TOKEN": "xapp-secret",
        "SLACK_SIGNING_SECRET": "signing-secret",
        "REFUND_LEDGER_URL": "http://127.0.0.1:9/ledger",
    }
    setup = make_setup(desk_config(store), store, ZoneLookup(None), env)
    assert not [f.name for f in dataclasses.fields(Setup) if "token" in f.name.lower()]
    assert dict(setup.env) == {"REFUND_LEDGER_URL": "http://127.0.0.1:9/ledger"}
    assert not [name for name in inspect.signature(Run).parameters if "token" in name.lower()]
    params = inspect.signature(RefundDesk).parameters
    assert not [name for name in params if "token" in name.lower()]
    with pytest.raises(TypeError):
        RefundDesk(setup, token="xoxb-secret")  # type: ignore[call-arg]


class Spy:
    """A tool that counts its calls: (args, idempotency key) each time it acts."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, str]] = []

    def __call__(self, args: Any, key: str) -> dict[str, Any]:
        self.calls.append((args, key))
        return {"done": args, "call": len(self.calls)}


class Asker(Agent):
    """`ask <what>` asks for `tool` with {"what": ...}; `step` runs an own step; an answer is
    told with the tool's result. `fail_once` fails the first run after it acted."""

    def __init__(self, tool: Spy | None = None, *, fail_once: bool = False) -> None:
        self.tools = [Tool("tool", tool)] if tool else []
        self.looked: list[str] = []
        self.fail_once = fail_once

    def run(self, run: Run) -> None:
        for e in run.events:
            if isinstance(e, Message) and e.text.startswith("ask "):
                for what in e.text.split()[1:]:
                    try:
                        asked = run.ask("tool", {"what": what}, summary=f"do {what}", to=e)
                    except InvalidInput as exc:
                        asked = f"refused: {exc}"
                    run.reply(f"asked: {asked}", to=e)
            elif isinstance(e, Message) and e.text == "step":
                found = run.step("look_up", self._look)
                run.reply(f"looked up: {found}", to=e)
            elif isinstance(e, ApprovalAnswer):
                run.reply(f"{e.answer}: {json.dumps(e.result)} {e.error or ''}".strip(), to=e)
        if self.fail_once:
            self.fail_once = False
            raise RuntimeError("the run fails after acting")

    def _look(self, key: str) -> str:
        self.looked.append(key)
        return f"order 1 is late ({len(self.looked)})"


class World:
    """A custom agent behind production's runner, the loops, a clock and a sender."""

    def __init__(self, store: Store, agent: Any, clock: ManualClock | None = None) -> None:
        self.store = store
        self.clock = clock or ManualClock(T0)
        config = desk_config(store)
        runner = build_runner(
            config, store, None, factory=lambda _s: agent, env={}, clock=self.clock
        )
        self.worker = Worker(store=store, clock=self.clock, runner=runner)
        self.scheduler = Scheduler(store=store, clock=self.clock)
        self.dispatcher = Dispatcher(store=store, clock=self.clock, sender=RecordingSender())

    def say(self, text: str) -> None:
        n = next(_event_ids)
        message = Message(text=text, user=USER, team=TEAM, channel="D1", ts=f"{T0}.{n:06d}")
        self.store.ingest(INBOX, "slack", f"Ev{n:08d}", message.to_wire(), self.clock.now)

    def tick(self, at: int) -> None:
        self.clock.now = at
        self.scheduler.tick(at)
        self.worker.tick(at)
        self.dispatcher.tick(at)

    def texts(self) -> list[str]:
        return [r.text for r in self.store.outbox(inbox=INBOX) if r.kind == "post"]


def test_an_own_step_runs_at_once_with_its_key_and_a_retry_gets_its_result(store: Store) -> None:
    """What a tool allowed without asking was: it runs in the run, with a stable key; a retried
    run gets its recorded result back instead of calling it again."""
    agent = Asker(fail_once=True)
    world = World(store, agent)
    world.say("step")
    world.tick(T0)
    assert len(agent.looked) == 1 and world.texts() == []  # it acted; the run failed after
    world.tick(T0 + 100)  # past the backoff: the retry
    assert len(agent.looked) == 1
    assert world.texts() == ["looked up: order 1 is late (1)"]
    [step] = store.recorded_steps(inbox=INBOX, name="look_up")
    assert (step.key, step.result) == (agent.looked[0], "order 1 is late (1)")


def test_a_tool_the_agent_does_not_offer_is_neither_asked_for_nor_run(store: Store) -> None:
    """What a denied tool was: refused without running, whether asked for or answered."""
    spy = Spy()
    world = World(store, Asker(spy))
    world.say("ask wipe")
    world.tick(T0)
    [approval] = store.approvals(INBOX)
    # The agent no longer offers the tool (a new version) when the yes arrives: nothing runs.
    later = World(store, Asker(None), clock=world.clock)
    assert store.answer(approval.id, "yes", BOSS, T0 + 5).outcome == "yes"
    later.tick(T0 + 5)
    assert spy.calls == []
    assert store.recorded_steps(inbox=INBOX) == []
    assert world.texts()[-1] == "yes: null the agent has no tool 'tool'; nothing ran"
    # And it cannot ask for a tool it does not offer.
    later.say("ask wipe")
    later.tick(T0 + 10)
    assert world.texts()[-1] == (
        "asked: refused: no tool 'tool' to ask about (the agent's tools: none)"
    )
    assert len(store.approvals(INBOX)) == 1


def test_asking_runs_nothing_and_a_yes_runs_the_tool_once_per_request(store: Store) -> None:
    """What an `ask` tool was: nothing runs before a yes; after it the tool runs once per
    request id (its idempotency key), also when the answer's run fails and is retried."""
    spy = Spy()
    agent = Asker(spy)
    world = World(store, agent)
    world.say("ask one two")
    world.tick(T0)
    first, second = store.approvals(INBOX)
    assert spy.calls == []
    assert world.texts()[:2] == [f"asked: {first.id}", f"asked: {second.id}"]
    prompts = [r for r in store.outbox(inbox=INBOX) if r.ref in (first.id, second.id)]
    assert [r.text for r in prompts] == [
        f"Approval needed: do one for <@{USER}>",
        f"Approval needed: do two for <@{USER}>",
    ]
    agent.fail_once = True
    for approval in (first, second):
        assert store.answer(approval.id, "yes", BOSS, T0 + 5).outcome == "yes"
    world.tick(T0 + 5)  # both tools run; the run fails after
    for at in (T0 + 200, T0 + 400):  # the retries (each answer alone) get their results back
        world.tick(at)
    assert spy.calls == [({"what": "one"}, first.id), ({"what": "two"}, second.id)]
    assert sorted(t for t in world.texts() if t.startswith("yes")) == [
        'yes: {"done": {"what": "one"}, "call": 1}',
        'yes: {"done": {"what": "two"}, "call": 2}',
    ]
    assert sorted(s.key for s in store.recorded_steps(name="tool")) == sorted([first.id, second.id])


def test_the_refund_tool_refunds_once_per_request_and_once_per_order(store: Store) -> None:
    desk, _ = desk_runner(store)
    [refund] = desk.tools
    assert refund.name == "refund_order"
    results = [refund.fn({"order_id": "5"}, key) for key in ("refund-x", "refund-x", "refund-y")]
    assert results[:2] == [{"refunded": True, "order_id": "5"}] * 2
    assert results[2]["refunded"] is False
    assert results[2]["already"] == (
        f"Order 5 was already refunded on {utc(T0)} (request refund-x)."
    )
    [record] = store.recorded_steps(name="refund_order:once")
    assert (record.key, record.result) == (
        "refund_order:5",
        {"order_id": "5", "request": "refund-x"},
    )


# -- quiet digests and merged digests (issue 13) --------------------------------------------


def test_a_quiet_period_posts_nothing_and_the_next_digest_with_news_covers_it(
    make_store: MakeStore,
) -> None:
    desk = Desk(make_store(), quiet_digests=True)
    desk.say("digest every 1 hour")
    desk.tick()
    desk.tick(T0 + HOUR)  # the command was a message handled: news
    assert len(desk.with_prefix("Digest since")) == 1
    desk.tick(T0 + 2 * HOUR)  # nothing new: nothing said
    desk.tick(T0 + 3 * HOUR)
    assert len(desk.with_prefix("Digest since")) == 1
    assert len([p for p in desk.sender.parts if p.text.startswith("Digest")]) == 1
    desk.say("hello")
    desk.tick(T0 + 3 * HOUR + 10)
    desk.tick(T0 + 4 * HOUR)
    _, digest = desk.with_prefix("Digest since")
    assert f"Digest since {utc(T0 + HOUR)}" in digest.text
    assert "This digest covers 3 periods." in digest.text
    assert "messages handled: 1" in digest.text
    desk.tick(T0 + 5 * HOUR)  # quiet again, after the reset
    assert len(desk.with_prefix("Digest since")) == 2


def test_a_new_dead_event_is_news_for_a_quiet_digest(make_store: MakeStore) -> None:
    desk = Desk(make_store(), quiet_digests=True)
    desk.say("digest every 1 hour")
    desk.tick()
    dead = desk.poison()
    desk.kill_poison(dead)
    desk.tick(T0 + HOUR)
    [digest] = desk.with_prefix("Digest since")
    assert f"dead events: 1 (ids {dead})" in digest.text
    desk.tick(T0 + 2 * HOUR)  # still dead, but already reported: nothing new
    assert len(desk.with_prefix("Digest since")) == 1


def test_digests_held_by_the_gap_go_out_as_one_digest_covering_the_span(
    make_store: MakeStore,
) -> None:
    desk = Desk(make_store(outbox_gap=HOUR))
    desk.say("digest every 10 minutes")
    desk.tick()
    for period in range(1, 7):  # one message a period (answered elsewhere, so the urgent reply
        desk.say(f"note {period}", channel="C9", kind="mention")  # takes no digest along)
        desk.tick(T0 + period * 600 - 5)
        desk.tick(T0 + period * 600)
    sent = [p for p in desk.sender.parts if p.text.startswith("Digest since")]
    assert len(sent) == 1  # the first digest started the gap
    desk.tick(T0 + 600 + HOUR)
    sent = [p for p in desk.sender.parts if p.text.startswith("Digest since")]
    assert len(sent) == 2
    merged = sent[1].text
    assert merged.count("Digest since") == 1, merged
    assert f"Digest since {utc(T0 + 600)}" in merged
    # the digests of 20, 30, 40, 50 and 60 minutes, and the one due as the gap ends (70)
    assert "This digest covers 6 periods." in merged
    assert "messages handled: 5" in merged  # summed, not the last period's 0 or 1
    assert len(sent[1].row_ids) == 6
    assert all(r.status == "sent" for r in desk.with_prefix("Digest since"))


# -- the approval caps ---------------------------------------------------------------------

CAPS = "(WAKEFUL_MAX_APPROVALS_PER_RUN, WAKEFUL_MAX_OPEN_APPROVALS)"


def test_a_message_naming_2222_orders_asks_for_5_and_says_once_how_many_were_not(
    desk: Desk,
) -> None:
    text = " ".join(f"refund order {n:04d}" for n in range(2222))
    assert len(text) > 39_000
    desk.say(text)
    desk.tick()
    assert [a.args["order_id"] for a in desk.store.approvals(INBOX)] == [
        "0000",
        "0001",
        "0002",
        "0003",
        "0004",
    ]
    assert sum(r.text.startswith("Approval needed") for r in desk.rows()) == 5
    [reply] = desk.with_prefix("Handled 1 message.")
    assert reply.text.splitlines()[1:] == [  # the five asks are their prompts, said once
        "I asked for 5 approvals; 2217 more were not asked: at most 5 per message and 20 open "
        f"at once {CAPS}.",
    ]
    assert sum(CAPS in r.text for r in desk.rows()) == 1  # told once: the engine had nothing to add


def test_past_20_open_approvals_a_refund_is_not_asked_and_the_person_is_told(
    desk: Desk,
) -> None:
    for n in range(4):
        desk.say(" ".join(f"refund order {n}{k}" for k in range(5)))
        desk.tick(T0 + n)
    assert len([a for a in desk.store.approvals(INBOX) if a.answer is None]) == 20
    desk.say("refund order 77")
    desk.tick(T0 + 10)
    assert len(desk.store.approvals(INBOX)) == 20
    assert desk.texts()[-1] == (
        "Handled 1 message.\n1 approval was not asked: at most 5 per message and 20 open at "
        f"once {CAPS}."
    )
