"""Issue 38, item 4: the Claude agent remembers through the Messages API's memory tool, handled
on `run.memory` (bot/builtin/claude_memory.py), both stores, against the fake Messages API.

Every request declares the tool under its beta header (the fake refuses it without); each
command's answer is a tool_result, each failure `is_error` with one sentence and nothing
written (checked in the store after the run's finish); the memory listing is the system
prompt's second block, behind its own breakpoint; a retried or interrupted run writes its
memory once; a conversation cut is announced to the model first; and a preference told in one
conversation is used in a new one after the first was cut away.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import pytest

from tests.conftest import T0, MakeStore
from tests.support import fake_anthropic as api
from tests.support.claude_world import INBOX, World, _close_agents, fake, tool_results
from tests.support.fake_anthropic import FakeAnthropic
from wakeful.bot.builtin.claude_memory import CUT_NOTE, MEMORY_BETA, MEMORY_TOOL_SPEC
from wakeful.core.store import Store
from wakeful.devtools.audit import runs

__all__ = ["_close_agents", "fake"]  # the fixtures of tests/support/claude_world.py, used here too

OWNER = str(INBOX)
NOTES = "/memories/notes.md"
TOKEN = "xoxb-1234-5678-abcdefgh"
_ids = iter(range(1, 10_000))


def mem(command: str, **args: Any) -> tuple[str, dict[str, Any], str]:
    """One memory tool_use of a scripted model turn."""
    return ("memory", {"command": command, **args}, f"toolu_m{next(_ids)}")


def remember(w: World, *turns: list[tuple[str, dict[str, Any], str]]) -> list[dict[str, Any]]:
    """One run whose model makes each turn's memory calls, then answers: the tool results it
    was sent, in order."""
    w.say("please keep this in mind")
    start = len(w.fake.requests)
    w.fake.script(*(api.tool_uses(*uses) for uses in turns), api.text("Done."))
    w.tick(w.now + 60)
    assert len(w.fake.requests) == start + len(turns) + 1
    return [r for request in w.fake.requests[start + 1 :] for r in tool_results(request)]


def kept(store: Store) -> dict[str, tuple[int, str | None]]:
    """What the store keeps: path -> (version, text)."""
    return {d.path: (d.version, store.memory_read(OWNER, d.path)) for d in store.memory_docs(OWNER)}


def one_sentence(text: str) -> bool:
    return bool(text) and "\n" not in text and text.rstrip().endswith(".")


# -- the tool on every request -------------------------------------------------------------


def test_every_request_declares_the_memory_tool_under_its_beta_header(world: World) -> None:
    world.say("hi")
    world.fake.script(api.tool_use("status", {}, "toolu_s"), api.text("Hi."))
    world.tick()
    assert world.fake.calls == 2 and world.fake.refused == []
    for request, headers in zip(world.fake.requests, world.fake.headers, strict=True):
        assert request["tools"][-1] == MEMORY_TOOL_SPEC  # last: the tools' order never moves
        assert MEMORY_BETA in headers["anthropic-beta"].split(",")
    assert world.fake.requests[0]["tools"] == world.fake.requests[1]["tools"]


def test_the_fake_refuses_the_memory_tool_without_the_beta_header_as_the_api_does(
    fake: FakeAnthropic,
) -> None:
    client = anthropic.Anthropic(api_key="k", base_url=fake.base_url, max_retries=0)
    request: dict[str, Any] = {
        "model": "claude-test",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [MEMORY_TOOL_SPEC],
    }
    try:
        with pytest.raises(anthropic.BadRequestError) as refused:
            client.messages.create(**request)
        assert refused.value.status_code == 400
        assert refused.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
        assert fake.refused == [f"tools.0: the memory tool needs anthropic-beta: {MEMORY_BETA}"]
        # With the header, created or streamed, it is answered.
        fake.script(api.text("one"), api.text("two"))
        headers = {"anthropic-beta": MEMORY_BETA}
        made = client.messages.create(**request, extra_headers=headers)
        with client.messages.stream(**request, extra_headers=headers) as stream:
            streamed = stream.get_final_message()
        assert [made.content[0].text, streamed.content[0].text] == ["one", "two"]  # type: ignore[union-attr]
        assert [h.get("anthropic-beta") for h in fake.headers] == [None, MEMORY_BETA, MEMORY_BETA]
    finally:
        client.close()


@pytest.fixture
def world(store: Store, fake: FakeAnthropic) -> World:
    return World(store, fake)


# -- each command ---------------------------------------------------------------------------


def test_each_command_answers_as_the_sdks_memory_tool_and_the_finish_writes_it(
    world: World,
) -> None:
    store = world.store
    created = remember(
        world,
        [
            mem("create", path=NOTES, file_text="line one\nline two"),
            mem("create", path="/memories/people/ada.md", file_text="Ada: prefers mornings."),
        ],
    )
    assert [(r["content"], r.get("is_error")) for r in created] == [
        (f"File created successfully at: {NOTES}", None),
        ("File created successfully at: /memories/people/ada.md", None),
    ]
    assert kept(store) == {
        NOTES: (1, "line one\nline two"),
        "/memories/people/ada.md": (1, "Ada: prefers mornings."),
    }

    viewed = remember(
        world,
        [
            mem("view", path="/memories"),
            mem("view", path=NOTES),
            mem("view", path=NOTES, view_range=[2, -1]),
            mem("view", path="/memories/people"),
        ],
    )
    assert [r.get("is_error") for r in viewed] == [None] * 4
    assert viewed[0]["content"] == (
        "Here are the documents kept under /memories (size, path):\n"
        "17B\t/memories/notes.md\n22B\t/memories/people/ada.md"
    )
    assert viewed[1]["content"] == (
        f"Here's the content of {NOTES} with line numbers:\n     1\tline one\n     2\tline two"
    )
    assert viewed[2]["content"].endswith(":\n     2\tline two")
    assert viewed[3]["content"].endswith(":\n22B\t/memories/people/ada.md")

    changed = remember(
        world,
        [
            mem("str_replace", path=NOTES, old_str="line one", new_str="line 1"),
            mem("insert", path=NOTES, insert_line=2, insert_text="line three"),
            mem("rename", old_path="/memories/people/ada.md", new_path="/memories/ada.md"),
        ],
        [mem("delete", path="/memories/ada.md"), mem("view", path=NOTES)],
    )
    assert [r.get("is_error") for r in changed] == [None] * 5
    assert changed[3]["content"] == "Successfully deleted /memories/ada.md"
    assert "     3\tline three" in changed[4]["content"]  # the run reads its own writes
    assert kept(store) == {NOTES: (2, "line 1\nline two\nline three")}
    assert [v[:2] for v in store.memory_versions(OWNER, "/memories/people/ada.md")] == [
        (1, "Ada: prefers mornings."),
        (2, None),  # moved away, then deleted where it went: restorable from here
    ]

    # `create` on an existing path overwrites it: a new version, the previous kept.
    [overwritten] = remember(world, [mem("create", path=NOTES, file_text="all new")])
    assert overwritten.get("is_error") is None
    assert overwritten["content"] == (
        f"File overwritten at: {NOTES} (a new version; the previous one is kept)"
    )
    assert kept(store) == {NOTES: (3, "all new")}
    assert store.memory_versions(OWNER, NOTES)[1][1] == "line 1\nline two\nline three"


def test_a_command_that_does_not_succeed_is_an_error_of_one_sentence_and_writes_nothing(
    make_store: MakeStore, fake: FakeAnthropic
) -> None:
    store = make_store(memory_doc_bytes=200)
    world = World(store, fake)
    remember(world, [mem("create", path=NOTES, file_text="tea, twice\ntea, twice")])
    before = kept(store)
    failed = remember(
        world,
        [
            mem("view", path="/memories/nope.md"),
            mem("view", path="/etc/passwd"),
            mem("view", path=NOTES, view_range=[3, 9]),
            mem("create", path="/memories/../etc/x.md", file_text="x"),
            mem("create", path="/memories/big.md", file_text="x" * 201),
            mem("create", path="/memories/token.md", file_text=f"the token is {TOKEN}"),
            mem("str_replace", path=NOTES, old_str="coffee", new_str="tea"),
            mem("str_replace", path=NOTES, old_str="tea, twice", new_str="tea"),
            mem("str_replace", path=NOTES, old_str="tea, twice\n", new_str=TOKEN),
        ],
        [
            mem("insert", path=NOTES, insert_line=0, insert_text=f"key {TOKEN}"),
            mem("insert", path=NOTES, insert_line=9, insert_text="late"),
            mem("insert", path="/memories/none.md", insert_line=0, insert_text="x"),
            mem("delete", path="/memories/none.md"),
            mem("delete", path="/memories"),
            mem("rename", old_path="/memories/none.md", new_path="/memories/b.md"),
            mem("rename", old_path=NOTES, new_path=NOTES),
            mem("undo", path=NOTES),
            mem("create", path="/memories/half.md"),
        ],
    )
    said = [r["content"] for r in failed]
    assert all(r.get("is_error") is True for r in failed), said
    assert said == [
        "The path /memories/nope.md does not exist.",
        "The path '/etc/passwd' is outside /memories: memory lives there alone.",
        "view_range is [first, last] within lines 1 to 2 (last -1 for the end).",
        "The path '/memories/../etc/x.md' is outside /memories: memory lives there alone.",
        "The document would be 201 bytes, over the 200 bytes a memory document may hold: keep "
        "it short.",
        "Refused: the text holds a Slack token; secrets are never kept in memory.",
        f"The text to replace was not found in {NOTES}; it must be there once.",
        f"The text to replace was found 2 times in {NOTES}; it must be there once.",
        "Refused: the text holds a Slack token; secrets are never kept in memory.",
        "Refused: the text holds a Slack token; secrets are never kept in memory.",
        f"{NOTES} has 2 lines; insert at 0 to 2.",
        "There is no document at /memories/none.md.",
        "There is no document at /memories/none.md.",
        "The /memories directory itself cannot be deleted.",
        "There is no document at /memories/none.md.",
        f"There is a document at {NOTES} already.",
        "There is no memory command 'undo'; the commands are view, create, str_replace, "
        "insert, delete and rename.",
        "The memory command create needs file_text.",
    ]
    # One sentence each, never the secret.
    assert all(one_sentence(s) for s in said), said
    assert TOKEN not in json.dumps(said)
    assert kept(store) == before, "a refused command wrote something"
    assert [r.outcome for r in runs(store, INBOX)][-1] == "ok"  # the run itself finished


# -- the listing in the cached prefix -----------------------------------------------------------


def test_the_listing_is_the_second_system_block_with_its_own_breakpoint(world: World) -> None:
    fake = world.fake
    remember(world, [mem("create", path=NOTES, file_text="Prefers tea.")])
    first_run = fake.requests[:2]
    empty = "<wakeful_memory>/memories is empty: nothing is kept yet.</wakeful_memory>"
    for request in first_run:  # the run's own write does not change its calls' prefix
        prompt, listing = request["system"]
        assert listing == {"type": "text", "text": empty, "cache_control": {"type": "ephemeral"}}
        assert prompt["cache_control"] == {"type": "ephemeral"}
    world.say("what do you know?")
    fake.script(api.text("That you prefer tea."))
    world.tick(world.now + 60)
    listing = fake.requests[-1]["system"][1]
    # The same conversation: its listing unchanged (the write is in the conversation itself,
    # its tool_use and result), so the conversation behind it is read from the cache.
    assert listing["text"] == empty and "cache_control" in listing
    assert NOTES in json.dumps(fake.requests[-1]["messages"])
    assert fake.refused == []  # four breakpoints at most: the API's limit held


def test_the_listing_is_taken_anew_when_the_conversation_was_cut_or_began() -> None:
    from wakeful.agents import Memory
    from wakeful.bot.builtin.claude_memory import kept_listing

    docs: dict[str, str] = {}
    memory = Memory("T1:U1", lambda _o, p: docs.get(p), lambda _o, _f: sorted(docs))
    state: dict[str, object] = {"messages": [{"role": "user", "content": "hi"}]}
    empty = kept_listing(state, memory)
    docs[NOTES] = "Prefers tea."
    assert kept_listing(state, memory) == empty  # same conversation: same listing
    state["messages"] = [{"role": "user", "content": "after the cut"}]
    assert kept_listing(state, memory) == (
        "<wakeful_memory>Kept in /memories when this conversation began (size, path; what you "
        "wrote since is in the conversation):\n"
        f"12B\t{NOTES}\n</wakeful_memory>"
    )
    assert kept_listing({"messages": []}, memory).endswith(f"{NOTES}\n</wakeful_memory>")


# -- exactly once: a retry, a takeover, an interrupt ----------------------------------------------


def test_a_retried_run_replays_its_memory_commands_and_writes_them_once(world: World) -> None:
    store, fake = world.store, world.fake
    world.say("remember that I like tea")
    fake.script(
        api.tool_use("memory", {"command": "create", "path": NOTES, "file_text": "tea"}, "toolu_1"),
        api.error(529),
    )
    world.tick(T0)
    assert store.memory_docs(OWNER) == [], "a failed run wrote memory"
    fake.script(api.text("Noted."))
    world.tick(T0 + 30)
    assert fake.calls == 3, "the recorded call was made again"
    assert store.memory_versions(OWNER, NOTES)[0][:2] == (1, "tea")
    assert len(store.memory_versions(OWNER, NOTES)) == 1


def test_a_run_killed_before_its_finish_is_replayed_and_its_memory_written_once(
    store: Store, fake: FakeAnthropic
) -> None:
    world = World(store, fake, holder="worker-b")
    world.say("remember that I like tea")
    claim = store.acquire_and_claim(INBOX, "worker-a", T0)
    assert claim is not None
    fake.script(
        api.tool_use("memory", {"command": "create", "path": NOTES, "file_text": "tea"}, "toolu_1"),
        api.text("Noted."),
    )
    stale = world.runner.run(claim, lambda: store.session(INBOX), T0, lambda: None)
    # Worker A dies before its finish; B takes over, replays both calls and finishes.
    world.tick(T0 + store.settings.lease_ttl + 1)
    assert fake.calls == 2, "the takeover called the model again"
    assert store.finish(claim, stale, world.now) is False
    assert [v[:2] for v in store.memory_versions(OWNER, NOTES)] == [(1, "tea")]


def test_an_interrupted_runs_memory_commands_are_redone_by_the_run_that_carries_them(
    store: Store, fake: FakeAnthropic
) -> None:
    w = World(store, fake)
    fake.script(
        api.tool_uses(
            mem("create", path=NOTES, file_text="Order 1001 is the late one."),
            ("remind_me", {"text": "check order 1001", "in_seconds": 600}, "toolu_r1"),
        ),
        api.text("Noted, and it is order 1002."),
    )
    remind = w.agent._remind
    wrote_again: list[int] = []

    def remind_then_a_new_message(ctx: Any, args: Any, key: str) -> str:
        said = remind(ctx, args, key)
        if not wrote_again:  # while the tool works, the person adds to what they wrote
            wrote_again.append(w.say("oh, it was order 1002, not 1001"))
        return said

    w.agent._remind = remind_then_a_new_message  # type: ignore[method-assign]
    w.say("note that order 1001 is late and remind me in 10 minutes")
    for _ in range(4):
        w.tick()
    assert [r.outcome for r in runs(store, INBOX)] == ["interrupted", "ok"]
    assert fake.calls == 2
    assert [v[:2] for v in store.memory_versions(OWNER, NOTES)] == [
        (1, "Order 1001 is the late one.")
    ]


# -- the cut, and a preference that outlives it -----------------------------------------------


def test_a_preference_told_before_a_cut_is_used_in_a_new_conversation(
    store: Store, fake: FakeAnthropic
) -> None:
    w = World(store, fake, token_budget=1500)
    prefs = "/memories/preferences.md"
    w.say("I prefer answers in metric units")
    fake.script(
        api.tool_use(
            "memory",
            {"command": "create", "path": prefs, "file_text": "Answers in metric units (km, kg)."},
            "toolu_p",
        ),
        api.text("Noted: metric from now on."),
    )
    w.tick(T0)
    assert store.memory_read(OWNER, prefs) == "Answers in metric units (km, kg)."

    # Other talk pushes the conversation past its budget; the run whose start would cut it
    # is told first, in its only call, and the cut comes after; no other run is told.
    noted, dropped = [], []
    for n in range(8):
        before = w.session()["messages"]
        w.say(f"filler {n}: " + "the parcel went to the warehouse again. " * 25)
        fake.script(api.text("ok"))
        w.tick(T0 + 60 * (n + 1))
        after = w.session()["messages"]
        noted.append(json.dumps(fake.requests[-1]["messages"][-1]).count(CUT_NOTE))
        dropped.append(after[0] != before[0])
    assert noted == [int(d) for d in dropped] and any(dropped), (noted, dropped)
    assert "metric" not in json.dumps(w.session()), "the first conversation was not cut away"

    w.say("How far is it from Paris to Lyon?")
    fake.script(
        api.tool_use("memory", {"command": "view", "path": prefs}, "toolu_v"),
        api.text("About 390 km."),
    )
    w.tick(T0 + 3600)
    asked, answered = fake.requests[-2:]
    assert "metric" not in json.dumps(asked["messages"])
    assert prefs in asked["system"][1]["text"]  # the listing says it is there
    [result] = tool_results(answered)
    assert not result.get("is_error") and "Answers in metric units" in result["content"]
    assert w.replies()[-1].text == "About 390 km."


def test_the_cut_note_is_sent_once_in_a_run_whose_start_cuts_even_across_its_tool_steps(
    store: Store, fake: FakeAnthropic
) -> None:
    w = World(store, fake, token_budget=600)
    w.say("first " + "x" * 1200)
    fake.script(api.text("ok"))
    w.tick(T0)
    assert CUT_NOTE not in json.dumps(fake.requests[0])
    w.say("second " + "y" * 1200)
    fake.script(
        api.tool_use("memory", {"command": "create", "path": NOTES, "file_text": "x and y"}, "t1"),
        api.text("Saved."),
    )
    w.tick(T0 + 60)
    first, second = fake.requests[1:]
    assert "x" * 1200 in json.dumps(first["messages"]), "the first call had the old turns"
    assert json.dumps(first["messages"]).count(CUT_NOTE) == 1
    assert json.dumps(second["messages"]).count(CUT_NOTE) == 1  # the same note, not a second
    assert "x" * 1200 not in json.dumps(w.session()), "cut as usual after the call"
    assert store.memory_read(OWNER, NOTES) == "x and y"
