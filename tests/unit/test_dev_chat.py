"""`wakeful dev`'s pieces without processes: the shared clock `/advance` moves, and how the
bot's calls become lines (buttons numbered across the session, `/approve N` finding its
message's Approve)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from wakeful.devtools.dev_chat import Chat, People
from wakeful.devtools.emulator import Call
from wakeful.devtools.local import ShiftedClock


def test_an_advance_is_seen_by_every_clock_on_the_file(tmp_path: Path) -> None:
    ours, workers = ShiftedClock(tmp_path / "clock"), ShiftedClock(tmp_path / "clock")
    before = workers()
    ours.advance(3600)
    assert workers.offset == 3600
    assert 3600 <= workers() - before <= 3600 + 5
    assert abs(workers.seconds() - (time.time() + 3600)) < 5
    with pytest.raises(ValueError, match="only moves forward"):
        ours.advance(0)


def prompt(ts: str, request: str) -> dict[str, Any]:
    buttons = [
        {"type": "button", "action_id": a, "value": request, "text": {"text": a.capitalize()}}
        for a in ("approve", "deny")
    ]
    return {
        "channel": "D0ALICE",
        "text": "Approval needed",
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": "*Approval needed:* x"}},
            {"type": "context", "elements": [{"text": "Requested by <@U0ALICE>."}]},
            {"type": "actions", "elements": buttons},
        ],
    }


def call(method: str, params: dict[str, Any], ts: str = "") -> Call:
    return Call(method, params, {}, 0.0, {"ok": True, "ts": ts}, 200)


def test_buttons_are_numbered_across_the_session_and_answered_by_message() -> None:
    people, lines = People(), []
    people.add("alice")
    chat = Chat(people, lines.append)
    chat.here = "D0ALICE"
    chat.on_call(call("chat.postMessage", prompt("1.1", "r1"), ts="1.1"))
    chat.on_call(call("chat.postMessage", {**prompt("2.2", "r2"), "channel": "C0OPS"}, "2.2"))
    chat.on_call(call("chat.postEphemeral", {"channel": "C0OPS", "user": "U0ALICE", "text": "no"}))
    assert lines == [
        "[bot] Approval needed: x | Requested by @alice.  [1] Approve  [2] Deny",
        "[bot in #ops] Approval needed: x | Requested by @alice.  [3] Approve  [4] Deny",
        "[bot, only to alice in #ops] no",
    ]
    assert chat.sibling(2, "approve").value == "r1"
    assert chat.sibling(3, "deny").value == "r2"
    assert chat.sibling(None, "approve").value == "r2"  # the latest prompt
    with pytest.raises(KeyError, match="no button 9"):
        chat.sibling(9, "approve")
    # The same prompt rewritten keeps its numbers.
    chat.on_call(call("chat.update", {**prompt("1.1", "r1"), "ts": "1.1"}))
    assert lines[-1].endswith("[1] Approve  [2] Deny")
    assert lines[-1].startswith("[bot edited] ")


def test_a_refused_call_prints_nothing() -> None:
    lines: list[str] = []
    chat = Chat(People(), lines.append)
    refused = Call("chat.postMessage", {"channel": "C1", "text": "x"}, {}, 0.0, {"ok": False}, 200)
    chat.on_call(refused)
    assert lines == []


def test_a_streamed_reply_shows_a_line_per_flush_then_its_end() -> None:
    people, lines = People(), list[str]()
    people.add("alice")
    chat = Chat(people, lines.append)
    chat.here = "D0ALICE"
    to_ops = {"channel": "C0OPS", "thread_ts": "1.1", "recipient_user_id": "U0ALICE"}
    chat.on_call(call("chat.startStream", {**to_ops, "markdown_text": "Hello **@alice**"}, "2.2"))
    chat.on_call(call("chat.startStream", {"channel": "D0ALICE", "thread_ts": "3.3"}, "4.4"))
    chunks = [{"type": "markdown_text", "text": ", line one\nline two"}]
    chat.on_call(call("chat.appendStream", {"channel": "C0OPS", "ts": "2.2", "chunks": chunks}))
    chat.on_call(call("chat.appendStream", {"channel": "D0ALICE", "ts": "4.4", "chunks": []}))
    approve = {"type": "button", "action_id": "approve", "value": "r1", "text": {"text": "Ok"}}
    stop = {
        "channel": "C0OPS",
        "ts": "2.2",
        "markdown_text": "!",
        "blocks": [{"type": "actions", "elements": [approve]}],
    }
    answer = {"ok": True, "ts": "2.2", "message": {"thread_ts": "1.1"}}
    chat.on_call(Call("chat.stopStream", stop, {}, 0.0, answer, 200))
    chat.on_call(call("chat.stopStream", {"channel": "D0ALICE", "ts": "4.4"}, "4.4"))
    assert lines == [
        "[bot streaming in #ops, thread] Hello @alice",
        "[bot streaming in #ops, thread] , line one\n    line two",
        "[bot done streaming in #ops, thread] !  [1] Ok",
        "[bot done streaming in DM alice, thread]",
    ]
    assert chat.buttons[1].thread_ts == "1.1"
    assert chat.streaming == {}
    refused = {"ok": False, "error": "stopped_by_user"}
    append = {"channel": "C0OPS", "ts": "2.2", "markdown_text": "more"}
    chat.on_call(Call("chat.appendStream", append, {}, 0.0, refused, 200))
    chat.on_call(call("chat.delete", {"channel": "C0OPS", "ts": "2.2"}, "2.2"))
    assert lines[4:] == ["[bot deleted a message in #ops]"]
