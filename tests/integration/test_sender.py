"""SlackSender through a real slack_sdk WebClient against the local Slack emulator.

Posts carry the dispatch metadata, a retried part is looked for before it is posted again,
Slack's failures map to transient or permanent errors, and posts to one channel are paced. The
sender's sleep and clock are fakes: nothing here waits in real time except the one client
timeout the timeout test is about.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.slack_response import SlackResponse

from tests.conftest import T0, MakeStore
from wakeful.bot.slack.sender import EVENT_TYPE, SlackSender, classify, make_client
from wakeful.core.clock import ManualClock
from wakeful.core.dispatcher import Dispatcher
from wakeful.core.effects import Post
from wakeful.core.errors import PermanentSendError, TransientSendError
from wakeful.core.rules.outbox import Part
from wakeful.devtools.emulator import SlackEmulator

TOKEN = "xoxb-sender-test"
INBOX = "T1:U1"
BLOCKS = [{"type": "section", "text": {"type": "mrkdwn", "text": "*hello*"}}]


class FakeTime:
    """The sender's clock and sleep: sleeping only moves the clock and is recorded."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def emu() -> Iterator[SlackEmulator]:
    with SlackEmulator(bot_token=TOKEN) as e:
        yield e


@pytest.fixture
def fake() -> FakeTime:
    return FakeTime()


@pytest.fixture
def sender(emu: SlackEmulator, fake: FakeTime) -> SlackSender:
    return SlackSender(make_client(TOKEN, emu.api_url), sleep=fake.sleep, clock=fake.clock)


def part(
    text: str = "hello",
    *,
    channel: str = "C1",
    thread_ts: str = "",
    kind: str = "post",
    blocks: list[dict[str, Any]] | None = None,
    retry: bool = False,
    user: str | None = None,
    target_ts: str | None = None,
    dispatch_id: str = "d-1",
    row: int = 1,
) -> Part:
    return Part(
        part_id=f"{dispatch_id}:{row}.0",
        dispatch_id=dispatch_id,
        kind=kind,
        channel=channel,
        thread_ts=thread_ts,
        text=text,
        blocks=blocks,
        row_ids=(row,),
        user=user,
        retry=retry,
        target_ts=target_ts,
    )


def posts(emu: SlackEmulator) -> int:
    return len(emu.calls("chat.postMessage"))


# -- what a post carries -------------------------------------------------------------------


def test_a_post_carries_the_dispatch_metadata(emu: SlackEmulator, sender: SlackSender) -> None:
    ts = sender.send(part("refund done", dispatch_id="d-7", row=3))
    [msg] = emu.messages("C1")
    assert (msg["ts"], msg["text"]) == (ts, "refund done")
    assert msg["metadata"] == {
        "event_type": EVENT_TYPE,
        "event_payload": {"dispatch_id": "d-7", "part_id": "d-7:3.0"},
    }
    assert EVENT_TYPE == "wakeful_dispatch"


def test_a_post_goes_into_its_thread(emu: SlackEmulator, sender: SlackSender) -> None:
    parent = make_client(TOKEN, emu.api_url).chat_postMessage(channel="C1", text="question")
    ts = sender.send(part("answer", thread_ts=parent["ts"]))
    reply = next(m for m in emu.messages("C1") if m["ts"] == ts)
    assert reply["thread_ts"] == parent["ts"]
    assert emu.calls("chat.postMessage")[-1].params["thread_ts"] == parent["ts"]


def test_a_top_level_post_has_no_thread(emu: SlackEmulator, sender: SlackSender) -> None:
    sender.send(part("top"))
    assert "thread_ts" not in emu.calls("chat.postMessage")[0].params


def test_a_post_carries_its_blocks(emu: SlackEmulator, sender: SlackSender) -> None:
    sender.send(part("fallback text", blocks=BLOCKS))
    [msg] = emu.messages("C1")
    assert (msg["blocks"], msg["text"]) == (BLOCKS, "fallback text")


def test_an_update_rewrites_the_target_message(emu: SlackEmulator, sender: SlackSender) -> None:
    ts = sender.send(part("Approve?"))
    new_blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": "Approved"}}]
    result = sender.send(part("Approved", kind="update", target_ts=ts, blocks=new_blocks, row=2))
    assert result == ts
    [call] = emu.calls("chat.update")
    assert (call.params["channel"], call.params["ts"]) == ("C1", ts)
    [msg] = emu.messages("C1")
    assert (msg["text"], msg["blocks"]) == ("Approved", new_blocks)
    assert posts(emu) == 1


def test_an_update_without_a_target_is_permanent(emu: SlackEmulator, sender: SlackSender) -> None:
    with pytest.raises(PermanentSendError):
        sender.send(part("Approved", kind="update"))
    assert emu.calls() == []


def test_an_ephemeral_goes_to_its_user_only(emu: SlackEmulator, sender: SlackSender) -> None:
    result = sender.send(part("not yours to answer", kind="ephemeral", user="U7"))
    [call] = emu.calls("chat.postEphemeral")
    assert call.params["user"] == "U7"
    [shown] = emu.ephemerals("C1", "U7")
    assert shown["text"] == "not yours to answer"
    assert result == shown["message_ts"]
    assert emu.messages("C1") == [] and posts(emu) == 0


# -- a retried part is looked for first ------------------------------------------------------


def test_a_retried_part_already_in_history_is_not_posted_again(
    emu: SlackEmulator, sender: SlackSender
) -> None:
    first = part("refund done")
    ts = sender.send(first)
    sender.send(part("something later", dispatch_id="d-2"))
    assert sender.send(replace(first, retry=True)) == ts
    assert posts(emu) == 2
    assert [m["text"] for m in emu.messages("C1")] == ["refund done", "something later"]
    assert emu.calls("conversations.history")


def test_a_retried_part_already_in_its_thread_is_not_posted_again(
    emu: SlackEmulator, sender: SlackSender
) -> None:
    parent = make_client(TOKEN, emu.api_url).chat_postMessage(channel="C1", text="question")
    first = part("answer", thread_ts=parent["ts"])
    ts = sender.send(first)
    assert sender.send(replace(first, retry=True)) == ts
    assert posts(emu) == 2  # the parent and one answer
    assert emu.calls("conversations.replies")


def test_a_retried_part_not_found_is_posted(emu: SlackEmulator, sender: SlackSender) -> None:
    sender.send(part("row one", row=1))  # same dispatch, another part id
    ts = sender.send(part("row two", row=2, retry=True))
    assert emu.calls("conversations.history")
    texts = [(m["ts"], m["text"]) for m in emu.messages("C1")]
    assert texts[-1] == (ts, "row two") and len(texts) == 2


def test_a_retried_part_is_found_behind_a_page_of_newer_messages(
    emu: SlackEmulator, sender: SlackSender
) -> None:
    first = part("refund done")
    ts = sender.send(first)
    client = make_client(TOKEN, emu.api_url)
    for i in range(120):
        client.chat_postMessage(channel="C1", text=f"chatter {i}")
    assert sender.send(replace(first, retry=True)) == ts
    assert posts(emu) == 121


# -- failures --------------------------------------------------------------------------------


def test_rate_limited_is_transient_with_retry_after(
    emu: SlackEmulator, sender: SlackSender
) -> None:
    emu.fault("chat.postMessage", status=429, retry_after=3)
    with pytest.raises(TransientSendError) as exc:
        sender.send(part())
    assert exc.value.retry_after == 3
    assert emu.messages("C1") == []


@pytest.mark.parametrize(("status", "error"), [(500, None), (502, "bad_gateway")])
def test_a_server_error_is_transient(
    emu: SlackEmulator, sender: SlackSender, status: int, error: str | None
) -> None:
    emu.fault("chat.postMessage", status=status, error=error)
    with pytest.raises(TransientSendError):
        sender.send(part())
    assert emu.messages("C1") == []


def test_a_timeout_is_transient_and_the_retry_finds_the_post(
    emu: SlackEmulator, fake: FakeTime
) -> None:
    slow = SlackSender(
        make_client(TOKEN, emu.api_url, timeout=1), sleep=fake.sleep, clock=fake.clock
    )
    emu.fault("chat.postMessage", delay=5)  # Slack posts it, then answers too late
    first = part("refund done")
    with pytest.raises(TransientSendError):
        slow.send(first)
    [msg] = emu.messages("C1")
    assert slow.send(replace(first, retry=True)) == msg["ts"]
    assert len(emu.messages("C1")) == 1


def test_slack_unreachable_is_transient(fake: FakeTime) -> None:
    with SlackEmulator(bot_token=TOKEN) as gone:
        api_url = gone.api_url  # a loopback port nobody listens on once this block ends
    down = SlackSender(make_client(TOKEN, api_url), sleep=fake.sleep, clock=fake.clock)
    with pytest.raises(TransientSendError):
        down.send(part())


@pytest.mark.parametrize("error", ["channel_not_found", "invalid_auth"])
def test_a_lost_channel_or_bad_token_is_permanent(
    emu: SlackEmulator, fake: FakeTime, error: str
) -> None:
    token = TOKEN
    if error == "channel_not_found":
        emu.remove_channel("C1")
    else:
        token = "xoxb-revoked"
    sender = SlackSender(make_client(token, emu.api_url), sleep=fake.sleep, clock=fake.clock)
    with pytest.raises(PermanentSendError, match=error):
        sender.send(part())
    assert emu.calls("chat.postMessage")[0].response["error"] == error


# -- pacing --------------------------------------------------------------------------------


def test_two_posts_to_one_channel_are_a_second_apart(
    emu: SlackEmulator, sender: SlackSender, fake: FakeTime
) -> None:
    sender.send(part("one", row=1))
    sender.send(part("two", row=2))
    assert fake.sleeps == [pytest.approx(1.0)]
    fake.now += 0.4
    sender.send(part("three", row=3))
    assert fake.sleeps[1:] == [pytest.approx(0.6)]
    assert len(emu.messages("C1")) == 3


def test_posts_to_different_channels_do_not_wait(
    emu: SlackEmulator, sender: SlackSender, fake: FakeTime
) -> None:
    for channel in ("C1", "C2", "D3"):
        sender.send(part("hi", channel=channel))
    fake.now += 1.0
    sender.send(part("again", channel="C1", row=2))  # a second has passed already
    assert fake.sleeps == []
    assert len(emu.messages("C2")) == 1


def test_a_reserved_turn_is_the_one_the_post_goes_at(
    emu: SlackEmulator, sender: SlackSender, fake: FakeTime
) -> None:
    # The running dispatcher takes a post's turn first and waits for it without a thread; the
    # post then goes at that turn without waiting again, and the next post comes after it.
    assert sender.reserve(part("one", row=1)) == 0
    assert sender.reserve(part("two", row=2)) == pytest.approx(1.0)
    assert sender.reserve(part("only you", kind="ephemeral", user="U7", row=3)) == 0
    sender.send(part("one", row=1))
    fake.now += 1.0  # the dispatcher waited for the second turn
    sender.send(part("two", row=2))
    assert fake.sleeps == []
    sender.send(part("three", row=4))  # no turn reserved: the next free one, a second later
    assert fake.sleeps == [pytest.approx(1.0)]
    assert [m["text"] for m in emu.messages("C1")] == ["one", "two", "three"]


def test_a_turn_reached_late_still_keeps_the_next_post_a_second_after_it(
    emu: SlackEmulator, sender: SlackSender, fake: FakeTime
) -> None:
    # Two turns taken a second apart; the first post is reached 0.4 s late (a busy machine).
    # Slack counts the gap between the posts it receives, so the second waits for the full
    # second after the first actually went, not for its own reserved turn.
    sender.reserve(part("one", row=1))
    sender.reserve(part("two", row=2))
    fake.now += 0.4
    sender.send(part("one", row=1))
    fake.now += 0.6  # the dispatcher waited for the second's reserved turn
    sender.send(part("two", row=2))
    assert fake.sleeps == [pytest.approx(0.4)]
    sender.send(part("three", row=3))  # and the next free turn follows the late one
    assert fake.sleeps == [pytest.approx(0.4), pytest.approx(1.0)]
    assert [m["text"] for m in emu.messages("C1")] == ["one", "two", "three"]


# -- classify ------------------------------------------------------------------------------


def api_error(status: int, error: str, headers: dict[str, str] | None = None) -> SlackApiError:
    response = SlackResponse(
        client=None,
        http_verb="POST",
        api_url="https://slack.test/api/chat.postMessage",
        req_args={},
        data={"ok": False, "error": error},
        headers=headers or {},
        status_code=status,
    )
    return SlackApiError(f"The request failed: {error}", response)


@pytest.mark.parametrize(
    ("status", "error", "headers", "retry_after"),
    [
        (429, "ratelimited", {"Retry-After": "7"}, 7),
        (429, "ratelimited", {"retry-after": "2"}, 2),
        (429, "ratelimited", {}, 1),
        (200, "ratelimited", {}, 1),
        (429, "ratelimited", {"Retry-After": "soon"}, 1),
    ],
)
def test_classify_rate_limits_as_transient_with_their_wait(
    status: int, error: str, headers: dict[str, str], retry_after: int
) -> None:
    result = classify(api_error(status, error, headers))
    assert isinstance(result, TransientSendError)
    assert result.retry_after == retry_after


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (500, "internal_error"),
        (503, "service_unavailable"),
        (502, "upstream_connect_error"),
        (200, "fatal_error"),
    ],
)
def test_classify_server_trouble_as_transient(status: int, error: str) -> None:
    result = classify(api_error(status, error))
    assert isinstance(result, TransientSendError)
    assert result.retry_after >= 1


@pytest.mark.parametrize(
    "error", ["channel_not_found", "invalid_auth", "not_in_channel", "msg_too_long"]
)
def test_classify_everything_else_as_permanent(error: str) -> None:
    result = classify(api_error(200, error))
    assert isinstance(result, PermanentSendError)
    assert error in str(result)


# -- end to end: Dispatcher, SlackSender, emulator -------------------------------------------


@pytest.mark.parametrize("reached_slack", [True, False], ids=["posted", "not-posted"])
def test_a_dispatcher_crash_before_mark_sent_never_posts_twice(
    make_store: MakeStore, emu: SlackEmulator, fake: FakeTime, reached_slack: bool
) -> None:
    store = make_store()
    store.post(INBOX, [Post("C1", "Refunded order 42.", priority="urgent")], T0)
    sender = SlackSender(make_client(TOKEN, emu.api_url), sleep=fake.sleep, clock=fake.clock)
    [batch] = store.claim_batches(T0)
    [sending] = batch.parts
    if reached_slack:
        sender.send(sending)  # the post reaches Slack; the dispatcher dies before mark_sent
    clock = ManualClock(T0 + 1)
    dispatcher = Dispatcher(store=store, sender=sender, clock=clock)
    assert dispatcher.tick(clock.now) == 0  # still in flight: nobody else touches it
    clock.now = T0 + store.settings.send_timeout + 1
    assert dispatcher.tick(clock.now) == 1
    [msg] = emu.messages("C1")
    assert msg["text"] == "Refunded order 42."
    assert msg["metadata"]["event_payload"]["part_id"] == sending.part_id
    assert [r.status for r in store.outbox(inbox=INBOX)] == ["sent"]
    assert dispatcher.tick(clock.now + 1000) == 0
    assert len(emu.messages("C1")) == 1


# -- a click's answer rewrites the message it came from (issue 38's forget prompt) ------------


def answer_part(url: str, text: str, replace: bool) -> Part:
    shown = part(text, kind="ephemeral", user="U7")
    facts = {"replace_original": True} if replace else None
    return dataclasses.replace(shown, ref=url, facts=facts)


def test_a_replace_original_answer_rewrites_the_prompt_in_place(
    emu: SlackEmulator, sender: SlackSender
) -> None:
    prompt = sender.send(part("Forget what I keep about you?", kind="ephemeral", user="U7"))
    url = emu.response_url_for("click", user="U7", channel="C1", original=prompt)
    sender.send(answer_part(url, "Forgotten.", replace=True))
    assert emu.responses("click") == [{"text": "Forgotten.", "replace_original": True}]
    assert [e["text"] for e in emu.ephemerals("C1", "U7")] == ["Forgotten."]  # one, rewritten


def test_a_replace_original_answer_whose_url_fails_still_reaches_the_person(
    emu: SlackEmulator, sender: SlackSender
) -> None:
    url = emu.response_url_for("expired", user="U7", channel="C1")
    emu.fault("response_url", status=404, error="expired_url")
    sender.send(answer_part(url, "Forgotten.", replace=True))
    assert emu.responses("expired") == []
    [call] = emu.calls("chat.postEphemeral")  # the words as a new ephemeral instead
    assert (call.params["user"], call.params["text"]) == ("U7", "Forgotten.")
