"""An approved call whose service fails (issue 33): a transient failure waits, stored, under
the same key, spending none of the event's attempts, the requester told once; a permanent one
(or one given up) is an answer with its error, recorded so nothing calls it again; whatever
the agent does, the requester hears how it ended. On both stores, a simulated clock."""

from __future__ import annotations

import dataclasses
import itertools
import re
import urllib.error
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import T0, MakeStore
from tests.support.recording_sender import RecordingSender
from wakeful.agents import (
    Agent,
    ApprovalAnswer,
    Message,
    Run,
    Tool,
    ToolFailed,
    ToolUnavailable,
)
from wakeful.bot.process.config import Config
from wakeful.bot.process.loading import build_runner
from wakeful.core.clock import ManualClock
from wakeful.core.dispatcher import Dispatcher
from wakeful.core.inbox_id import InboxId
from wakeful.core.scheduler import Scheduler
from wakeful.core.store import Store
from wakeful.core.tool_failures import classify
from wakeful.core.worker import Worker

TEAM, USER, BOSS = "T1", "U1", "UBOSS"
INBOX = InboxId.person(TEAM, USER)
NOT_DONE_YET = re.compile(r"not (been )?done yet")
_ids = itertools.count(1)


class Flaky:
    """A tool that raises what `script` says for each call (None: succeeds), counting calls and
    the keys it was given."""

    def __init__(self, script: Callable[[int], BaseException | None]) -> None:
        self.script = script
        self.keys: list[str] = []

    def __call__(self, args: Any, key: str) -> Any:
        self.keys.append(key)
        failure = self.script(len(self.keys))
        if failure is not None:
            raise failure
        return {"done": args["what"], "call": len(self.keys)}


class Asker(Agent):
    """`ask <what>` asks to run the tool; an answer is told with its result or its error
    (`quiet`: an answer with an error is not told, so wakeful must say it)."""

    def __init__(self, tool: Flaky, quiet: bool = False) -> None:
        self.tools = [Tool("restart", tool, "Restart a service")]
        self.quiet = quiet
        self.answers: list[ApprovalAnswer] = []

    def run(self, run: Run) -> None:
        for e in run.events:
            if isinstance(e, Message) and e.text.startswith("ask "):
                what = e.text.split()[1]
                run.ask("restart", {"what": what}, summary=f"restart {what}", to=e)
            elif isinstance(e, ApprovalAnswer):
                self.answers.append(e)
                if e.error is not None and self.quiet:
                    continue
                said = f"Restarted: {e.result}" if e.error is None else f"Not restarted: {e.error}"
                run.reply(said, to=e)


class World:
    def __init__(self, store: Store, agent: Any) -> None:
        self.store = store
        self.clock = ManualClock(T0)
        self.sender = RecordingSender()
        config = Config(approvers=(BOSS,), settings=store.settings)
        runner = build_runner(
            config, store, None, factory=lambda _s: agent, env={}, clock=self.clock
        )
        self.worker = Worker(store=store, clock=self.clock, runner=runner)
        self.scheduler = Scheduler(store=store, clock=self.clock)
        self.dispatcher = Dispatcher(store=store, clock=self.clock, sender=self.sender)

    def say(self, text: str) -> None:
        n = next(_ids)
        said = Message(text=text, user=USER, team=TEAM, channel="D1", ts=f"{T0}.{n:06d}")
        self.store.ingest(INBOX, "slack", f"EvW{n:08d}", said.to_wire(), self.clock.now)

    def tick(self, at: int) -> None:
        self.clock.now = at
        for _ in range(3):
            self.scheduler.tick(at)
            self.worker.tick(at)
            self.dispatcher.tick(at)

    def ask_and_approve(self, what: str = "web") -> str:
        self.say(f"ask {what}")
        self.tick(self.clock.now)
        [approval] = [a for a in self.store.approvals(INBOX) if a.answer is None]
        assert self.store.answer(approval.id, "yes", BOSS, self.clock.now).outcome == "yes"
        self.tick(self.clock.now)
        return approval.id

    def posts(self) -> list[str]:
        return [p.text for p in self.sender.parts if p.kind == "post"]

    def updates(self) -> list[str]:
        return [p.text for p in self.sender.parts if p.kind == "update"]

    def until_idle(self, start: int, step: int = 1, most: int = 200) -> int:
        """Tick one simulated second at a time until nothing of the inbox is open."""
        at = start
        for _ in range(most):
            if not self.store.events(INBOX, "open"):
                return at
            at += step
            self.tick(at)
        raise AssertionError(f"still open: {self.store.events(INBOX, 'open')}")


def settings(store: Store, **changes: int) -> Store:
    object.__setattr__(store, "settings", dataclasses.replace(store.settings, **changes))
    return store


@pytest.fixture
def quick(make_store: MakeStore) -> Store:
    """A store with the issue's pace: backoff 1 s doubling to 4 s, 3 attempts."""
    return make_store(backoff_base=1, backoff_cap=4, max_attempts=3)


def test_a_transient_failure_waits_under_the_same_key_and_ends_in_one_answer(quick: Store) -> None:
    """Unavailable for 30 s, then fine: done once, the requester told 'not done yet' once and
    the result once, the event never dead and its attempts untouched."""
    failing_until = T0 + 30
    world: World
    tool = Flaky(
        lambda _n: (
            ToolUnavailable("the ops service did not answer")
            if world.clock.now < failing_until
            else None
        )
    )
    agent = Asker(tool)
    world = World(quick, agent)
    request_id = world.ask_and_approve()
    waiting = [t for t in world.posts() if NOT_DONE_YET.search(t)]
    assert len(waiting) == 1 and "restart web" in waiting[0]
    assert "the ops service did not answer" in waiting[0].lower()
    assert any("not done yet: the ops service did not answer" in u for u in world.updates())
    state = quick.approval(request_id)
    assert state is not None and state.tool_state == "waiting" and state.tool_tries == 1
    world.until_idle(world.clock.now)
    assert set(tool.keys) == {request_id}  # every try under the same key
    assert len(tool.keys) > 3  # more tries than the event's 3 attempts would allow
    assert [t for t in world.posts() if NOT_DONE_YET.search(t)] == waiting  # told once
    done = [t for t in world.posts() if t.startswith("Restarted")]
    assert len(done) == 1
    assert world.updates()[-1].endswith(".") and "not done" not in world.updates()[-1]
    assert quick.events(INBOX, "dead") == []
    [answer_event] = [e for e in quick.events(INBOX) if e.source == "approval"]
    assert answer_event.status == "done"
    assert answer_event.attempts == 1  # the waits spent none
    final = quick.approval(request_id)
    assert final is not None and final.tool_state == "done"
    assert [a.result for a in agent.answers] == [{"done": "web", "call": len(tool.keys)}]


def test_the_wait_honours_retry_after_and_gives_up_after_the_retry_time(
    make_store: MakeStore,
) -> None:
    """Down for good: tried until WAKEFUL_TOOL_RETRY_FOR (15 s here) less one backoff step,
    then given up: the agent gets the error, the prompt says 'not done', and the tool is
    never called again."""
    store = make_store(backoff_base=1, backoff_cap=4, max_attempts=3, tool_retry_for=15)
    tool = Flaky(lambda _n: ConnectionRefusedError(111, "Connection refused"))
    agent = Asker(tool)
    world = World(store, agent)
    clicked = world.clock.now
    request_id = world.ask_and_approve()
    ended = world.until_idle(clicked)
    assert 15 - 4 <= ended - clicked <= 30
    calls = len(tool.keys)
    [answer] = agent.answers
    assert answer.result is None and answer.error is not None
    assert "gave up after 15 s" in answer.error and "refused the connection" in answer.error
    assert any(t.startswith("Not restarted:") for t in world.posts())
    assert "not done:" in world.updates()[-1] and "not done yet" not in world.updates()[-1]
    state = store.approval(request_id)
    assert state is not None and state.tool_state == "given_up"
    [step] = store.recorded_steps(name="restart")
    assert step.error == answer.error and step.result is None
    world.tick(ended + 3600)
    assert len(tool.keys) == calls  # nothing more sent after giving up
    assert store.events(INBOX, "dead") == []


def test_a_permanent_failure_is_one_call_and_an_answer_at_once(quick: Store) -> None:
    tool = Flaky(lambda _n: ToolFailed("the service refused: no such service"))
    agent = Asker(tool)
    world = World(quick, agent)
    world.ask_and_approve()
    assert len(tool.keys) == 1
    assert [a.error for a in agent.answers] == ["the service refused: no such service"]
    assert world.posts()[-1] == "Not restarted: the service refused: no such service"
    assert world.updates()[-1].endswith("not done: the service refused: no such service.")
    assert not [t for t in world.posts() if NOT_DONE_YET.search(t)]
    world.tick(world.clock.now + 3600)
    assert len(tool.keys) == 1
    assert quick.events(INBOX, "dead") == []


def test_wakeful_tells_the_requester_when_the_agent_says_nothing(quick: Store) -> None:
    """An agent that posts nothing about a failed call: wakeful says it was not done."""
    tool = Flaky(lambda _n: ToolFailed("the service refused"))
    world = World(quick, Asker(tool, quiet=True))
    world.ask_and_approve()
    told = [t for t in world.posts() if "not done" in t]
    assert told == ["Approved, but not done: restart web. The service refused."]


def test_other_inboxes_go_on_while_a_call_waits(quick: Store) -> None:
    tool = Flaky(lambda _n: ToolUnavailable("down"))
    world = World(quick, Asker(tool))
    world.ask_and_approve()
    other = InboxId.person(TEAM, "U2")
    said = Message(text="hello", user="U2", team=TEAM, channel="D2", ts=f"{T0}.9")
    quick.ingest(other, "slack", "EvOther1", said.to_wire(), world.clock.now)
    world.tick(world.clock.now)
    assert [e.status for e in quick.events(other)] == ["done"]


def test_the_wait_survives_a_new_worker(quick: Store) -> None:
    """The wait is stored: a worker started afresh (a restart) retries it under the same key
    and ends it; the requester is not told twice."""
    calls: list[int] = []
    tool = Flaky(lambda n: (calls.append(n), ToolUnavailable("down") if n < 3 else None)[1])
    world = World(quick, Asker(tool))
    request_id = world.ask_and_approve()
    restarted = World(quick, Asker(tool))
    restarted.clock.now = world.clock.now
    restarted.sender = world.sender
    restarted.dispatcher = Dispatcher(store=quick, clock=restarted.clock, sender=world.sender)
    restarted.until_idle(world.clock.now)
    assert tool.keys == [request_id] * 3
    assert len([t for t in world.posts() if NOT_DONE_YET.search(t)]) == 1


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (ToolUnavailable("x"), True),
        (ToolFailed("x"), False),
        (ConnectionRefusedError(111, "refused"), True),
        (TimeoutError("timed out"), True),
        (urllib.error.URLError(ConnectionRefusedError(111, "refused")), True),
        (urllib.error.HTTPError("http://x", 429, "Too Many", {"Retry-After": "7"}, None), True),
        (urllib.error.HTTPError("http://x", 503, "Unavailable", {}, None), True),
        (urllib.error.HTTPError("http://x", 400, "Bad Request", {}, None), False),
        (ValueError("bad input"), False),
        (KeyError("order"), False),
    ],
)
def test_failures_are_read_as_the_docs_say(exc: BaseException, transient: bool) -> None:
    assert classify(exc).transient is transient


def test_stripe_errors_are_read_by_what_stripe_kept() -> None:
    import stripe

    replayed = stripe.APIError(  # type: ignore[no-untyped-call]
        "boom", http_status=500, headers={"Idempotent-Replayed": "true"}
    )
    front = stripe.APIError("unavailable", http_status=503, headers={})  # type: ignore[no-untyped-call]
    limited = stripe.RateLimitError(  # type: ignore[no-untyped-call]
        "slow down", http_status=429, headers={"Retry-After": "2"}
    )
    declined = stripe.CardError("Your card was declined.", None, "card_declined", http_status=402)  # type: ignore[no-untyped-call]
    unreachable = stripe.APIConnectionError("no route")  # type: ignore[no-untyped-call]
    assert classify(replayed).transient is False
    assert classify(front).transient is True
    assert (classify(limited).transient, classify(limited).retry_after) == (True, 2.0)
    assert classify(declined).transient is False
    assert classify(unreachable).transient is True


def test_operators_hear_of_a_long_wait_once_and_of_giving_up(make_store: MakeStore) -> None:
    """WAKEFUL_OPS_CHANNEL: a call waiting on its destination for over a minute is said once
    there, and so is giving it up."""
    store = make_store(backoff_base=10, backoff_cap=30, tool_retry_for=300, ops_channel="C0OPS")
    tool = Flaky(lambda _n: ConnectionRefusedError(111, "Connection refused"))
    world = World(store, Asker(tool))
    request_id = world.ask_and_approve()
    world.until_idle(world.clock.now, step=5)
    lines = [r.text for r in store.outbox(status=None) if r.channel == "C0OPS"]
    waited = [t for t in lines if "has waited" in t]
    given_up = [t for t in lines if "given up" in t]
    assert len(waited) == 1 and len(given_up) == 1, lines
    assert request_id in waited[0] and "refused the connection" in waited[0]
    assert f"inbox {INBOX}" in given_up[0] and "gave up after 5 min" in given_up[0]


def test_each_call_gets_a_whole_lease_however_long_the_batch_took(make_store: MakeStore) -> None:
    """The lease is renewed just before each approved call: two answers in one batch whose
    calls take 25 s each (a 30 s lease) both finish, instead of the second outliving the
    lease and the whole run being fenced and repeated."""
    store = make_store(lease_ttl=30)
    world: World

    def slow(args: Any, key: str) -> Any:
        world.clock.now += 25  # the call takes 25 s
        return {"done": args["what"]}

    agent = Asker(Flaky(lambda _n: None))
    agent.tools = [Tool("restart", slow, "Restart a service")]
    world = World(store, agent)
    world.say("ask web")
    world.say("ask db")
    world.tick(world.clock.now)
    approvals = [a for a in store.approvals(INBOX) if a.answer is None]
    assert len(approvals) == 2
    for approval in approvals:
        assert store.answer(approval.id, "yes", BOSS, world.clock.now).outcome == "yes"
    world.worker.tick(world.clock.now)  # one batch: both answers, 50 s of calls
    done = [e for e in store.events(INBOX) if e.source == "approval"]
    assert [e.status for e in done] == ["done", "done"]
    assert sorted(str(a.result) for a in agent.answers) == [
        "{'done': 'db'}",
        "{'done': 'web'}",
    ]
