"""Issue 13 through the real HTTP front against the emulator, on both stores: thread
follow-ups, ephemerals in the prompt's thread, and what the operator sees of Slack's refusals.

One `wakeful serve` per backend for the module (helpers from test_slack_app); each test uses
users and channels of its own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.acceptance.test_slack_app import (
    APP_SETTINGS,
    BOT_USER,
    QUIET,
    TEAM,
    TOKEN,
    Wakeful,
    eventually,
    inbox,
    launch,
    message_at,
    pg_schema_url,
    shut_down,
    wait_prompt,
)
from wakeful.devtools.emulator import SlackEmulator


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.pg)])
def surfaces(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Wakeful]:
    """`wakeful serve` on each backend, with the emulator it posts to."""
    tmp = tmp_path_factory.mktemp(f"surfaces-{request.param}")
    with SlackEmulator(bot_token=TOKEN, bot_user_id=BOT_USER, team_id=TEAM) as emu:
        if request.param == "sqlite":
            running = launch(tmp, emu, str(tmp / "wakeful.db"), APP_SETTINGS)
            try:
                yield running
            finally:
                shut_down(running)
            return
        with pg_schema_url() as url:
            running = launch(tmp, emu, url, APP_SETTINGS, backend="postgres")
            try:
                yield running
            finally:
                shut_down(running)


def replies(app: Wakeful, channel: str, thread: str, needle: str = "") -> list[str]:
    return [
        str(m.get("text"))
        for m in app.emu.messages(channel)
        if m.get("thread_ts") == thread and m.get("ts") != thread and needle in str(m.get("text"))
    ]


def wait_reply(app: Wakeful, channel: str, thread: str, needle: str, count: int = 1) -> None:
    ok = app.emu.wait_for(lambda _e: len(replies(app, channel, thread, needle)) >= count, 10)
    assert ok, f"no {needle!r} in thread {thread} of {channel}: {app.emu.messages(channel)}"


# -- 1. thread follow-ups ----------------------------------------------------------------------


def test_a_reply_in_the_bots_thread_reaches_the_agent_without_a_mention(
    surfaces: Wakeful,
) -> None:
    app, user, channel = surfaces, "U13001", "C13001"
    mention_ts = app.sender.next_ts()
    assert app.sender.mention(user, "hello", channel=channel, ts=mention_ts).status == 200
    wait_reply(app, channel, mention_ts, "Handled 1 message.")

    follow = app.sender.message(
        user, "refund order 1301", channel=channel, channel_type="channel", thread_ts=mention_ts
    )
    assert follow.status == 200
    stored = app.store.event_by_key("slack", str(follow.event_id))
    assert stored is not None, "the follow-up was not stored before the ack"
    assert stored.inbox == inbox(user)
    assert stored.payload["thread_ts"] == mention_ts
    prompt_ts, _ = wait_prompt(app, channel, "1301")
    prompt = message_at(app, channel, prompt_ts)
    assert prompt.get("thread_ts") == mention_ts, "the answer left the thread"


def test_a_reply_in_a_thread_the_bot_posted_in_is_taken_in_a_private_channel_and_group_dm(
    surfaces: Wakeful,
) -> None:
    app = surfaces
    for user, channel, kind in (("U13002", "G13002", "group"), ("U13003", "G13003", "mpim")):
        mention_ts = app.sender.next_ts()
        app.sender.mention(user, "hi", channel=channel, ts=mention_ts)
        wait_reply(app, channel, mention_ts, "Handled 1 message.")
        # Another person answers in the thread the bot posted in.
        other = "U13009"
        app.sender.message(
            other, "me too", channel=channel, channel_type=kind, thread_ts=mention_ts
        )
        wait_reply(app, channel, mention_ts, "Handled 1 message.", count=2)
        assert app.store.events(inbox(other)), f"the {kind} follow-up was not stored"


def test_other_channel_messages_are_acknowledged_and_dropped(surfaces: Wakeful) -> None:
    app, user, channel = surfaces, "U13004", "C13004"
    top = app.sender.message(user, "just chatting", channel=channel, channel_type="channel")
    elsewhere = app.sender.message(
        user,
        "a thread the bot is not in",
        channel=channel,
        channel_type="channel",
        thread_ts=app.sender.next_ts(),
    )
    for reply in (top, elsewhere):
        assert reply.status == 200
        assert app.store.event_by_key("slack", str(reply.event_id)) is None
    # A reply that mentions the bot in its thread comes as app_mention too: stored once.
    mention_ts = app.sender.next_ts()
    app.sender.mention(user, "start", channel=channel, ts=mention_ts)
    wait_reply(app, channel, mention_ts, "Handled 1 message.")
    tagged = app.sender.message(
        user, f"<@{BOT_USER}> again", channel=channel, channel_type="channel", thread_ts=mention_ts
    )
    assert app.store.event_by_key("slack", str(tagged.event_id)) is None
    time.sleep(QUIET)
    assert app.store.events(inbox(user)) and len(app.store.events(inbox(user))) == 1


# -- 2. ephemerals in the prompt's thread --------------------------------------------------


def test_not_yours_and_already_answered_go_to_the_prompts_thread(surfaces: Wakeful) -> None:
    app, user, other, channel = surfaces, "U13005", "U13999", "C13005"
    mention_ts = app.sender.next_ts()
    app.sender.mention(user, "refund order 1305", channel=channel, ts=mention_ts)
    prompt_ts, rid = wait_prompt(app, channel, "1305")

    def click(who: str, action: str) -> None:
        reply = app.sender.block_action(
            who, action, rid, channel=channel, message_ts=prompt_ts, thread_ts=mention_ts
        )
        assert reply.status == 200

    click(other, "approve")
    assert app.emu.wait_for(lambda e: bool(e.ephemerals(channel, other)), 10)
    [note] = app.emu.ephemerals(channel, other)
    assert "not yours to answer" in note["text"]
    assert note["thread_ts"] == mention_ts, "the refusal went to the channel, not the thread"
    click(user, "approve")
    wait_reply(app, channel, mention_ts, "Refunded order 1305.")
    click(user, "deny")
    assert app.emu.wait_for(lambda e: bool(e.ephemerals(channel, user)), 10)
    [again] = app.emu.ephemerals(channel, user)
    assert again["text"].startswith("Already answered")
    assert again["thread_ts"] == mention_ts
    assert eventually(lambda: app.store.approval(rid) is not None)
