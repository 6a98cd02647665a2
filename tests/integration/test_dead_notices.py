"""Every event a person caused ends in a word to that person (issue 33, item 3): when it runs
out of attempts, each person who caused it is told once, where they acted, whatever its type;
and the silence before a first word back is measured (item 6). On both stores."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from prometheus_client import generate_latest

from tests.conftest import T0, MakeStore
from tests.support.recording_sender import RecordingSender
from wakeful.agents import Agent, Command, Message, Run, Tool
from wakeful.bot.process.config import Config
from wakeful.bot.process.loading import build_runner
from wakeful.bot.slack.events import Feedback, HomeOpened
from wakeful.core import metrics
from wakeful.core.clock import ManualClock
from wakeful.core.dispatcher import Dispatcher
from wakeful.core.inbox_id import InboxId
from wakeful.core.runner import FAILURE_TEXT
from wakeful.core.scheduler import Scheduler
from wakeful.core.store import Store
from wakeful.core.worker import Worker

TEAM, USER, BOSS = "T1", "U1", "UBOSS"
INBOX = InboxId.person(TEAM, USER)
_ids = itertools.count(1)
TOLD = FAILURE_TEXT.replace("{attempts}", "2")


class Boom(Agent):
    """Asks for approval on `ask`; fails on everything else (the poison of the issue)."""

    tools = (Tool("restart", lambda args, key: {"ok": True}),)

    def run(self, run: Run) -> None:
        for e in run.events:
            if isinstance(e, Message) and e.text == "ask":
                run.ask("restart", {"what": "web"}, summary="restart web", to=e)
                run.reply("asked", to=e)
                return
        raise RuntimeError("boom")


class World:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.clock = ManualClock(T0)
        self.sender = RecordingSender()
        config = Config(approvers=(BOSS,), settings=store.settings)
        runner = build_runner(
            config, store, None, factory=lambda _s: Boom(), env={}, clock=self.clock
        )
        self.worker = Worker(store=store, clock=self.clock, runner=runner)
        self.scheduler = Scheduler(store=store, clock=self.clock)
        self.dispatcher = Dispatcher(store=store, clock=self.clock, sender=self.sender)

    def store_event(self, event: Any) -> None:
        self.store.ingest(INBOX, "slack", f"EvD{next(_ids):06d}", event.to_wire(), self.clock.now)

    def until_dead(self) -> None:
        """Tick past each backoff until nothing of the inbox is open."""
        for _ in range(12):
            self.clock.now += 30
            for _ in range(2):
                self.scheduler.tick(self.clock.now)
                self.worker.tick(self.clock.now)
                self.dispatcher.tick(self.clock.now)
            if not self.store.events(INBOX, "open"):
                return
        raise AssertionError(self.store.events(INBOX, "open"))

    def told(self) -> list[tuple[str, str, str | None, str | None]]:
        """(kind, channel, user, thread) of each part carrying the failure text."""
        found = []
        for p in self.sender.parts:
            shown = p.text + str(p.blocks or "")
            if "could not handle" in shown:
                found.append((p.kind, p.channel, p.user, p.thread_ts or None))
        return found


@pytest.fixture
def world(make_store: MakeStore) -> World:
    return World(make_store(max_attempts=2, backoff_base=1, backoff_cap=2))


def test_a_message_in_a_thread_is_told_there(world: World) -> None:
    said = Message(
        text="boom",
        user=USER,
        team=TEAM,
        channel="C1",
        ts="5.5",
        thread_ts="5.1",
        channel_type="channel",
    )
    world.store_event(said)
    world.until_dead()
    assert world.told() == [("post", "C1", None, "5.1")]


def test_a_command_is_told_to_its_person_alone(world: World) -> None:
    world.store_event(
        Command(
            command="/wakeful",
            text="boom",
            user=USER,
            team=TEAM,
            channel="C9",
            response_url="https://hooks.slack.com/commands/T1/1/x",
        )
    )
    world.until_dead()
    [(kind, channel, user, _)] = world.told()
    assert (kind, channel, user) == ("ephemeral", "C9", USER)


def test_an_approval_answer_tells_the_requester_and_the_approver(world: World) -> None:
    world.store_event(Message(text="ask", user=USER, team=TEAM, channel="D1", ts="7.1"))
    world.until_dead()
    [approval] = world.store.approvals(INBOX)
    assert world.store.answer(approval.id, "yes", BOSS, world.clock.now).outcome == "yes"
    world.until_dead()
    told = world.told()
    assert ("post", "D1", None, None) in told  # the requester, where the prompt is
    assert ("ephemeral", "D1", BOSS, None) in told  # the approver, only them
    assert len(told) == 2


def test_the_home_tab_is_redrawn_with_the_notice(world: World) -> None:
    world.store_event(HomeOpened(user=USER, team=TEAM))
    world.until_dead()
    assert world.told() == [("home", USER, USER, None)]


def test_a_feedback_click_is_told_to_that_person(world: World) -> None:
    world.store_event(
        Feedback(value="negative", user=USER, team=TEAM, channel="C2", message_ts="8.1")
    )
    world.until_dead()
    assert world.told() == [("ephemeral", "C2", USER, "8.1")]


def _sample(name: str, **labels: str) -> float:
    for family in metrics.REGISTRY.collect():
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return 0.0


def test_silence_is_measured_from_storing_to_the_first_word_back(world: World) -> None:
    """A person's message waits until a post back (here the dead notice): the histogram
    counts the silence; the gauge counts who waits longer than a threshold until then."""
    count = _sample("wakeful_unanswered_seconds_count")
    total = _sample("wakeful_unanswered_seconds_sum")
    world.store_event(Message(text="boom", user=USER, team=TEAM, channel="D1", ts="9.1"))
    later = world.clock.now + 400
    gauges = world.store.gauges(later)
    assert gauges.people_waiting == {"1m": 1, "5m": 1, "15m": 0}
    world.until_dead()
    assert _sample("wakeful_unanswered_seconds_count") == count + 1
    waited = _sample("wakeful_unanswered_seconds_sum") - total
    assert 0 < waited <= world.clock.now - T0
    assert world.store.gauges(later).people_waiting == {"1m": 0, "5m": 0, "15m": 0}
    assert b"wakeful_people_waiting" in generate_latest(metrics.registry_for(world.store))


def test_a_timer_or_webhook_waits_on_no_one(world: World) -> None:
    world.store.ingest(
        "channel:C7",
        "github",
        "d-1",
        {
            "v": 2,
            "event": "webhook",
            "type": "push",
            "delivery": "d-1",
            "body": {},
            "channel": "C7",
            "kind": "webhook",
        },
        world.clock.now,
    )
    assert world.store.gauges(world.clock.now + 3600).people_waiting["1m"] == 0
