"""Issue 13 through the real HTTP front against the emulator, on both stores: thread
follow-ups, ephemerals in the prompt's thread, and what the operator sees of Slack's refusals.

One `wakeful serve` per backend for the module (helpers from
tests/support/slack_app.py); each test uses
users and channels of its own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.support.slack_app import (
    BOT_USER,
    QUICK_SETTINGS,
    TEAM,
    Wakeful,
    eventually,
    inbox,
    message_at,
    serving,
    settle,
    wait_prompt,
)


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.pg)])
def surfaces(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Wakeful]:
    """`wakeful serve` on each backend, with the emulator it posts to; no test here sends a
    burst, so the batch window is the quick one."""
    tmp = tmp_path_factory.mktemp(f"surfaces-{request.param}")
    with serving(request.param, tmp, QUICK_SETTINGS) as app:
        yield app


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
    settle(app, inbox(user))
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


# -- 3. the App Home tab -------------------------------------------------------------------


def home_text(app: Wakeful, user: str) -> str:
    from wakeful.bot.slack.home import as_text

    views = app.emu.homes(user)
    return as_text(views[-1]["blocks"]) if views else ""


def wait_home(app: Wakeful, user: str, needle: str) -> str:
    ok = app.emu.wait_for(lambda _e: needle in home_text(app, user), 10)
    assert ok, f"no {needle!r} in {user}'s Home tab: {home_text(app, user)}\n{app.tail()}"
    return home_text(app, user)


def test_the_home_tab_shows_pending_approvals_whose_buttons_work_like_the_prompts(
    surfaces: Wakeful,
) -> None:
    app, user = surfaces, "U13101"
    app.sender.message(user, "hi")
    app.wait_post(f"D{user[1:]}", "Handled 1 message.")
    assert app.emu.homes(user) == [], "a person who never opened Home costs no views.publish"
    assert app.sender.home_opened(user).status == 200
    text = wait_home(app, user, "Nothing waits for an answer.")
    assert "Dead letters" not in text, "only approvers see the operator's part"
    app.sender.message(user, "refund order 1311")
    _, rid = wait_prompt(app, f"D{user[1:]}", "1311")
    text = wait_home(
        app, user, "refund order 1311"
    )  # refreshed after that run, as the prompt says it
    assert "[Approve]  [Deny]" in text
    app.sender.home_action(user, "approve", rid)  # from the Home tab: no channel, no thread
    app.wait_post(f"D{user[1:]}", "Refunded order 1311.")
    text = wait_home(app, user, "order 1311 at")
    assert "Nothing waits for an answer." in text
    state = app.store.approval(rid)
    assert state is not None and (state.answer, state.answered_by) == ("yes", user)


def test_approvers_see_parked_posts_and_requeue_them_others_cannot(surfaces: Wakeful) -> None:
    app, user, approver = surfaces, "U13102", "U0APPROVER"
    channel = f"D{user[1:]}"
    app.emu.fault("chat.postMessage", error="channel_not_found", times=1)
    app.sender.message(user, "this reply is refused")
    parked: list[int] = []

    def found() -> bool:
        parked[:] = [r.id for r in app.store.outbox(status="failed", inbox=inbox(user))]
        return bool(parked)

    assert eventually(found), app.tail()
    row = parked[0]
    app.sender.home_opened(approver)
    text = wait_home(app, approver, f"outbox row {row} to {channel}")
    assert "[Requeue]" in text

    app.sender.home_opened(user)
    assert "Dead letters" not in wait_home(app, user, "Pending approvals")
    app.sender.home_action(user, "wakeful_requeue", f"outbox:{row}")  # not an approver
    settle(app, inbox(user))
    assert [r.status for r in app.store.outbox(inbox=inbox(user)) if r.id == row] == ["failed"]

    app.sender.home_action(approver, "wakeful_requeue", f"outbox:{row}")
    app.wait_post(channel, "Handled 1 message.")
    assert wait_home(app, approver, "No dead events, no parked posts.")


# -- 4. the slash command ------------------------------------------------------------------


def test_a_slash_command_is_stored_before_the_ack_and_answered_to_the_caller_alone(
    surfaces: Wakeful,
) -> None:
    app, user = surfaces, "U13201"
    url = app.emu.response_url_for(f"cmd-{user}-{app.backend}")
    stamp = int(time.time())
    reply = app.sender.command(user, "status", response_url=url, timestamp=stamp)
    assert reply.status == 200, reply.body
    events = app.store.events(inbox(user))
    assert len(events) == 1, "the command was not stored before the ack"
    assert events[0].source_id.startswith(f"command:{TEAM}:{user}:{stamp}:")
    assert app.emu.wait_for(lambda e: bool(e.responses(f"cmd-{user}-{app.backend}")), 10)
    [answer] = app.emu.responses(f"cmd-{user}-{app.backend}")
    assert answer["response_type"] == "ephemeral"
    assert answer["text"].startswith("Status:"), answer
    assert app.posts(f"D{user[1:]}") == [], "a command's answer is not a post"
    # Slack retries the same request (same timestamp, same text): nothing new is stored.
    again = app.sender.command(user, "status", response_url=url, timestamp=stamp)
    assert again.status == 200
    assert len(app.store.events(inbox(user))) == 1


def test_slash_digest_remind_and_dead_letters_for_approvers_only(surfaces: Wakeful) -> None:
    app, user, approver = surfaces, "U13202", "U0APPROVER"
    key = f"cmd2-{app.backend}"
    url = app.emu.response_url_for(key)
    app.sender.command(user, "digest every 1 hour", response_url=url)
    app.sender.home_opened(user)
    assert "Every 3600 s. Next digest" in wait_home(app, user, "Every 3600 s.")
    app.sender.command(user, "remind me in 1 seconds to breathe", response_url=url)
    app.sender.command(user, "dead-letters", response_url=url)
    assert app.emu.wait_for(lambda e: len(e.responses(key)) == 3, 10), app.emu.responses(key)
    texts = sorted(r["text"] for r in app.emu.responses(key))
    assert any("Digest set: every 1 hour." in t for t in texts)
    assert any("I'll remind you in 1 seconds: breathe" in t for t in texts)
    assert any(t.startswith("Only approvers") for t in texts)
    app.wait_post(f"D{user[1:]}", "Reminder: breathe")
    app.sender.command(approver, "dead-letters", response_url=url)
    assert app.emu.wait_for(lambda e: any("Dead events:" in r["text"] for r in e.responses(key)))


def test_an_expired_response_url_falls_back_to_an_ephemeral(surfaces: Wakeful) -> None:
    app, user = surfaces, "U13203"
    app.emu.fault("response_url", status=404, error="expired_url", times=1)
    url = app.emu.response_url_for(f"gone-{app.backend}")
    app.sender.command(user, "status", response_url=url)
    channel = f"D{user[1:]}"
    assert app.emu.wait_for(lambda e: bool(e.ephemerals(channel, user)), 10), app.tail()
    assert app.emu.ephemerals(channel, user)[0]["text"].startswith("Status:")


# -- 5. the assistant thread ---------------------------------------------------------------


def test_an_assistant_thread_is_greeted_once_with_suggested_prompts(surfaces: Wakeful) -> None:
    app, user = surfaces, "U13301"
    channel, thread = f"D{user[1:]}", app.sender.next_ts()
    app.sender.assistant_thread_started(user, thread_ts=thread)
    app.sender.assistant_thread_started(user, thread_ts=thread)  # delivered twice
    assert app.emu.wait_for(lambda e: bool(e.suggested_prompts(channel)), 10), app.tail()
    [prompts] = app.emu.suggested_prompts(channel)
    assert prompts["thread_ts"] == thread
    assert {p["message"] for p in prompts["prompts"]} >= {"status"}
    settle(app, inbox(user))
    assert len(replies(app, channel, thread, "Hi, I'm wakeful")) == 1


def test_a_run_in_an_assistant_thread_shows_is_thinking_until_the_reply(surfaces: Wakeful) -> None:
    app, user = surfaces, "U13302"
    channel, thread = f"D{user[1:]}", app.sender.next_ts()
    app.sender.message(user, "hello", thread_ts=thread)
    wait_reply(app, channel, thread, "Handled 1 message.")
    assert app.emu.wait_for(lambda e: len(e.statuses(channel)) >= 2, 10), app.emu.statuses()
    statuses = app.emu.statuses(channel)
    assert [s["status"] for s in statuses] == ["is thinking…", ""]
    assert {s["thread_ts"] for s in statuses} == {thread}
    thinking_at = next(c.at for c in app.emu.calls("assistant.threads.setStatus"))
    reply_at = next(
        c.at
        for c in app.emu.calls("chat.postMessage")
        if c.params.get("channel") == channel and c.params.get("thread_ts") == thread
    )
    assert thinking_at <= reply_at
    assert app.emu.shown_status(channel, thread) == ""


def test_opening_the_messages_tab_greets_once_and_pins_the_prompts(surfaces: Wakeful) -> None:
    """Issue 24: `app_home_opened` with `tab == "messages"` (the DM with the app, Slack's
    Agent messaging experience) pins the agent's suggested prompts to the tab (no thread_ts)
    and greets the person the first time only; the Home tab stays as it was."""
    app, user = surfaces, "U24302"
    channel = f"D{user[1:]}"
    first = app.sender.messages_tab_opened(user)
    assert first.status == 200
    assert app.sender.messages_tab_opened(user, event_id=first.event_id).status == 200  # retry
    assert app.emu.wait_for(lambda e: bool(e.suggested_prompts(channel)), 10), app.tail()
    app.wait_post(channel, "Hi")
    assert app.sender.messages_tab_opened(user).status == 200  # opened again later
    assert app.emu.wait_for(lambda e: len(e.suggested_prompts(channel)) >= 2, 10), app.tail()
    settle(app, inbox(user))
    prompts = app.emu.suggested_prompts(channel)
    assert len(prompts) == 2 and {p["thread_ts"] for p in prompts} == {None}
    assert {p["message"] for p in prompts[0]["prompts"]} >= {"status"}
    greetings = [m for m in app.emu.messages(channel) if m.get("user") == BOT_USER]
    assert len(greetings) == 1 and "thread_ts" not in greetings[0], greetings
    assert app.emu.homes(user) == []  # the Messages tab is not the Home tab


def test_a_feedback_click_is_one_typed_event_of_the_person_who_clicked(surfaces: Wakeful) -> None:
    """Slack's feedback buttons under a reply (`feedback_buttons`, action_id
    `wakeful_feedback`): the click is stored before the ack as a `Feedback` event of the
    clicker's inbox, keyed by the message, the person and the value (a double click is one)."""
    from wakeful.bot.slack.events import Feedback
    from wakeful.core.runner import typed

    app, user, channel, ts = surfaces, "U0FEED", "D0FEED", "1700000000.000900"
    for _ in range(2):
        click = app.sender.block_action(user, "wakeful_feedback", "positive", channel, ts)
        assert click.status == 200, click.body
    down = app.sender.block_action(user, "wakeful_feedback", "negative", channel, ts)
    assert down.status == 200
    stored = [typed(e) for e in app.store.events(inbox(user))]
    assert [(f.value, f.channel, f.message_ts) for f in stored if isinstance(f, Feedback)] == [
        ("positive", channel, ts),
        ("negative", channel, ts),
    ]
    bad = app.sender.block_action(user, "wakeful_feedback", "meh", channel, ts)
    assert bad.status == 400 and len(app.store.events(inbox(user))) == 2
