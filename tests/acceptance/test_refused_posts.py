"""Issue 27 through the real `wakeful serve` and the emulator, on both stores: a post Slack
refuses for good is told once to the person who caused it, and a reply under the bot's own
top-level post reaches the agent without a mention.

One app per backend for the module (helpers from
tests/support/slack_app.py); each test has its own users
and channels.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.test_refusal_notices import NOT_IN_CHANNEL
from tests.support.slack_app import Wakeful, eventually, inbox, serving, settle


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.pg)])
def app(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Wakeful]:
    with serving(request.param, tmp_path_factory.mktemp(f"refusals-{request.param}")) as running:
        yield running


def test_a_reminder_in_a_channel_the_bot_is_not_in_is_told_once_to_its_setter(
    app: Wakeful,
) -> None:
    user, channel, dm = "U27001", "C27001", "D27001"
    app.emu.leave_channel(channel)
    key = f"refused-{app.backend}"
    url = app.emu.response_url_for(key)
    assert (
        app.sender.command(
            user, "remind me in 1 seconds to stretch", channel, response_url=url
        ).status
        == 200
    )
    assert app.emu.wait_for(lambda e: bool(e.responses(key)), 10)
    assert app.emu.responses(key)[0]["text"].startswith("I'll remind you in 1 seconds: stretch")

    app.wait_post(dm, "I couldn't post in", timeout=10)
    settle(app, inbox(user))  # nothing else comes: no second notice, no retry of the reminder
    assert [m["text"] for m in app.emu.messages(dm)] == [NOT_IN_CHANNEL]
    assert app.emu.messages(channel) == []
    mine = [
        c.params.get("channel")
        for c in app.emu.calls("chat.postMessage")
        if c.params.get("channel") in (channel, user)
    ]
    assert sorted(mine) == [channel, user], mine  # one refused post, one notice
    rows = app.store.outbox(inbox=inbox(user))
    posts = [r for r in rows if r.channel == channel and r.kind == "post"]
    assert [(r.status, r.error) for r in posts] == [("failed", "not_in_channel")]
    assert app.emu.ephemerals(channel) == []  # the confirmation went by the response_url
    assert [(r.kind, r.status) for r in rows if r.channel == user] == [("notice", "sent")]


def test_a_reply_under_the_bots_own_top_level_post_reaches_the_agent(app: Wakeful) -> None:
    user, other, channel = "U27010", "U27011", "C27010"
    app.emu.add_channel(channel)
    key = f"thread-{app.backend}"
    url = app.emu.response_url_for(key)
    app.sender.command(user, "remind me in 1 seconds to stand up", channel, response_url=url)
    app.wait_post(channel, "Reminder: stand up", timeout=10)
    [reminder] = app.posts(channel, "Reminder: stand up")
    assert not reminder.get("thread_ts"), "the reminder was meant to be a top-level post"
    # The post is recorded just after Slack's answer; a person replies later than that.
    assert eventually(lambda: app.store.takes_part(channel, reminder["ts"]), 10)

    reply = app.sender.message(
        other, "done!", channel=channel, channel_type="channel", thread_ts=reminder["ts"]
    )
    assert reply.status == 200
    stored = app.store.event_by_key("slack", str(reply.event_id))
    assert stored is not None and stored.inbox == inbox(other), "the reply was dropped"
    assert eventually(
        lambda: any(
            m.get("thread_ts") == reminder["ts"] and m["ts"] != reminder["ts"]
            for m in app.emu.messages(channel)
        ),
        10,
    ), f"no answer in the reminder's thread: {app.emu.messages(channel)}"
