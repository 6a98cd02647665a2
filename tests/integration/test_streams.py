"""Streamed replies and the interrupt policy, at the engine level, on both stores.

A segment's ts is a durable step before any text goes into it; a segment ends and the text goes
on in a new one (too old, too long, ended by Slack) with nothing lost or repeated; a stop is
kept, and a retry of a stopped run stays stopped; a retry takes back what an earlier attempt
left; a run that does not finish leaves no half answer. An agent that answers the newest words
(`on_new_message = "interrupt"`) is stopped at its next step boundary when the same person
writes again, and the next run answers both messages at once.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import T0, MakeStore
from wakeful.agents import Agent, InvalidInput
from wakeful.core.clock import ManualClock
from wakeful.core.effects import Post
from wakeful.core.events import Message
from wakeful.core.inbox_id import InboxId
from wakeful.core.query import Query
from wakeful.core.run import Run
from wakeful.core.runner import Declared, runner_for
from wakeful.core.services import RunServices
from wakeful.core.steps import step_key
from wakeful.core.store import Store
from wakeful.core.store.sqlite import _QUERIES, SQLiteConnector
from wakeful.core.stream_edge import Reason, StreamEnded, StreamPlace
from wakeful.core.streams import SEGMENT_CHARS, RunStreams
from wakeful.core.worker import Worker
from wakeful.devtools.audit import runs

INBOX = InboxId.person("T1", "U1")
BLOCKS = [{"type": "context", "elements": [{"type": "mrkdwn", "text": "was this useful?"}]}]


def message(key: str, n: int = 1, attempt: int = 1, user: str = "U1", **kw: Any) -> Message:
    return Message(
        text=f"question {n}",
        user=user,
        team="T1",
        channel=kw.pop("channel", "D1"),
        ts=f"{T0}.00010{n}",
        id=n,
        source="slack",
        key=key,
        attempt=attempt,
        **kw,
    )


M1 = message("Ev1")


class FakeSlack:
    """A StreamSurface as strict as Slack behind slack_sdk's `chat_stream`: `append` gathers
    text in a buffer of `buffer` chars and shows it once full; `flush` and `end` show what
    waits; a call on a segment that is not streaming (never started, ended, taken back) is a
    violation; `ends[n] = reason` ends the n-th append/flush/end call's segment with
    StreamEnded(reason, what its buffer held: shown nowhere)."""

    def __init__(self, buffer: int = 256) -> None:
        self.buffer = buffer
        self.calls: list[tuple[str, str]] = []
        self.shown: dict[str, str] = {}
        self.waiting: dict[str, str] = {}
        self.places: dict[str, StreamPlace] = {}
        self.streaming: set[str] = set()
        self.taken_back: list[str] = []
        self.violations: list[str] = []
        self.ends: dict[int, Reason] = {}
        self.counted = 0
        self.before_first_append: Callable[[str], None] = lambda ts: None

    def start(self, place: StreamPlace) -> str:
        ts = f"{T0 + 100}.{len(self.places):06d}"
        self.calls.append(("start", ts))
        self.places[ts], self.shown[ts], self.waiting[ts] = place, "", ""
        self.streaming.add(ts)
        return ts

    def append(self, place: StreamPlace, ts: str, text: str) -> None:
        if ("append", ts) not in self.calls:
            self.before_first_append(ts)
        self._call("append", place, ts)
        self.waiting[ts] += text
        self._maybe_end(ts)
        if len(self.waiting[ts]) >= self.buffer:
            self._show(ts)

    def flush(self, place: StreamPlace, ts: str) -> None:
        self._call("flush", place, ts)
        self._maybe_end(ts)
        self._show(ts)

    def end(self, place: StreamPlace, ts: str) -> None:
        self._call("end", place, ts)
        self._maybe_end(ts)
        self._show(ts)
        self.streaming.discard(ts)

    def take_back(self, place: StreamPlace, ts: str) -> None:
        self.calls.append(("take_back", ts))
        if self.places.get(ts) != place:
            self.violations.append(f"take_back of {ts} in {place}: not a message started there")
        self.streaming.discard(ts)
        self.taken_back.append(ts)

    def _call(self, op: str, place: StreamPlace, ts: str) -> None:
        self.calls.append((op, ts))
        if ts not in self.streaming or self.places[ts] != place:
            self.violations.append(f"{op} on {ts}: message_not_in_streaming_state")
            raise AssertionError(self.violations[-1])
        self.counted += 1

    def _maybe_end(self, ts: str) -> None:
        reason = self.ends.pop(self.counted, None)
        if reason is not None:
            lost, self.waiting[ts] = self.waiting[ts], ""
            self.streaming.discard(ts)
            raise StreamEnded(reason, lost)

    def _show(self, ts: str) -> None:
        self.shown[ts] += self.waiting[ts]
        self.waiting[ts] = ""

    def started(self) -> list[str]:
        return [ts for op, ts in self.calls if op == "start"]


def books(store: Store, surface: FakeSlack, clock: ManualClock, segment: int = 240) -> RunStreams:
    """A run's stream books made directly, with the clock given (the unit-level seam)."""

    def key(name: str) -> str:
        return step_key(INBOX, M1, name)

    tick = clock.monotonic
    return RunStreams(surface, store, key, lambda: None, INBOX, T0, segment, False, clock=tick)


def place_of(event: Message) -> StreamPlace:
    return StreamPlace(event.channel, event.thread_ts or event.ts, event.team, event.user, INBOX)


def a_run(store: Store, surface: FakeSlack, *events: Message) -> Run:
    services = RunServices(
        ledger=store,
        query=Query(store),
        budget=store.approval_budget,
        timers=store.timer_budget,
        streams=surface,
    )
    return Run(INBOX, events, None, T0, services)


def recorded(store: Store, cause: Message, name: str) -> Any:
    found = store.recorded_step(step_key(INBOX, cause, name))
    return None if found is None else found.result


def token_of(store: Store, cause: Message, j: int = 0) -> str:
    return str(recorded(store, cause, f"stream:run:{j}")["token"])


def pieces(total: int) -> list[str]:
    """Distinct pieces of varied length, `total` chars or a little more: a repeat or a gap in
    what a stream shows cannot hide in them."""
    out, n, i = [], 0, 0
    while n < total:
        piece = f"<{i}:" + "abcdefghij"[i % 10] * (i % 113) + ">"
        out.append(piece)
        n, i = n + len(piece), i + 1
    return out


def stream_rows(posts: list[Post]) -> list[Post]:
    return [p for p in posts if p.kind == "stream"]


# -- the books ------------------------------------------------------------------------------


def test_a_segments_ts_is_recorded_under_the_first_event_before_any_text(store: Store) -> None:
    surface = FakeSlack()
    m2 = message("Ev2", 2)
    run = a_run(store, surface, M1, m2)
    seen: dict[str, Any] = {}

    def look(ts: str) -> None:  # what the store holds when the first text reaches Slack
        i = surface.started().index(ts)
        seen[ts] = recorded(store, M1, f"stream:{token_of(store, M1)}:seg:{i}")

    surface.before_first_append = look
    stream = run.stream(to=m2)
    stream.write("x" * (SEGMENT_CHARS + 10))
    ts0, ts1 = surface.started()
    place = dataclasses.asdict(place_of(m2))
    assert seen == {ts0: {"ts": ts0, "place": place}, ts1: {"ts": ts1, "place": place}}, (
        "each segment's ts must be a step of the run's first event before its first append"
    )
    assert recorded(store, m2, "stream:run:0") is None, "keyed by the first event only"


def test_a_segment_older_than_the_setting_is_ended_and_the_text_goes_on(store: Store) -> None:
    surface, clock = FakeSlack(buffer=8), ManualClock(T0)
    run = books(store, surface, clock, segment=2)
    stream = run.open(M1.reply_to, place_of(M1))
    stream.write("Hello, ")
    clock.now += 3
    stream.write("world")
    stream.write("!")
    stream.close(BLOCKS)
    ts0, ts1 = surface.started()
    assert [s.text for s in stream.segments] == ["Hello, ", "world!"]
    assert ("end", ts0) in surface.calls and ("end", ts1) not in surface.calls
    assert surface.calls.index(("end", ts0)) < surface.calls.index(("start", ts1))
    assert (surface.shown[ts0], surface.shown[ts1]) == ("Hello, ", "world!")
    rows = run.posts()
    assert [(r.kind, r.ref, r.text, r.blocks) for r in rows] == [
        ("stream", ts0, "Hello, ", None),
        ("stream", ts1, "world!", BLOCKS),
    ]
    assert [r.facts["final"] for r in rows] == [False, True]
    assert surface.violations == []


@pytest.mark.parametrize("reason", ["expired", "too_long"])
@pytest.mark.parametrize("at", [None, 5, 40, "flush"])
def test_a_full_segment_or_one_the_destination_ends_goes_on_with_nothing_lost_or_repeated(
    store: Store, reason: Reason, at: int | str | None
) -> None:
    """Rotation by SEGMENT_CHARS (`at` None), and on Slack ending a segment at the n-th call
    or at the closing flush."""
    surface = FakeSlack(buffer=300)
    if isinstance(at, int):
        surface.ends[at] = reason
    run = books(store, surface, ManualClock(T0))
    stream = run.open(M1.reply_to, place_of(M1))
    written = pieces(2 * SEGMENT_CHARS + 300)
    for piece in written:
        stream.write(piece)
    if at == "flush":
        surface.ends[surface.counted + 1] = reason
    stream.close(BLOCKS)
    assert surface.ends == {}, "the scripted end never happened"
    rows = run.posts()
    assert "".join(r.text for r in rows) == "".join(written), "text lost or repeated"
    assert [r.text for r in rows] == [surface.shown[ts] for ts in surface.started()]
    assert [r.ref for r in rows] == surface.started() and len(rows) >= 2
    assert [r.blocks for r in rows] == [None] * (len(rows) - 1) + [BLOCKS]
    assert all(len(r.text) <= SEGMENT_CHARS for r in rows)
    if at is None:
        assert [len(r.text) for r in rows][:2] == [SEGMENT_CHARS] * 2 and len(rows) == 3
    assert surface.violations == []


def test_a_stop_is_kept_and_a_retry_of_the_stopped_run_stays_stopped(store: Store) -> None:
    surface = FakeSlack(buffer=8)
    surface.ends[3] = "stopped"
    run = a_run(store, surface, M1)
    stream = run.stream(to=M1)
    for text in ("one ", "two ", "three "):
        stream.write(text)
    [ts] = surface.started()
    assert stream.stopped and run.stopped_by_user
    calls = len(surface.calls)
    stream.write("four")
    assert len(surface.calls) == calls and "four" not in stream.text, "a write after the stop"
    stream.close(BLOCKS)
    kept = {"segments": [{"ts": ts, "text": "one two "}], "channel": "D1", "thread_ts": None}
    assert recorded(store, M1, f"stream:{token_of(store, M1)}:stopped") == kept
    [row] = stream_rows(run.effects().messages)
    assert (row.ref, row.text, row.blocks) == (ts, "one two ", BLOCKS)
    assert row.facts == {"final": True, "stopped": True, "ended": True}

    retry = a_run(store, surface, dataclasses.replace(M1, attempt=2))
    again = retry.stream(to=M1)
    again.write("a second answer")
    again.close(BLOCKS)
    assert again.stopped and retry.stopped_by_user
    assert len(surface.calls) == calls, "the retry called Slack (took back, or streamed)"
    [row] = stream_rows(retry.effects().messages)
    assert (row.ref, row.text, row.blocks, row.facts["stopped"]) == (ts, "one two ", BLOCKS, True)


def test_a_retry_of_a_stopped_run_knows_it_before_it_streams(store: Store) -> None:
    surface = FakeSlack(buffer=8)
    surface.ends[1] = "stopped"
    a_run(store, surface, M1).stream(to=M1).write("one ")
    retry = a_run(store, surface, dataclasses.replace(M1, attempt=2))
    assert retry.stopped_by_user, (
        "a retry of a stopped run must read as stopped from its start, before it opens a "
        "stream (an agent checks it before its first model call): Run.stopped_by_user reads "
        "RunStreams.stopped_before, which only settle() sets, and settle runs on open/posts"
    )


def test_a_retry_takes_back_what_earlier_attempts_left_before_it_streams(store: Store) -> None:
    surface = FakeSlack()
    first = a_run(store, surface, M1)
    first.stream(to=M1).write("x" * (SEGMENT_CHARS + 1))  # two segments; then killed
    again = a_run(store, surface, M1)  # attempt 1 again: never looks
    again.stream(to=M1).write("y")
    assert surface.taken_back == [], "an attempt-1 run took back another run's segments"
    left = surface.started()
    assert len(left) == 3

    retry = a_run(store, surface, dataclasses.replace(M1, attempt=2))
    done = len(surface.calls)
    retry.stream(to=M1).write("z")
    [mine] = surface.started()[3:]
    assert surface.calls[done:] == [
        *[("take_back", ts) for ts in left],
        ("start", mine),
        ("append", mine),
    ], "every earlier segment is taken back before the retry opens its own"
    third = a_run(store, surface, dataclasses.replace(M1, attempt=3))
    third.stream(to=M1).write("w")
    assert surface.taken_back == [*left, mine], "what was taken back once is not looked at again"
    assert surface.violations == []


# -- through the worker ---------------------------------------------------------------------


def said(store: Store, key: str, n: int, user: str = "U1", inbox: str = INBOX, **kw: Any) -> int:
    event = message(key, n, user=user, **kw)
    stored = store.ingest(inbox, "slack", key, event.to_wire(), T0)
    assert stored.event_id is not None
    return stored.event_id


def worker(store: Store, agent: Agent, surface: FakeSlack) -> Worker:
    runner = runner_for(agent, store)
    runner.services.streams = surface  # the Slack edge's seam (bot/process/loading.py)
    return Worker(store=store, clock=ManualClock(T0), runner=runner)


class Streamer(Agent):
    def __init__(self, fail: bool) -> None:
        self.fail = fail

    def run(self, run: Run) -> None:
        stream = run.stream(to=run.events[0])
        stream.write("partial " * 2000)
        if self.fail:
            raise RuntimeError("the model call failed")
        stream.close(BLOCKS)


@pytest.mark.parametrize("fail", [True, False])
def test_only_a_finished_run_leaves_its_streamed_reply(make_store: MakeStore, fail: bool) -> None:
    store, surface = make_store(), FakeSlack()
    said(store, "Ev1", 1)
    worker(store, Streamer(fail), surface).tick(T0)
    segments = surface.started()
    assert len(segments) == 2
    rows = [r for r in store.outbox(inbox=INBOX) if r.kind == "stream"]
    if fail:
        assert surface.taken_back == segments, "a failed run's half answer stays in Slack"
        assert rows == [], "a failed run wrote stream rows"
        assert store.events(INBOX)[0].status == "pending"
    else:
        assert surface.taken_back == []
        assert [(r.ref, r.facts["final"], r.blocks) for r in rows] == [
            (segments[0], False, None),
            (segments[1], True, BLOCKS),
        ]
        assert "".join(r.text for r in rows) == "partial " * 2000
    assert surface.violations == []


class Script(Agent):
    """Streams, runs step `a` (where the person may write again), says something, runs step
    `b`, then answers: the script of every interrupt case."""

    def __init__(self, write_again: Callable[[], Any] | None, fail_first: bool = False) -> None:
        self.write_again = write_again
        self.fail_first = fail_first
        self.batches: list[list[str]] = []
        self.a_calls: list[str] = []
        self.b_calls: list[int] = []
        """The size of the batch of each run that ran step `b`."""

    def run(self, run: Run) -> None:
        self.batches.append([e.key for e in run.events])
        assert len(self.batches) < 8, "runs without end"
        if self.fail_first:
            self.fail_first = False
            raise RuntimeError("the first try fails")
        first = run.events[0]
        stream = run.stream(to=run.events[-1])
        stream.write(f"working on {len(run.events)} ")
        run.step("a", self._a, cause=first)
        run.reply("halfway", to=first)
        run.step("b", lambda key: self.b_calls.append(len(run.events)), cause=first)
        stream.close()
        run.reply("answered " + ",".join(e.key for e in run.events), to=run.events[-1])

    def _a(self, key: str) -> str:
        self.a_calls.append(key)
        if self.write_again is not None:
            self.write_again()
            self.write_again = None
        return "a"


class Interrupting(Script):
    on_new_message = "interrupt"


def ticks(loop: Worker, store: Store, inbox: str = INBOX) -> None:
    clock = loop.clock
    assert isinstance(clock, ManualClock)
    for _ in range(4):
        loop.tick(clock())
        clock.now += 10  # past the backoff of a failed try
    assert [e.status for e in store.events(inbox)] == ["done", "done"]


def test_the_persons_new_message_interrupts_the_run_at_its_next_step(make_store: MakeStore) -> None:
    store, surface = make_store(), FakeSlack()
    said(store, "Ev1", 1)
    agent = Interrupting(lambda: said(store, "Ev2", 2))
    ticks(worker(store, agent, surface), store)
    assert agent.batches == [["Ev1"], ["Ev1", "Ev2"]], "the next run answers both at once"
    assert len(agent.a_calls) == 1, "a recorded step ran again"
    assert agent.b_calls == [2], "the interrupted run's next step ran"
    posts = [r.text for r in store.outbox(inbox=INBOX) if r.kind != "stream"]
    assert posts == ["halfway", "answered Ev1,Ev2"], "the interrupted run's words were written"
    first, second = surface.started()
    assert surface.taken_back == [first], "the interrupted run's stream stays in Slack"
    assert [r.ref for r in store.outbox(inbox=INBOX) if r.kind == "stream"] == [second]
    assert store.events(INBOX)[0].attempts == 1, "an interrupt cost the event an attempt"
    assert [r.outcome for r in runs(store, INBOX)] == ["interrupted", "ok"], "the run log"
    assert surface.violations == []


def test_an_agent_that_queues_answers_each_message_in_turn(make_store: MakeStore) -> None:
    store, surface = make_store(), FakeSlack()
    said(store, "Ev1", 1)
    agent = Script(lambda: said(store, "Ev2", 2))
    ticks(worker(store, agent, surface), store)
    assert agent.batches == [["Ev1"], ["Ev2"]]
    assert agent.b_calls == [1, 1] and surface.taken_back == []
    answers = [r.text for r in store.outbox(inbox=INBOX) if r.text.startswith("answered")]
    assert answers == ["answered Ev1", "answered Ev2"]


def test_another_persons_message_in_the_channel_does_not_interrupt(make_store: MakeStore) -> None:
    store, surface = make_store(), FakeSlack()
    channel = InboxId.conversation("C1")
    where: dict[str, Any] = {"inbox": channel, "channel": "C1", "channel_type": "channel"}
    said(store, "Ev1", 1, mention=True, **where)
    agent = Interrupting(lambda: said(store, "Ev2", 2, user="U2", mention=True, **where))
    loop = worker(store, agent, surface)
    ticks(loop, store, channel)
    assert agent.batches == [["Ev1"], ["Ev2"]], "another person's words interrupted the run"
    assert surface.taken_back == []


def test_a_retried_batch_is_answered_not_interrupted(make_store: MakeStore) -> None:
    store, surface = make_store(backoff_base=1), FakeSlack()
    said(store, "Ev1", 1)
    agent = Interrupting(lambda: said(store, "Ev2", 2), fail_first=True)
    ticks(worker(store, agent, surface), store)
    assert agent.batches == [["Ev1"], ["Ev1"], ["Ev2"]]
    assert agent.b_calls == [1, 1] and surface.taken_back == []
    answers = [r.text for r in store.outbox(inbox=INBOX) if r.text.startswith("answered")]
    assert answers == ["answered Ev1", "answered Ev2"]


def test_an_unknown_new_message_policy_is_refused() -> None:
    class Sometimes(Agent):
        on_new_message = "sometimes"  # type: ignore[assignment]

        def run(self, run: Run) -> None: ...

    with pytest.raises(InvalidInput, match="on_new_message must be 'enqueue' or 'interrupt'"):
        Declared.of(Sometimes())
    assert Declared.of(Interrupting(None)).interrupts
    assert not Declared.of(Script(None)).interrupts


def test_the_interrupt_flag_reads_the_status_index(store: Store) -> None:
    params = {"inbox": INBOX, "after": 0, "limit": 20}
    if isinstance(store.db, SQLiteConnector):
        lite = sqlite3.connect(store.db.path)
        steps = lite.execute("EXPLAIN QUERY PLAN " + _QUERIES["waiting_after"], params).fetchall()
        lite.close()
        details = " | ".join(str(r[3]) for r in steps)
        assert "events_status" in details and "SCAN events" not in details, details
        return
    import psycopg

    from wakeful.core.store.postgres import _QUERIES as PG

    db = store.db
    options = f"-c search_path={db.schema}"  # type: ignore[attr-defined]
    with psycopg.connect(db.dsn, options=options) as conn:  # type: ignore[attr-defined]
        conn.execute("SET enable_seqscan = off")
        rows = conn.execute("EXPLAIN " + PG["waiting_after"], params).fetchall()
        conn.rollback()
    plan = " ".join(str(r[0]) for r in rows)
    assert "events_status" in plan, plan
