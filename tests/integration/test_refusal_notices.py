"""A post Slack refuses for good is told once to the person who caused it (bot/slack/refusals.py):
the real Dispatcher and SlackSender, a real store, the emulator refusing as Slack does."""

from __future__ import annotations

import pytest

from tests.conftest import T0, MakeStore
from wakeful.bot.slack.refusals import notice_text
from wakeful.bot.slack.sender import SlackSender, make_client
from wakeful.core.clock import ManualClock
from wakeful.core.dispatcher import Dispatcher
from wakeful.core.effects import Post
from wakeful.devtools.emulator import SlackEmulator

TOKEN = "xoxb-refusals"
PERSON = "T1:U27001"
NOT_IN_CHANNEL = (
    "I couldn't post in <#C27001>: I'm not a member of that channel. "
    "Invite me with `/invite @wakeful` there, then ask me again.\n>Reminder: stretch"
)


def drain(store_dispatcher: Dispatcher, clock: ManualClock, passes: int = 4) -> None:
    for _ in range(passes):
        store_dispatcher.tick(clock.now)
        clock.now += 1


@pytest.fixture
def emu() -> SlackEmulator:
    with SlackEmulator(bot_token=TOKEN) as e:
        yield e  # type: ignore[misc]


def dispatcher(make_store: MakeStore, emu: SlackEmulator) -> tuple[Dispatcher, ManualClock]:
    store = make_store()
    sender = SlackSender(make_client(TOKEN, emu.api_url), sleep=lambda _s: None)
    clock = ManualClock(T0)
    return Dispatcher(store=store, sender=sender, clock=clock), clock


def test_the_notice_text_is_the_contract() -> None:
    assert notice_text("not_in_channel", "C27001", "Reminder: stretch") == NOT_IN_CHANNEL
    assert notice_text("channel_is_archived", "C2", "") == (
        "I couldn't post in <#C2>: that channel is archived. "
        "Ask me again in a channel that is not archived."
    )
    assert notice_text("invalid_blocks", "C2", "x") is None  # nothing the person can do


def test_a_post_refused_for_not_in_channel_is_told_once_in_the_persons_dm(
    make_store: MakeStore, emu: SlackEmulator
) -> None:
    d, clock = dispatcher(make_store, emu)
    emu.leave_channel("C27001")
    d.store.post(PERSON, [Post("C27001", "Reminder: stretch", priority="urgent")], T0)
    d.store.post(PERSON, [Post("C27001", "and another", priority="urgent")], T0)
    drain(d, clock)
    rows = d.store.outbox(inbox=PERSON)
    parked = [r for r in rows if r.channel == "C27001"]
    assert parked and {(r.status, r.error) for r in parked} == {("failed", "not_in_channel")}
    [notice] = [r for r in rows if r.kind == "notice"]
    assert notice.status == "sent" and notice.channel == "U27001"
    [dm] = emu.messages("D27001")
    assert dm["text"] == NOT_IN_CHANNEL
    assert emu.messages("C27001") == []


def test_a_refused_notice_is_parked_without_another_notice(
    make_store: MakeStore, emu: SlackEmulator
) -> None:
    d, clock = dispatcher(make_store, emu)
    emu.leave_channel("C27002")
    emu.remove_channel("D27002")  # the person's DM refuses too: no loop of notices
    d.store.post(PERSON.replace("27001", "27002"), [Post("C27002", "hi")], T0)
    drain(d, clock, passes=6)
    rows = d.store.outbox(inbox="T1:U27002")
    assert sorted((r.kind, r.status, r.error) for r in rows) == [
        ("notice", "failed", "channel_not_found"),
        ("post", "failed", "not_in_channel"),
    ]
    posts = [c for c in emu.calls("chat.postMessage")]
    assert len(posts) == 2, [c.params for c in posts]


def test_nobody_is_told_about_a_dm_or_a_conversation_inbox(
    make_store: MakeStore, emu: SlackEmulator
) -> None:
    d, clock = dispatcher(make_store, emu)
    emu.remove_channel("D27003")
    emu.leave_channel("C27003")
    d.store.post("T1:U27003", [Post("D27003", "hi")], T0)
    d.store.post("channel:C27003", [Post("C27003", "a webhook report")], T0)
    drain(d, clock)
    kinds = [r.kind for r in d.store.outbox(status="failed")]
    assert kinds == ["post", "post"]
    assert [r for r in d.store.outbox() if r.kind == "notice"] == []
