"""Operators are told in Slack (issue 33, item 5): with WAKEFUL_OPS_CHANNEL set, every event
that went dead, every post parked for good and every pause of the sends is a line in that
channel, one merged post per gap however many; an ops post Slack refuses is parked, logged once
and never reported again; unset, nothing is written. The real Dispatcher and SlackSender, the
emulator answering as Slack does, a real store of each kind."""

from __future__ import annotations

import itertools
import logging
import re

import pytest

from tests.conftest import T0, MakeStore
from wakeful.bot.slack.sender import SlackSender, make_client
from wakeful.core.clock import ManualClock
from wakeful.core.dispatcher import Dispatcher
from wakeful.core.effects import Effects, Post
from wakeful.core.inbox_id import InboxId
from wakeful.core.records import OutboxRow
from wakeful.core.rules.ops import MAX_LINES
from wakeful.core.store import Store
from wakeful.devtools.emulator import SlackEmulator

TOKEN = "xoxb-ops-channel"
OPS = "C0PS"
GAP = 60
BOOM = "RuntimeError: boom"
_keys = itertools.count(1)


@pytest.fixture
def emu() -> SlackEmulator:
    with SlackEmulator(bot_token=TOKEN) as e:
        yield e  # type: ignore[misc]


class World:
    """A store whose events go dead on demand, both ways an event dies, and a dispatcher
    sending to the emulator on a clock the test moves."""

    def __init__(self, make_store: MakeStore, emu: SlackEmulator, ops_channel: str = OPS):
        self.emu = emu
        self.store: Store = make_store(
            ops_channel=ops_channel, outbox_gap=GAP, max_attempts=2, backoff_base=1
        )
        self.clock = ManualClock(T0)
        sender = SlackSender(make_client(TOKEN, emu.api_url), sleep=lambda _s: None)
        self.dispatcher = Dispatcher(store=self.store, sender=sender, clock=self.clock)

    def ingest(self, inbox: str, n: int = 1) -> list[int]:
        ids = []
        for _ in range(n):
            key = f"EvOPS{next(_keys):06d}"
            payload = {"type": "message", "user": InboxId(inbox).user, "text": "boom"}
            stored = self.store.ingest(inbox, "slack", key, payload, self.clock.now)
            assert stored.event_id is not None
            ids.append(stored.event_id)
        return ids

    def dead_by_run(self, inbox: str, n: int = 1, ops: tuple[str, ...] = ()) -> list[int]:
        """Events its run dead-lettered in its finish (`effects.dead`)."""
        ids = self.ingest(inbox, n)
        claim = self.store.acquire_and_claim(inbox, "w1", self.clock.now)
        assert claim is not None and [e.id for e in claim.events] == ids
        effects = Effects(dead=dict.fromkeys(ids, f"{BOOM}\n  at line 2"), ops=list(ops))
        assert self.store.finish(claim, effects, self.clock.now, release=True)
        return ids

    def dead_by_attempts(self, inbox: str) -> int:
        """An event that failed its two attempts, made dead by the next claim."""
        [event_id] = self.ingest(inbox)
        for _ in range(2):
            claim = self.store.acquire_and_claim(inbox, "w1", self.clock.now)
            assert claim is not None and [e.id for e in claim.events] == [event_id]
            failed = Effects(failed={event_id: BOOM})
            assert self.store.finish(claim, failed, self.clock.now, release=True)
            self.clock.now += 2  # past the backoff (1 s, then 2 s)
        self.clock.now += 1
        self.store.acquire_and_claim(inbox, "w1", self.clock.now, release_if_empty=True)
        event = self.store.event(event_id)
        assert event is not None and event.status == "dead"
        return event_id

    def tick(self, seconds: int = 0) -> None:
        self.clock.now += seconds
        for _ in range(3):  # a park's line is queued by one pass and sent by the next
            self.dispatcher.tick(self.clock.now)

    def ops_rows(self) -> list[OutboxRow]:
        return [r for r in self.store.outbox() if InboxId(r.inbox).is_ops]

    def ops_posts(self) -> list[str]:
        return [str(m["text"]) for m in self.emu.messages(OPS)]


def listed(post: str) -> list[str]:
    """A post's lines without its heading, and each without its time."""
    return [re.sub(r"^- \d\d:\d\d:\d\d ", "", line) for line in post.splitlines()[1:]]


def dead_line(inbox: str, event_id: int, error: str = BOOM) -> str:
    return f"inbox {inbox}: event {event_id} from slack is dead: {error}"


def test_events_that_die_are_one_post_per_gap_naming_each(
    make_store: MakeStore, emu: SlackEmulator
) -> None:
    w = World(make_store, emu)
    [by_run] = w.dead_by_run("T1:U1")
    by_attempts = w.dead_by_attempts("T1:U2")
    w.tick()
    [post] = w.ops_posts()
    assert post.splitlines()[0] == "wakeful: 2 problems since the last report (times UTC)"
    assert listed(post) == [
        dead_line("T1:U1", by_run),  # the error's first line only
        dead_line("T1:U2", by_attempts, f"too many attempts; last error: {BOOM}"),
    ]
    [posted] = emu.messages(OPS)
    assert not w.store.takes_part(OPS, str(posted["ts"]))  # a reply under it is not the agent's
    sent_at = w.clock.now
    [later] = w.dead_by_run("T1:U3")
    while w.clock.now < sent_at + GAP - 1:
        w.tick(1)
        assert len(w.ops_posts()) == 1, "a second post inside the gap"
    w.tick(1)
    assert len(w.ops_posts()) == 2
    assert listed(w.ops_posts()[1]) == [dead_line("T1:U3", later)]
    assert {r.status for r in w.ops_rows()} == {"sent"}


def test_fifty_failures_in_one_gap_are_one_post(make_store: MakeStore, emu: SlackEmulator) -> None:
    w = World(make_store, emu)
    first = w.dead_by_run("T1:U4", n=50)
    w.tick()
    [post] = w.ops_posts()
    assert post.startswith("wakeful: 50 problems since the last report")
    lines = listed(post)
    assert lines[:MAX_LINES] == [dead_line("T1:U4", i) for i in first[:MAX_LINES]]
    assert lines[MAX_LINES:] == [
        f"…and {50 - MAX_LINES} more: `wakeful inspect` and `wakeful dead-letters` list them"
    ]
    w.dead_by_run("T1:U5", n=50)  # 50 more inside the gap: held, then one post for all
    for _ in range(GAP - 1):
        w.tick(1)
    assert len(w.ops_posts()) == 1
    w.tick(1)
    assert len(w.ops_posts()) == 2 and w.ops_posts()[1].startswith("wakeful: 50 problems")
    assert len(emu.calls("chat.postMessage")) == 2
    assert [r.status for r in w.ops_rows()] == ["sent"] * 100


def test_a_runs_own_lines_go_with_its_finish(make_store: MakeStore, emu: SlackEmulator) -> None:
    w = World(make_store, emu)
    said = (
        "tool refund given up after 1 day: <!channel> the service xoxb-1-SECRETTOKEN did not answer"
    )
    [event_id] = w.dead_by_run("T1:U6", ops=(said + "\nsecond line",))
    w.tick()
    [post] = w.ops_posts()
    assert listed(post) == [
        dead_line("T1:U6", event_id),
        "inbox T1:U6: tool refund given up after 1 day: &lt;!channel&gt; the service "
        "[redacted] did not answer",  # inert for Slack, redacted as a log line, one line
    ]


def test_a_post_parked_for_good_is_reported_where_and_why(
    make_store: MakeStore, emu: SlackEmulator
) -> None:
    w = World(make_store, emu)
    emu.leave_channel("C9")
    w.store.post("T1:U7", [Post("C9", "Reminder: stretch", priority="urgent")], T0)
    w.tick()
    [parked] = [r for r in w.store.outbox(inbox="T1:U7") if r.channel == "C9"]
    assert (parked.status, parked.error) == ("failed", "not_in_channel")
    [post] = w.ops_posts()
    assert listed(post) == [
        f"inbox T1:U7: a post to <#C9> was parked for good (outbox {parked.id}): not_in_channel"
    ]
    assert "stretch" not in post  # the person's words stay theirs


def test_a_refused_ops_post_is_parked_logged_once_and_never_reported(
    make_store: MakeStore, emu: SlackEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    w = World(make_store, emu)
    emu.leave_channel(OPS)
    w.dead_by_run("T1:U8")
    with caplog.at_level(logging.WARNING, logger="wakeful"):
        w.tick()
        for _ in range(3):
            w.tick(GAP)
    [row] = w.ops_rows()
    assert (row.status, row.error) == ("failed", "not_in_channel")
    said = [r.getMessage() for r in caplog.records if "parked" in r.getMessage()]
    assert len(said) == 1 and "an ops report, not reported again" in said[0], said
    assert emu.messages(OPS) == []


def test_a_pause_is_told_once_per_pause(make_store: MakeStore, emu: SlackEmulator) -> None:
    w = World(make_store, emu)
    for n in range(3):
        w.store.post(f"T1:U9{n}", [Post(f"C9{n}", "hello", priority="urgent")], T0)
    emu.fault("chat.postMessage", status=429, retry_after=30, times=3)
    w.tick()  # the sends meet 429s, one or more (concurrent), or a pause already in force
    emu.clear_faults()  # those not met stay unmet (when one pause deferred the others)
    [line] = w.ops_rows()
    assert line.text == "Slack sends paused for 30 s: rate limited (ratelimited)"
    w.tick(32)
    assert [len(emu.messages(f"C9{n}")) for n in range(3)] == [1, 1, 1]
    [post] = w.ops_posts()
    assert listed(post) == ["Slack sends paused for 30 s: rate limited (ratelimited)"]
    w.store.post("T1:U93", [Post("C93", "again", priority="urgent")], w.clock.now)
    emu.fault("chat.postMessage", status=429, retry_after=5)
    w.tick()
    assert len(w.ops_rows()) == 2  # a new pause is told too
    w.tick(GAP)
    assert listed(w.ops_posts()[1]) == ["Slack sends paused for 5 s: rate limited (ratelimited)"]


def test_a_pause_the_ops_post_met_is_not_reported(
    make_store: MakeStore, emu: SlackEmulator
) -> None:
    w = World(make_store, emu)
    w.dead_by_run("T1:U10")
    emu.fault("chat.postMessage", status=429, retry_after=3)
    w.tick()
    assert len(w.ops_rows()) == 1 and w.ops_posts() == []
    w.tick(5)
    assert len(w.ops_posts()) == 1 and [r.status for r in w.ops_rows()] == ["sent"]


def test_unset_tells_nothing(make_store: MakeStore, emu: SlackEmulator) -> None:
    w = World(make_store, emu, ops_channel="")
    w.dead_by_run("T1:U11", ops=("tool refund given up",))
    w.dead_by_attempts("T1:U12")
    emu.leave_channel("C9")
    w.store.post("T1:U11", [Post("C9", "x", priority="urgent")], w.clock.now)
    emu.fault("chat.postMessage", status=429, retry_after=2)
    w.store.post("T1:U12", [Post("C8", "y", priority="urgent")], w.clock.now)
    w.tick()
    w.tick(GAP)
    assert w.ops_rows() == []
    assert not any(r.inbox.startswith("ops") for r in w.store.outbox())


def test_a_workspaces_ops_rows_go_with_its_token(make_store: MakeStore, emu: SlackEmulator) -> None:
    """Distribution mode: `T…:C…` keeps the workspace on the rows' inbox (`ops:T22`), and the
    sender picks that workspace's token by it, as for any person of T22."""
    w = World(make_store, emu, ops_channel="T22:C0PS")
    asked: list[str | None] = []

    def tokens(team: str | None) -> str:
        asked.append(team)
        return TOKEN

    sender = SlackSender(make_client("", emu.api_url), sleep=lambda _s: None, tokens=tokens)
    w.dispatcher = Dispatcher(store=w.store, sender=sender, clock=w.clock)
    w.dead_by_run("T1:U13")
    w.tick()
    assert {r.inbox for r in w.ops_rows()} == {"ops:T22"}
    assert asked == ["T22"] and len(w.ops_posts()) == 1
