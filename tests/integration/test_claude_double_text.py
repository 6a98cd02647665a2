"""Issue 37, double-texting, inside the Claude agent (the worker and the fake Messages API, both
stores): a person who writes again while a tool of their run works stops the run at its next
boundary; the new run starts from what the first did (its tool's result carried, its effect
written once), with the newer words in the same turn, and answers both in one reply."""

from __future__ import annotations

from typing import Any

from tests.support import fake_anthropic as api
from tests.support.claude_world import INBOX, World, _close_agents, fake
from tests.support.fake_anthropic import FakeAnthropic
from wakeful.core.store import Store
from wakeful.devtools.audit import runs

__all__ = ["_close_agents", "fake"]  # the fixtures of tests/support/claude_world.py, used here too


def test_a_message_during_a_tool_is_answered_with_the_first_in_one_reply(
    store: Store, fake: FakeAnthropic
) -> None:
    w = World(store, fake)
    fake.script(
        api.tool_use("remind_me", {"text": "stretch", "in_seconds": 600}, "toolu_r1"),
        api.text("Reminder set for 10 minutes; and order 1002 it is."),
    )
    remind = w.agent._remind
    wrote_again: list[int] = []

    def remind_then_a_new_message(ctx: Any, args: Any, key: str) -> str:
        said = remind(ctx, args, key)
        if not wrote_again:  # while the tool works, the person adds to what they wrote
            wrote_again.append(w.say("oh, and it was order 1002, not 1001"))
        return said

    w.agent._remind = remind_then_a_new_message  # type: ignore[method-assign]
    first = w.say("remind me in 10 minutes to stretch, about order 1001")
    for _ in range(4):
        w.tick()

    assert fake.calls == 2, "the first run's call after its tool was never made"
    sent = api.plain(fake.requests[1]["messages"])
    [asked, used, answered] = sent[-3:]
    assert "order 1001" in str(asked["content"]), "the first message, as the first run sent it"
    assert [b["id"] for b in used["content"] if b["type"] == "tool_use"] == ["toolu_r1"]
    results = [b for b in answered["content"] if b["type"] == "tool_result"]
    assert [r["tool_use_id"] for r in results] == ["toolu_r1"]
    assert not results[0].get("is_error"), "the tool ran and its result was carried"
    assert "order 1002, not 1001" in str(answered["content"]), "the newer words join that turn"

    [reminder] = [t for t in store.timers(INBOX) if "stretch" in str(t.payload)]
    assert reminder.kind == "once" and reminder.next_at > w.now, "set once, by the new run"
    [reply] = w.replies()
    assert reply.text.startswith("Reminder set for 10 minutes")
    outcomes = [r.outcome for r in runs(store, INBOX)]
    assert outcomes == ["interrupted", "ok"], outcomes
    events = {e.id: e for e in store.events(INBOX)}
    assert events[first].status == "done" and events[wrote_again[0]].status == "done"
    assert events[first].attempts == 1, "the interrupted attempt was given back"
