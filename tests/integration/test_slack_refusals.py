"""The dispatcher meets the emulator's Slack-strict refusals, on both stores: each refusal is
transient (kept and retried) or permanent (parked with its reason, visible in the dead letters
and requeueable, the operator told by a log line and a metric); nothing is lost, and what can
be avoided (a post over 40,000 characters) never reaches Slack."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import T0, MakeStore
from wakeful.bot.slack.sender import SlackSender, make_client
from wakeful.core import metrics
from wakeful.core.clock import ManualClock
from wakeful.core.dispatcher import Dispatcher
from wakeful.core.effects import Post
from wakeful.core.store import Store
from wakeful.devtools.emulator import SlackEmulator
from wakeful.devtools.emulator.checks import TEXT_LIMIT

TOKEN = "xoxb-refusals"
INBOX = "T1:U1"


@pytest.fixture
def emu() -> Iterator[SlackEmulator]:
    with SlackEmulator(bot_token=TOKEN) as e:
        yield e


def dispatch(store: Store, emu: SlackEmulator, at: int = T0) -> Dispatcher:
    sender = SlackSender(make_client(TOKEN, emu.api_url), sleep=lambda _s: None)
    dispatcher = Dispatcher(store=store, sender=sender, clock=ManualClock(at), concurrency=1)
    dispatcher.tick(at)
    return dispatcher


def parked(store: Store) -> list[tuple[str, str]]:
    return [(r.text[:20], r.error or "") for r in store.dead_letters().outbox]


def errors(method: str, error: str) -> float:
    return metrics.SLACK_ERRORS.labels(method, error)._value.get()


def section(text: str) -> list[dict[str, Any]]:
    return [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]


def test_a_post_over_40000_characters_is_cut_and_never_refused(
    make_store: MakeStore, emu: SlackEmulator
) -> None:
    store = make_store()
    text = "\n".join(f"line {i:06d} " + "x" * 80 for i in range(600))  # about 55,000
    assert len(text) > TEXT_LIMIT
    store.post(INBOX, [Post("C1", text, priority="urgent")], T0)
    dispatch(store, emu)
    posted = [m["text"] for m in emu.messages("C1")]
    assert len(posted) == 2 and all(len(t) <= TEXT_LIMIT for t in posted)
    assert "\n".join(posted) == text, "every character arrived, in order"
    assert [r.status for r in store.outbox(inbox=INBOX)] == ["sent"]


def test_the_emulator_refuses_what_slack_refuses(emu: SlackEmulator) -> None:
    from slack_sdk.errors import SlackApiError

    client = make_client(TOKEN, emu.api_url)

    def error(call: Any, **kwargs: Any) -> str:
        with pytest.raises(SlackApiError) as exc:
            call(**kwargs)
        return str(exc.value.response["error"])

    assert error(client.chat_postMessage, channel="C1", text="x" * (TEXT_LIMIT + 1)) == (
        "msg_too_long"
    )
    many = section("a") * 51
    assert error(client.chat_postMessage, channel="C1", text="t", blocks=many) == "invalid_blocks"
    long = section("y" * 3001)
    assert error(client.chat_postMessage, channel="C1", text="t", blocks=long) == "invalid_blocks"
    emu.leave_channel("C9")
    assert error(client.chat_postMessage, channel="C9", text="t") == "not_in_channel"
    theirs = emu.add_message("C1", "U7", "someone else's words")
    assert error(client.chat_update, channel="C1", ts=theirs, text="mine now") == (
        "cant_update_message"
    )
    emu.set_members("C2", ["U1"])
    assert error(client.chat_postEphemeral, channel="C2", user="U2", text="t") == (
        "user_not_in_channel"
    )
    client.chat_postEphemeral(channel="C2", user="U1", text="fine")
    emu.scopes = [s for s in emu.scopes if s != "users:read"]
    assert error(client.users_info, user="U1") == "missing_scope"


@pytest.mark.parametrize(
    ("scene", "expected"),
    [
        ("invalid_blocks", "invalid_blocks"),
        ("not_in_channel", "not_in_channel"),
        ("user_not_in_channel", "user_not_in_channel"),
        ("missing_scope", "missing_scope: add the chat:write scope to the app"),
    ],
)
def test_a_permanent_refusal_parks_the_row_with_its_reason_and_tells_the_operator(
    make_store: MakeStore,
    emu: SlackEmulator,
    caplog: pytest.LogCaptureFixture,
    scene: str,
    expected: str,
) -> None:
    store = make_store()
    if scene == "invalid_blocks":
        message = Post("C1", "too long a section", blocks=section("z" * 3001), priority="urgent")
    elif scene == "not_in_channel":
        emu.leave_channel("C1")
        message = Post("C1", "nobody invited me", priority="urgent")
    elif scene == "user_not_in_channel":
        emu.set_members("C1", ["U1"])
        message = Post("C1", "just for you", kind="ephemeral", user="U2")
    else:
        emu.scopes = [s for s in emu.scopes if s != "chat:write"]
        message = Post("C1", "no scope to say it", priority="urgent")
    others = [] if scene == "missing_scope" else [Post("C3", "unrelated", priority="urgent")]
    store.post(INBOX, [message, *others], T0)
    method = "chat.postEphemeral" if scene == "user_not_in_channel" else "chat.postMessage"
    before = errors(method, scene)
    with caplog.at_level(logging.WARNING, logger="wakeful"):
        dispatch(store, emu)
    [(text, error)] = parked(store)
    assert message.text.startswith(text) and error == expected
    assert errors(method, scene) == before + 1
    assert any("parked" in r.getMessage() and expected in r.getMessage() for r in caplog.records)
    if others:
        assert [m["text"] for m in emu.messages("C3")] == ["unrelated"], "others went on"
    # Nothing is lost: once the cause is mended, a requeue delivers it.
    emu.scopes.append("chat:write")
    emu.add_channel("C1")
    emu.set_members("C1", ["U1", "U2"])
    [row] = store.dead_letters().outbox
    if scene == "invalid_blocks":
        return  # the row itself is wrong: it stays parked, visible, until an operator acts
    assert store.requeue_outbox(row.id, T0 + 1)
    dispatch(store, emu, T0 + 1)
    assert parked(store) == []


def test_cant_update_message_parks_the_rewrite_and_keeps_the_prompt(
    make_store: MakeStore, emu: SlackEmulator
) -> None:
    from wakeful.bot.slack.sender import PermanentSendError
    from wakeful.core.rules.outbox import Part

    theirs = emu.add_message("C1", "U7", "not the bot's")
    sender = SlackSender(make_client(TOKEN, emu.api_url), sleep=lambda _s: None)
    update = Part("d:1.0", "d", "update", "C1", "", "rewritten", None, (1,), target_ts=theirs)
    with pytest.raises(PermanentSendError, match="cant_update_message"):
        sender.send(update)
    assert emu.messages("C1")[0]["text"] == "not the bot's"


@pytest.mark.parametrize("error", ["ratelimited", "internal_error"])
def test_a_transient_refusal_keeps_the_row_and_retries_it(
    make_store: MakeStore, emu: SlackEmulator, error: str
) -> None:
    store = make_store()
    status = 429 if error == "ratelimited" else 500
    emu.fault("chat.postMessage", status=status, error=error, retry_after=1, times=1)
    store.post(INBOX, [Post("C1", "try again", priority="urgent")], T0)
    dispatch(store, emu)
    assert [r.status for r in store.outbox(inbox=INBOX)] == ["sending"]
    assert parked(store) == []
    dispatch(store, emu, T0 + 10)
    assert [m["text"] for m in emu.messages("C1")] == ["try again"]
    assert [r.status for r in store.outbox(inbox=INBOX)] == ["sent"]
