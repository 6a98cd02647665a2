"""A run that fails keeps its cause, and the person is told once (issue 22, item 8).

Through the real worker on both stores: the dead event carries the last error the agent raised
and its traceback; the person whose message it was is told once, in their conversation, in
the agent's words, the setting's, or wakeful's; an event no person waits on (a timer, a
webhook) tells no one.
"""

from __future__ import annotations

from typing import Any

from tests.conftest import T0, MakeStore
from wakeful.agents import Agent, Command, Message, Run, WebhookDelivery
from wakeful.bot.process.config import Config
from wakeful.bot.process.loading import build_runner
from wakeful.core.clock import ManualClock
from wakeful.core.inbox_id import InboxId
from wakeful.core.runner import FAILURE_TEXT
from wakeful.core.store import Store
from wakeful.core.worker import Worker

INBOX = InboxId.person("T1", "U1")


class Broken(Agent):
    def run(self, run: Run) -> None:
        raise KeyError("the order book")


class Polite(Broken):
    failure_text = "I could not do that one ({attempts} tries); a person will look at it."


def drive(store: Store, agent: Any, env: dict[str, str] | None = None) -> ManualClock:
    clock = ManualClock(T0)
    config = Config.from_env(env or {})
    runner = build_runner(config, store, None, factory=lambda _s: agent, env={}, clock=clock)
    worker = Worker(store=store, clock=clock, runner=runner)
    for _ in range(6):
        worker.tick(clock())
        clock.now += 1000  # past every backoff
    return clock


def dm(store: Store, text: str, key: str = "Ev1") -> None:
    said = Message(text=text, user="U1", team="T1", channel="D1", ts=f"{T0}.000100")
    assert store.ingest(INBOX, "slack", key, said.to_wire(), T0).stored


def replies(store: Store, inbox: str = INBOX) -> list[tuple[str, str, str | None]]:
    return [(r.kind, r.text, r.thread_ts or None) for r in store.outbox(inbox=inbox)]


def test_a_message_that_ran_out_of_attempts_keeps_its_cause_and_its_person_is_told_once(
    make_store: MakeStore,
) -> None:
    store = make_store(max_attempts=2)
    dm(store, "refund order 7")
    drive(store, Broken())
    [event] = store.events(INBOX)
    assert event.status == "dead"
    assert event.error == "too many attempts; last error: KeyError: 'the order book'"
    assert event.traceback is not None and "raise KeyError" in event.traceback
    assert replies(store) == [("post", FAILURE_TEXT.format(attempts=2), None)]


def test_the_agent_or_the_setting_says_it_in_its_own_words(make_store: MakeStore) -> None:
    store = make_store(max_attempts=1)
    dm(store, "hi")
    drive(store, Polite())
    assert [t for _, t, _ in replies(store)] == [
        "I could not do that one (1 tries); a person will look at it."
    ]
    other = make_store(max_attempts=1)
    dm(other, "hi")
    drive(other, Broken(), {"WAKEFUL_FAILURE_TEXT": "Not handled; sorry."})
    assert [t for _, t, _ in replies(other)] == ["Not handled; sorry."]


def test_a_command_that_failed_is_answered_to_its_person_alone(make_store: MakeStore) -> None:
    store = make_store(max_attempts=1)
    command = Command(
        command="/wakeful",
        text="status",
        user="U1",
        team="T1",
        channel="C9",
        response_url="https://hooks.slack.com/commands/T1/1/x",
    )
    assert store.ingest(INBOX, "slack", "cmd-1", command.to_wire(), T0).stored
    drive(store, Broken())
    [row] = store.outbox(inbox=INBOX)
    assert (row.kind, row.user, row.channel, row.ref) == (
        "ephemeral",
        "U1",
        "C9",
        "https://hooks.slack.com/commands/T1/1/x",
    )


def test_an_event_no_person_waits_on_tells_no_one(make_store: MakeStore) -> None:
    store = make_store(max_attempts=1)
    hooks = InboxId.conversation("C0OPS")
    delivery = WebhookDelivery(type="push", delivery_id="d1", body={}, channel="C0OPS")
    assert store.ingest(hooks, "github", "d1", delivery.to_wire(), T0).stored
    drive(store, Broken())
    [event] = store.events(hooks)
    assert event.status == "dead"
    assert store.outbox(inbox=hooks) == []
