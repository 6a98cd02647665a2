"""Issue 37 through the real HTTP front: `wakeful serve` with the Claude agent streams its replies
into Slack (the emulator's chat.startStream / appendStream / stopStream) as the fake Messages API
streams them, on both stores: one message with feedback buttons; a segment older than
WAKEFUL_STREAM_SEGMENT, or one Slack ends (expired, too long), goes on in a new message with
nothing lost or repeated; the stop button ends the run's model calls; a second message during a
run yields one reply to both; SIGKILL at each point of a stream leaves exactly one complete reply
and no stream open.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.test_claude_slack import claude_settings, feedback_element
from tests.support import fake_anthropic as api
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.slack_app import (
    BOT_USER,
    TEAM,
    TOKEN,
    Wakeful,
    dm,
    inbox,
    launch,
    pg_schema_url,
    settle,
    shut_down,
)
from wakeful.devtools.emulator import SlackEmulator
from wakeful.devtools.emulator.common import Call

ROOT = Path(__file__).resolve().parents[2]
LONG = " ".join(f"word{i:03d}" for i in range(40))
"""A 319-character answer: 80 deltas of 4 characters."""


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic()
    yield server
    server.close()


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.pg)])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def app(
    backend: str, tmp_path_factory: pytest.TempPathFactory, fake: FakeAnthropic
) -> Iterator[Wakeful]:
    """One serve per backend whose streams end after 1 s (WAKEFUL_STREAM_SEGMENT)."""
    tmp = tmp_path_factory.mktemp(f"streams-{backend}")
    settings = claude_settings(fake, WAKEFUL_STREAM_SEGMENT="1")
    with SlackEmulator(bot_token=TOKEN, bot_user_id=BOT_USER, team_id=TEAM) as emu:
        if backend == "sqlite":
            running = launch(tmp, emu, str(tmp / "wakeful.db"), settings)
            try:
                yield running
            finally:
                shut_down(running)
            return
        with pg_schema_url() as url:
            running = launch(tmp, emu, url, settings, backend="postgres")
            try:
                yield running
            finally:
                shut_down(running)


def bot_messages(emu: SlackEmulator, channel: str) -> list[dict[str, Any]]:
    return [m for m in emu.messages(channel) if m.get("user") == BOT_USER]


def ended(emu: SlackEmulator, channel: str, count: int = 1, timeout: float = 20.0) -> bool:
    """At least `count` bot messages in `channel`, none still streaming, the last with its
    feedback buttons (the reply's end, after the run's finish)."""

    def done(e: SlackEmulator) -> bool:
        msgs = bot_messages(e, channel)
        return (
            len(msgs) >= count
            and all(m.get("streaming_state") != "in_progress" for m in msgs)
            and any(b.get("type") == "context_actions" for b in msgs[-1].get("blocks") or [])
        )

    return emu.wait_for(done, timeout)


def stream_calls(emu: SlackEmulator, channel: str) -> list[Call]:
    return [c for c in emu.calls() if "Stream" in c.method and c.params.get("channel") == channel]


def test_a_reply_streams_under_the_message_and_ends_as_one_message_with_feedback_buttons(
    app: Wakeful, fake: FakeAnthropic
) -> None:
    user = "U37001"
    channel, ts = dm(user), app.sender.next_ts()
    fake.script(api.text("Hello **there**: 1 < 2 & 3 > 2."))
    assert app.sender.message(user, "hello", ts=ts).status == 200
    assert ended(app.emu, channel), app.emu.messages(channel)
    [reply] = bot_messages(app.emu, channel)
    assert reply["text"] == "Hello **there**: 1 &lt; 2 &amp; 3 &gt; 2."  # inert, as every reply
    assert reply["thread_ts"] == ts, "Slack streams only replies: under the person's message"
    assert feedback_element(reply)["type"] == "feedback_buttons"
    [start] = [c for c in stream_calls(app.emu, channel) if c.method == "chat.startStream"]
    assert start.params["thread_ts"] == ts
    assert (start.params["recipient_team_id"], start.params["recipient_user_id"]) == (TEAM, user)
    assert not start.params.get("chunks"), "the ts is recorded before any text is streamed"
    assert not [c for c in app.emu.calls("chat.postMessage") if c.params["channel"] == channel]
    assert app.emu.open_streams() == []


@pytest.mark.parametrize("where", ["assistant thread", "channel thread"])
def test_a_reply_in_a_thread_streams_into_that_thread(
    app: Wakeful, fake: FakeAnthropic, where: str
) -> None:
    """In an assistant thread (a DM's thread) and in a channel thread the agent takes part in,
    the stream goes under the thread's ts, for the person who wrote."""
    user = "U37007" if where == "assistant thread" else "U37008"
    channel = dm(user) if where == "assistant thread" else "C37008"
    top = app.sender.next_ts()
    before = 0
    if where == "channel thread":  # the agent takes part in the thread its mention started
        fake.script(api.text("Hello."))
        assert app.sender.mention(user, "hello", channel=channel, ts=top).status == 200
        assert ended(app.emu, channel), app.emu.messages(channel)
        before = 1
    fake.script(api.text("In the thread."))
    kind = "im" if where == "assistant thread" else "channel"
    reply = app.sender.message(user, "and here?", channel=channel, thread_ts=top, channel_type=kind)
    assert reply.status == 200
    assert ended(app.emu, channel, count=before + 1), app.emu.messages(channel)
    starts = [c for c in stream_calls(app.emu, channel) if c.method == "chat.startStream"]
    assert [c.params["thread_ts"] for c in starts] == [top] * (before + 1)
    start = starts[-1]
    assert (start.params["recipient_team_id"], start.params["recipient_user_id"]) == (TEAM, user)
    answer = bot_messages(app.emu, channel)[-1]
    assert answer["thread_ts"] == top and answer["text"] == "In the thread."


def test_a_stream_older_than_the_segment_time_goes_on_in_a_new_message(
    app: Wakeful, fake: FakeAnthropic
) -> None:
    user = "U37002"
    channel = dm(user)
    fake.script(api.text(LONG, pace=0.015))  # 1.2 s of streaming
    assert app.sender.message(user, "tell me a long story").status == 200
    assert ended(app.emu, channel, count=2), app.emu.messages(channel)
    msgs = bot_messages(app.emu, channel)
    assert "".join(m["text"] for m in msgs) == LONG, "nothing lost or repeated"
    assert [bool(m.get("blocks")) for m in msgs] == [False] * (len(msgs) - 1) + [True]
    starts = [c for c in stream_calls(app.emu, channel) if c.method == "chat.startStream"]
    assert len(starts) == len(msgs)
    assert app.emu.open_streams() == []


@pytest.mark.parametrize("limit", ["expiry", "length"])
def test_a_stream_slack_ends_goes_on_in_a_new_message(
    app: Wakeful, fake: FakeAnthropic, limit: str
) -> None:
    """`message_not_in_streaming_state` (Slack expired it) and `msg_too_long` fall back as a
    segment's age does: the text goes on in a new message, nothing lost or repeated."""
    user = "U37003" if limit == "expiry" else "U37004"
    channel = dm(user)
    emu = app.emu
    saved = (emu.stream_ttl, emu.stream_max_chars)
    if limit == "expiry":
        emu.stream_ttl = 0.3  # before the serve's own 1 s
    else:
        emu.stream_max_chars = 120
    try:
        fake.script(api.text(LONG, pace=0.01 if limit == "expiry" else 0.0))
        assert app.sender.message(user, "and another").status == 200
        assert ended(emu, channel, count=2), emu.messages(channel)
    finally:
        emu.stream_ttl, emu.stream_max_chars = saved
    msgs = bot_messages(emu, channel)
    assert "".join(m["text"] for m in msgs) == LONG, "nothing lost or repeated"
    refused = "message_not_in_streaming_state" if limit == "expiry" else "msg_too_long"
    assert any(c.response.get("error") == refused for c in stream_calls(emu, channel))
    assert emu.open_streams() == []


def test_stop_ends_the_run_s_model_calls_and_the_message_says_stopped(
    app: Wakeful, fake: FakeAnthropic
) -> None:
    user = "U37005"
    channel = dm(user)
    pressed = threading.Event()

    def press(call: Call) -> None:
        chunks = call.params.get("chunks") or []
        if call.method == "chat.appendStream" and chunks and not pressed.is_set():
            pressed.set()
            app.emu.press_stop(channel, str(call.params["ts"]))

    start = fake.calls
    fake.script(
        # One answer only: a second call would be unscripted, and counted.
        api.tool_use(
            "inbox_status", {}, "toolu_s1", say="Let me look that up for you, one moment.", pace=0.1
        ),
    )
    app.emu.on_call = press
    try:
        assert app.sender.message(user, "what is waiting?").status == 200
        assert ended(app.emu, channel), app.emu.messages(channel)
        settle(app, inbox(user))
    finally:
        app.emu.on_call = None
    assert fake.calls - start == 1 and fake.unscripted == 0, "no model call after the stop"
    [reply] = bot_messages(app.emu, channel)
    assert reply["text"] and "Let me look that up for you, one moment.".startswith(reply["text"])
    notes = [
        el["text"]
        for b in reply["blocks"]
        if b.get("type") == "context"
        for el in b.get("elements", [])
    ]
    assert any("Stopped" in n for n in notes), reply["blocks"]
    assert app.emu.open_streams() == []


def test_a_second_message_during_a_run_yields_one_reply_that_answers_both(
    app: Wakeful, fake: FakeAnthropic
) -> None:
    user = "U37006"
    channel = dm(user)
    hold = threading.Event()
    start = fake.calls
    fake.script(
        # The first run's first call: it streams a little, then waits for the test.
        api.tool_use(
            "inbox_status",
            {},
            "toolu_i1",
            say="Checking order 1001 for you now.",
            hold=hold,
            hold_after=3,
        ),
        api.text("Order 1002 it is: refunded nothing yet, it is on its way."),
    )
    assert app.sender.message(user, "where is order 1001?").status == 200
    assert fake.wait_deltas(3, 20)
    assert app.emu.wait_for(lambda e: bool(bot_messages(e, channel)), 10)
    assert app.sender.message(user, "oh, and it was order 1002, not 1001").status == 200
    hold.set()
    assert app.emu.wait_for(
        lambda e: any("Order 1002 it is" in m["text"] for m in bot_messages(e, channel)), 20
    ), app.emu.messages(channel)
    assert ended(app.emu, channel)
    settle(app, inbox(user))
    assert fake.calls - start == 2, "the first run's call after the cancel was not made"
    assert fake.unscripted == 0
    told = api.plain(fake.requests[start + 1]["messages"][-1]["content"])
    said = " ".join(str(b.get("text", "")) for b in told)
    assert "order 1001" in said and "order 1002, not 1001" in said, said
    [reply] = bot_messages(app.emu, channel)
    assert reply["text"].startswith("Order 1002 it is")
    streams = app.emu.streams(channel)
    assert len(streams) >= 2 and not streams[-1]["deleted"]
    assert all(s["deleted"] for s in streams[:-1]), "the cancelled run's stream was taken back"
    assert app.emu.open_streams() == []


# -- SIGKILL at each point of a stream --------------------------------------------------------


def _kill_when(app: Wakeful, hit: Callable[[Call], bool]) -> Callable[[Call], None]:
    done = threading.Event()

    def hook(call: Call) -> None:
        if not done.is_set() and hit(call):
            done.set()
            os.kill(app.proc.popen.pid, signal.SIGKILL)

    return hook


def _relaunch(app: Wakeful, tmp: Path, settings: dict[str, str]) -> Wakeful:
    assert app.proc.popen.wait(30) == -signal.SIGKILL, app.tail()
    app.store.close()
    app.proc.stop()
    return launch(tmp, app.emu, app.db, settings, backend=app.backend)


def _one_complete_reply(app: Wakeful, user: str, answer: str) -> None:
    channel = dm(user)
    assert ended(app.emu, channel, timeout=40), app.emu.messages(channel)
    settle(app, inbox(user))
    [reply] = bot_messages(app.emu, channel)
    assert reply["text"] == answer
    assert feedback_element(reply)["type"] == "feedback_buttons"
    assert app.emu.open_streams() == []


class KillRun:
    """Kills on one store, a scope of its own: `--dist loadscope` hands the three to three
    test processes (tests/conftest.py LONG_FIRST)."""

    backend = "sqlite"
    points: tuple[str, ...] = ()

    def test_sigkill_at_each_point_of_a_stream_leaves_exactly_one_complete_reply(
        self, fake: FakeAnthropic, tmp_path: Path
    ) -> None:
        kill_at(self.backend, self.points, fake, tmp_path)


class TestSigkillSqlite(KillRun):
    backend, points = "sqlite", ("after-run", "mid-append", "before-start")


class TestSigkillSqliteAtTheEnds(KillRun):
    backend, points = "sqlite", ("at-start", "at-stop")


@pytest.mark.pg
class TestSigkillPostgres(KillRun):
    """PostgreSQL: mid-append (the other points are the same code on either store, run on
    SQLite; the suite's 4-minute budget)."""

    backend, points = "postgres", ("mid-append",)


def kill_at(backend: str, points: tuple[str, ...], fake: FakeAnthropic, tmp_path: Path) -> None:
    """SIGKILL `wakeful serve` at each of `points`, then start it again: after the run (its
    reply streamed whole, before the finish), mid-append, before the stream's start (the
    model call in flight), at its start (Slack made the message, its ts not yet recorded),
    at the outbox's chat.stopStream. Each leaves one complete reply with its buttons, and no
    stream open."""
    kill = {
        "WAKEFUL_AGENT": "tests.support.claude_kill:factory",
        "WAKEFUL_AGENT_PATH": str(ROOT),
        "CLAUDE_KILL": "after-run" if "after-run" in points else "",
        "CLAUDE_KILL_MARK": str(tmp_path / "kill.mark"),
        "WAKEFUL_SEND_TIMEOUT": "2",
    }
    settings = {**claude_settings(fake), **kill}
    with (
        SlackEmulator(bot_token=TOKEN, bot_user_id=BOT_USER, team_id=TEAM) as emu,
        _db(backend, tmp_path) as db,
    ):
        app = launch(tmp_path, emu, db, settings, backend=backend)
        try:
            for point in points:
                app = KILLS[point](app, emu, fake, tmp_path, settings)
        finally:
            emu.on_call = None
            fake.on_request = None
            shut_down(app)


Kill = Callable[[Wakeful, SlackEmulator, FakeAnthropic, Path, dict[str, str]], Wakeful]


def _after_run(
    app: Wakeful, emu: SlackEmulator, fake: FakeAnthropic, tmp: Path, settings: dict[str, str]
) -> Wakeful:
    """Its reply streamed whole, the finish not written (tests/support/claude_kill.py)."""
    fake.script(api.text("One: the answer after the run.", pace=0.01))
    assert app.sender.message("U37101", "one").status == 200
    app = _relaunch(app, tmp, settings)
    _one_complete_reply(app, "U37101", "One: the answer after the run.")
    return app


def _mid_append(
    app: Wakeful, emu: SlackEmulator, fake: FakeAnthropic, tmp: Path, settings: dict[str, str]
) -> Wakeful:
    """The second text append reaches Slack, then the process dies."""
    appends = [0]

    def second_append(c: Call) -> bool:
        if c.method == "chat.appendStream" and c.params["channel"] == dm("U37102"):
            appends[0] += 1
        return appends[0] == 2

    emu.on_call = _kill_when(app, second_append)
    fake.script(api.text(LONG, pace=0.02), api.text(LONG, pace=0.0))
    assert app.sender.message("U37102", "two").status == 200
    app = _relaunch(app, tmp, settings)
    emu.on_call = None
    _one_complete_reply(app, "U37102", LONG)
    assert any(s["deleted"] for s in emu.streams(dm("U37102")))
    return app


def _before_start(
    app: Wakeful, emu: SlackEmulator, fake: FakeAnthropic, tmp: Path, settings: dict[str, str]
) -> Wakeful:
    """The model call is in flight, nothing streamed yet."""
    victim = app

    def kill(request: dict[str, Any]) -> None:
        if "three" in str(request.get("messages", ""))[-400:]:
            fake.on_request = None
            os.kill(victim.proc.popen.pid, signal.SIGKILL)

    fake.on_request = kill
    fake.script(api.text("Three: answered once.", delay=5.0))
    fake.script(api.text("Three: answered once."))
    assert app.sender.message("U37103", "three").status == 200
    app = _relaunch(app, tmp, settings)
    _one_complete_reply(app, "U37103", "Three: answered once.")
    assert not emu.streams(dm("U37103"))[0].get("deleted")
    return app


def _at_start(
    app: Wakeful, emu: SlackEmulator, fake: FakeAnthropic, tmp: Path, settings: dict[str, str]
) -> Wakeful:
    """Slack made the (empty) message; its ts was never recorded."""
    emu.on_call = _kill_when(
        app, lambda c: c.method == "chat.startStream" and c.params["channel"] == dm("U37105")
    )
    fake.script(api.text("Five: the empty one taken back."))
    fake.script(api.text("Five: the empty one taken back."))
    assert app.sender.message("U37105", "five").status == 200
    app = _relaunch(app, tmp, settings)
    emu.on_call = None
    _one_complete_reply(app, "U37105", "Five: the empty one taken back.")
    assert [s["deleted"] for s in emu.streams(dm("U37105"))] == [True, False]
    return app


def _at_stop(
    app: Wakeful, emu: SlackEmulator, fake: FakeAnthropic, tmp: Path, settings: dict[str, str]
) -> Wakeful:
    """At the outbox's chat.stopStream: the finish is written, the end not told."""
    emu.on_call = _kill_when(
        app, lambda c: c.method == "chat.stopStream" and c.params["channel"] == dm("U37104")
    )
    fake.script(api.text("Four: ended after the restart."))
    assert app.sender.message("U37104", "four").status == 200
    app = _relaunch(app, tmp, settings)
    emu.on_call = None
    _one_complete_reply(app, "U37104", "Four: ended after the restart.")
    return app


KILLS: dict[str, Kill] = {
    "after-run": _after_run,
    "mid-append": _mid_append,
    "before-start": _before_start,
    "at-start": _at_start,
    "at-stop": _at_stop,
}


class _db:
    """The store of the kill test: a SQLite file, or a fresh PostgreSQL schema."""

    def __init__(self, backend: str, tmp: Path) -> None:
        self.backend, self.tmp = backend, tmp
        self._pg: Any = None

    def __enter__(self) -> str:
        if self.backend == "sqlite":
            return str(self.tmp / "wakeful.db")
        self._pg = pg_schema_url()
        return str(self._pg.__enter__())

    def __exit__(self, *exc: object) -> None:
        if self._pg is not None:
            self._pg.__exit__(*exc)
