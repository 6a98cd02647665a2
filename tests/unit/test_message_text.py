"""A person's words without the bot's mention (issue 35, item 2): `Message.text` is what they
wrote to the agent, `Message.raw_text` the whole text Slack sent; both survive the stored form,
and rows stored before `raw_text` existed still decode, their text as it was stored."""

from __future__ import annotations

from wakeful.bot.front import payloads
from wakeful.core.events import WIRE_VERSION, Message, decode


def slack(kind: str, text: str, **event: str) -> tuple[dict[str, object], dict[str, object]]:
    inner: dict[str, object] = {"type": kind, "user": "U0ALICE", "text": text, "ts": "1.000001"}
    inner.update({"channel": "C0OPS", **event})
    return {"type": "event_callback", "team_id": "T0", "event_id": "Ev1", "event": inner}, inner


def test_the_front_stores_the_words_after_the_mention_and_the_whole_text() -> None:
    body, event = slack("app_mention", "<@U0BOT> restart web")
    key, said = payloads.said(body, event, True, "U0BOT")
    assert key == "Ev1"
    assert (said.text, said.raw_text, said.kind) == (
        "restart web",
        "<@U0BOT> restart web",
        "mention",
    )
    assert decode(said.to_wire()) == said
    body, event = slack("message", "<@U0BOT> status", channel_type="im", channel="D0ALICE")
    _, dm = payloads.said(body, event, False, "U0BOT")
    assert (dm.text, dm.raw_text, dm.kind) == ("status", "<@U0BOT> status", "dm")


def test_rows_stored_before_raw_text_decode_with_their_text_as_stored() -> None:
    before_v2 = {"kind": "mention", "text": "<@U0BOT> hi", "user": "U0A", "team": "T0",
                 "channel": "C0", "ts": "1.0"}  # fmt: skip
    old = decode(before_v2, source="slack")
    assert isinstance(old, Message) and old.mention
    assert old.text == old.raw_text == "<@U0BOT> hi"
    v2 = {**before_v2, "v": WIRE_VERSION, "event": "message"}
    again = decode(v2, source="slack")
    assert isinstance(again, Message) and again.raw_text == "<@U0BOT> hi"


def test_a_message_built_without_raw_text_has_its_text_as_raw_text() -> None:
    said = Message(text="hi", user="U0A", team="T0", channel="D0A", ts="1.0")
    assert said.raw_text == "hi"
    wire = said.to_wire()
    assert "raw_text" not in wire and "raw_prefix" not in wire  # nothing stored twice
    assert decode(wire, source="slack").raw_text == "hi"


def test_a_mention_stores_only_what_was_removed_so_a_long_text_is_stored_once() -> None:
    long = "x" * 200_000
    said = Message(
        text=long, raw_text=f"<@U0BOT> {long}", user="U0A", team="T0", channel="C0", ts="1.0"
    )
    wire = said.to_wire()
    assert wire["raw_prefix"] == "<@U0BOT> " and "raw_text" not in wire
    assert decode(wire, source="slack").raw_text == f"<@U0BOT> {long}"
