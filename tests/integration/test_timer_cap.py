"""WAKEFUL_MAX_TIMERS_PER_INBOX (issue 34, item 5): an inbox has at most that many timers set,
by every way a timer is set (a run's `set_timer`, the refund desk's `remind me`, whatever a run
returns to the finish); a timer replaced under its own name counts once, and an approval's
expiry not at all. Beyond the cap: not set, and one line to the person saying why.

On both stores, through the real finish (and the real worker and agents where an agent is
involved)."""

from __future__ import annotations

import pytest

from tests.conftest import T0, MakeStore
from tests.support.refund_world import INBOX, Desk
from wakeful.agents import Agent, Conversation, Message, Run, Timer, Tool
from wakeful.bot.process.config import Config, ConfigError
from wakeful.core.clock import ManualClock
from wakeful.core.effects import ApprovalRequest, Effects, Post
from wakeful.core.settings import DEFAULTS
from wakeful.core.store import Store
from wakeful.core.worker import Worker

SETTING = "(WAKEFUL_MAX_TIMERS_PER_INBOX)"


def note(n: int, cap: int = 50) -> str:
    timers = "1 timer was" if n == 1 else f"{n} timers were"
    return f"{timers} not set: at most {cap} reminders and timers at once {SETTING}."


def timer_names(store: Store, inbox: str = INBOX) -> list[str]:
    return sorted(t.id.split("/", 1)[1] for t in store.timers(inbox))


def notes(store: Store, inbox: str = INBOX) -> list[str]:
    return [r.text for r in store.outbox(inbox=inbox) if SETTING in r.text]


# -- the refund desk: `remind me` -----------------------------------------------------------


def test_400_reminders_set_50_timers_and_each_run_past_the_cap_says_so_once(
    store: Store,
) -> None:
    """The issue's flood: 400 `remind me` DMs made 400 timers. Now the first 50 are set; each
    run past the cap answers its messages in one post, with one line saying how many were not
    set and why (not one line per message)."""
    assert DEFAULTS.max_timers_per_inbox == 50
    desk = Desk(store)
    for n in range(400):
        desk.say(f"remind me in {n + 1} minutes to drink water {n}")
    for _ in range(20):
        desk.tick()
        if not store.events(INBOX, "open"):
            break
    assert not store.events(INBOX, "open")
    names = timer_names(store)
    assert len(names) == 50 and all(n.startswith("remind-") for n in names)
    # 50 messages a run (the claim cap): 8 runs, each one reply, and each of the 7 past the
    # cap one line more (350 reminders not set, said in 7 lines, not 350).
    texts = desk.texts()
    assert len(texts) == 15
    assert texts[0].startswith("Handled 50 messages.\nI'll remind you in 1 minutes")
    assert texts[0].count("I'll remind you") == 50 and SETTING not in texts[0]
    assert texts[1:] == ["Handled 50 messages.", note(50)] * 7
    # Said in the same post as the reply it goes with (urgent, the same conversation).
    [post] = desk.sender.parts  # every run finished before the dispatcher's tick
    assert post.text.count(note(50)) == 7 and post.channel == "D1"


def test_one_reminder_past_the_cap_is_answered_with_the_limit(make_store: MakeStore) -> None:
    desk = Desk(make_store(max_timers_per_inbox=3))
    for n in range(4):
        desk.say(f"remind me in 10 minutes to stretch {n}")
        desk.tick(T0 + n)
    assert len(timer_names(desk.store)) == 3
    assert [p.text for p in desk.sender.parts][-1] == f"Handled 1 message.\n\n{note(1, 3)}"
    # A digest is a timer too: at the cap it is not set, and not said to be.
    desk.say("digest every 2 hours")
    desk.tick(T0 + 10)
    assert desk.sender.parts[-1].text == f"Handled 1 message.\n\n{note(1, 3)}"
    assert "digest" not in timer_names(desk.store)
    # One reminder fires: its place is free again.
    desk.tick(T0 + 600)
    desk.say("remind me in 10 minutes to sit down")
    desk.tick(T0 + 600)
    assert (
        desk.sender.parts[-1].text == "Handled 1 message.\nI'll remind you in 10 minutes: sit down"
    )
    assert len(timer_names(desk.store)) == 3


# -- the engine: a run's set_timer, and the finish whatever a run returns ---------------------


class Timers(Agent):
    """Sets the timers each message names (`set a b c`, `cancel a`), and says what
    `set_timer` answered; `quiet` leaves the line about the cap to wakeful."""

    def __init__(self, own_words: bool = False) -> None:
        self.tools = [Tool("noop", lambda args, key: None)]
        self.own_words = own_words
        self.answers: list[bool] = []

    def run(self, run: Run) -> None:
        for e in run.events:
            if not isinstance(e, Message):
                continue
            verb, *names = e.text.split()
            for name in names:
                if verb == "cancel":
                    run.cancel_timer(name)
                elif verb == "ask":
                    run.ask("noop", {}, summary=f"ok {name}?", to=e, id=f"req-{name}")
                else:
                    set_ = run.set_timer(Timer.once(name, run.now + 3600), to=e)
                    self.answers.append(set_)
            if self.own_words and (said := run.not_set_note()):
                run.reply(f"Sorry. {said}", to=e)


def say(store: Store, text: str, n: int, inbox: str = INBOX) -> None:
    body = Message(text=text, user="U1", team="T1", channel="D1", ts=f"{T0}.{n:06d}").to_wire()
    assert store.ingest(inbox, "slack", f"Ev{n:06d}", body, T0 + n).event_id is not None


def test_set_timer_says_no_past_the_cap_replacing_and_cancelling_take_no_place(
    make_store: MakeStore,
) -> None:
    store = make_store(max_timers_per_inbox=3)
    agent = Timers()
    clock = ManualClock(T0)
    worker = Worker(store=store, agent=agent, holder="w", clock=clock)
    say(store, "ask x y", 1)  # two approvals: their expiries are timers that do not count
    say(store, "set a b c d", 2)
    clock.now = T0 + 2
    worker.tick(clock.now)
    assert agent.answers == [True, True, True, False]
    assert timer_names(store) == ["a", "approval:req-x", "approval:req-y", "b", "c"]
    [said] = [r for r in store.outbox(inbox=INBOX) if SETTING in r.text]
    assert (said.text, said.channel, said.priority) == (note(1, 3), "D1", "urgent")
    agent.answers.clear()
    say(store, "set a", 3)  # the same name again: replaced, counted once
    say(store, "cancel b", 4)
    say(store, "set e f", 5)  # b's place is free for one of them
    clock.now = T0 + 10
    worker.tick(clock.now)
    assert agent.answers == [True, True, False]
    assert timer_names(store) == ["a", "approval:req-x", "approval:req-y", "c", "e"]
    [a] = [t for t in store.timers(INBOX) if t.id.endswith("/a")]
    assert a.next_at == T0 + 10 + 3600  # replaced: the new time stands
    assert notes(store) == [note(1, 3)] * 2


def test_an_agent_that_says_it_itself_is_not_said_for(make_store: MakeStore) -> None:
    store = make_store(max_timers_per_inbox=1)
    clock = ManualClock(T0 + 1)
    worker = Worker(store=store, agent=Timers(own_words=True), holder="w", clock=clock)
    say(store, "set a b c", 1)
    worker.tick(clock.now)
    said = [r.text for r in store.outbox(inbox=INBOX) if SETTING in r.text]
    assert said == [f"Sorry. {note(2, 1)}"]


C7 = Conversation("C7")


def _timers(names: list[str], at: int, to: Conversation | None = C7) -> list[Timer]:
    from wakeful.core.events import timer_payload

    return [Timer.once(n, at, timer_payload({"n": n}, to)) for n in names]


def _finish(store: Store, effects: Effects, n: int, inbox: str = INBOX) -> None:
    store.ingest(inbox, "slack", f"fin-{n}", {"text": "x"}, T0 + n)
    claim = store.acquire_and_claim(inbox, "W", T0 + n)
    assert claim is not None and claim.events
    assert store.finish(claim, effects, T0 + n, release=True)


def test_the_finish_sets_no_timer_past_the_cap_whatever_a_run_returns(
    make_store: MakeStore,
) -> None:
    """An agent that returns its effects itself never meets the run's budget: the finish
    holds the cap all the same, and says it once, where the first refused timer answers."""
    store = make_store(max_timers_per_inbox=5)
    approval = ApprovalRequest(
        id="r1",
        tool="t",
        args={},
        requester="U1",
        deadline=T0 + 3600,
        channel="C7",
        prompt=Post("C7", "Approve?"),
    )
    _finish(store, Effects(approvals=[approval], timers=_timers(["a", "b"], T0 + 99)), 1)
    names = [f"t{i}" for i in range(60)]
    _finish(store, Effects(timers=_timers(["a", *names], T0 + 100)), 2)
    assert timer_names(store) == ["a", "approval:r1", "b", "t0", "t1", "t2"]
    [a] = [t for t in store.timers(INBOX) if t.id.endswith("/a")]
    assert a.next_at == T0 + 100  # replaced, and counted once
    [said] = [r for r in store.outbox(inbox=INBOX) if SETTING in r.text]
    assert (said.text, said.channel, said.priority) == (note(57, 5), "C7", "urgent")
    # At the cap, a timer of a name the inbox has is still replaced, and nothing is said.
    _finish(store, Effects(timers=_timers(["t2"], T0 + 500)), 3)
    assert len(notes(store)) == 1
    [t2] = [t for t in store.timers(INBOX) if t.id.endswith("/t2")]
    assert t2.next_at == T0 + 500
    # Cancelled in the same finish: its place is free for a new one.
    _finish(store, Effects(cancel_timers=["t0"], timers=_timers(["u"], T0 + 600)), 4)
    assert "u" in timer_names(store) and "t0" not in timer_names(store)
    # A timer with no conversation to answer in is refused all the same, and only logged.
    _finish(store, Effects(timers=_timers(["v"], T0 + 700, to=None)), 5)
    assert "v" not in timer_names(store) and len(notes(store)) == 1
    other = "T1:U2"  # another person's inbox has its own cap
    _finish(store, Effects(timers=_timers(["w"], T0 + 800)), 6, inbox=other)
    assert timer_names(store, other) == ["w"]


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("0", "WAKEFUL_MAX_TIMERS_PER_INBOX must be"),
        ("many", "WAKEFUL_MAX_TIMERS_PER_INBOX must be"),
    ],
)
def test_the_setting_is_read_and_checked(value: str, error: str) -> None:
    assert Config.from_env({}).settings.max_timers_per_inbox == 50
    env = {"WAKEFUL_MAX_TIMERS_PER_INBOX": "7"}
    assert Config.from_env(env).settings.max_timers_per_inbox == 7
    with pytest.raises(ConfigError, match=error):
        Config.from_env({"WAKEFUL_MAX_TIMERS_PER_INBOX": value})
