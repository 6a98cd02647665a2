"""The test harness behaves as `wakeful serve` does for what an agent sees: a mention's text as
Slack sends it (the bot's `<@U0BOT>` first, read without it), several messages in one run,
people's time zones, and `Outcome.timers` as the timers still to fire."""

from __future__ import annotations

from typing import Any

import pytest

from wakeful.agents import Agent, ApprovalAnswer, Message, Run, Setup, Timer, TimerTick, Tool
from wakeful.agents.testing import BOT, T0, Harness
from wakeful.core.errors import InvalidInput


class Recorder(Agent):
    """Keeps each run's events; answers a DM `daily` with a daily timer, `ask` with an
    approval, anything else with what it read."""

    tools = (Tool("wave", lambda args, key: "waved"),)

    def __init__(self, setup: Setup) -> None:
        self.setup = setup
        self.runs: list[list[Any]] = []

    def run(self, run: Run) -> None:
        self.runs.append(list(run.events))
        for e in run.events:
            if isinstance(e, Message) and e.text == "daily":
                zone = self.setup.time_zone(e.user)
                run.set_timer(Timer.daily("report", "09:00", zone.name), to=e)
            elif isinstance(e, Message) and e.text == "ask":
                run.ask("wave", {}, summary="wave", to=e)
            elif isinstance(e, Message):
                zone = self.setup.time_zone(e.user)
                run.reply(f"{e.text} | {zone.name} {zone.known}", to=e)
            elif isinstance(e, (TimerTick, ApprovalAnswer)):
                run.reply(type(e).__name__, to=e)


def harness(**more: Any) -> tuple[Harness, list[Recorder]]:
    made: list[Recorder] = []

    def factory(setup: Setup) -> Recorder:
        made.append(Recorder(setup))
        return made[-1]

    return Harness(factory, approvers=("U0BOSS",), **more), made


def test_a_mention_is_read_without_the_bots_own_mention_and_kept_whole_in_raw_text() -> None:
    h, [agent] = harness()
    with h:
        out = h.mention("status please", user="U0ALICE", channel="C0TEAM")
        assert out.text == "status please | UTC True"
        [[said]] = agent.runs
        assert said.text == "status please" and said.mention and said.kind == "mention"
        assert said.raw_text == f"<@{BOT}> status please"
        assert out.replies[0].thread_ts == said.ts, "a mention's reply starts a thread"
        h.dm("hi <@U0BOB>", user="U0ALICE")
        dm = agent.runs[-1][0]
        assert (dm.text, dm.raw_text) == ("hi <@U0BOB>", "hi <@U0BOB>")


def test_batch_hands_several_messages_to_one_run_in_order() -> None:
    h, [agent] = harness()
    with h:
        extra = h.message("third", user="U0ALICE")
        out = h.batch(["first", "second", extra], user="U0ALICE")
        assert [[e.text for e in run] for run in agent.runs] == [["first", "second", "third"]]
        assert [r.text for r in out.replies] == [
            f"{t} | UTC True" for t in ("first", "second", "third")
        ]
        with pytest.raises(ValueError, match="one inbox"):
            h.batch([h.message("x", user="U0BOB")], user="U0ALICE")
        with pytest.raises(ValueError, match="at least one"):
            h.batch([], user="U0ALICE")


def test_time_zones_give_each_person_their_zone_and_utc_to_everyone_else() -> None:
    h, _ = harness(time_zones={"U0ALICE": "Europe/Paris", "U0CARL": ""})
    with h:
        assert h.dm("zone?", user="U0ALICE").text == "zone? | Europe/Paris True"
        assert h.dm("zone?", user="U0BOB").text == "zone? | UTC True"
        assert h.dm("zone?", user="U0CARL").text == "zone? | UTC False", "Slack could not tell"
    with pytest.raises(InvalidInput):
        Harness(lambda setup: Recorder(setup), time_zones={"U0ALICE": "Mars/Olympus"})


def test_timers_are_the_ones_still_to_fire_after_every_call() -> None:
    h, _ = harness(time_zones={"U0ALICE": "Europe/Paris"})
    with h:
        # T0 is 10:00 UTC, 11:00 in Paris: the first 09:00 Paris is tomorrow, 08:00 UTC.
        first = T0 - 2 * 3600 + 86_400
        [timer] = h.dm("daily", user="U0ALICE").timers
        assert (timer.id, timer.next_at) == ("T0TEST:U0ALICE/report", first)
        out = h.advance(86_400)
        assert out.text == "TimerTick", "the daily timer fired"
        assert [(t.id, t.next_at) for t in out.timers] == [
            ("T0TEST:U0ALICE/report", first + 86_400)
        ]
        [asked] = h.dm("ask", user="U0ALICE").approvals
        out = h.answer(asked.id, "yes", by="U0BOSS")
        assert out.text == "ApprovalAnswer"
        assert [t.id for t in out.timers] == ["T0TEST:U0ALICE/report"], "no expiry left"
        [pending] = h.dm("ask", user="U0ALICE").approvals
        shown = [t.id for t in h.advance(1).timers]
        assert shown == [f"T0TEST:U0ALICE/approval:{pending.id}", "T0TEST:U0ALICE/report"]
