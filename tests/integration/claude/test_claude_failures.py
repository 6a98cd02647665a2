"""ClaudeAgent when things fail: API errors and timeouts retried, dead after max attempts,
rejected or unknown sessions set aside, tool loops and lost leases stopped; the durable session;
configuration and start-up (claude/conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import T0
from tests.support import fake_anthropic as api
from tests.support.claude_world import (
    HOUR,
    INBOX,
    ROOT,
    World,
    _agents,
    assert_valid_history,
    user_text,
)
from tests.support.fake_anthropic import FakeAnthropic
from wakeful.agents import (
    InvalidInput,
    LeaseLost,
)
from wakeful.bot.builtin.claude import (
    DEFAULT_MODEL,
    TOO_MANY_STEPS_LINE,
    ClaudeAgent,
)
from wakeful.bot.builtin.conversation import (
    approx_tokens,
    is_clean_user_turn,
    trim_history,
)
from wakeful.bot.process.config import Config, ConfigError
from wakeful.bot.process.loading import build_runner
from wakeful.core.effects import Effects
from wakeful.core.store import Store
from wakeful.core.worker import Worker

# -- failures --------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 500, 503, 529])
def test_an_api_failure_fails_the_run_and_it_is_retried_after_backoff(
    world: World, status: int
) -> None:
    fake = world.fake
    event = world.say("hello")
    fake.script(api.error(status))
    world.tick()
    stored = world.store.event(event)
    assert stored is not None and (stored.status, stored.attempts) == ("pending", 1)
    assert f"Claude API answered {status}" in (stored.error or "")
    assert world.rows() == []
    # No tight loop: the event is not claimable before its backoff (10 s on the first retry).
    assert [i for i, _ in world.store.ready_list(T0 + 9).inboxes] == []
    world.tick(T0 + 9)
    assert len(fake.requests) == 1
    fake.script(api.text("Hi."))
    world.tick(T0 + 10)
    assert len(fake.requests) == 2
    stored = world.store.event(event)
    assert stored is not None and (stored.status, stored.attempts) == ("done", 2)
    assert [(r.text, r.status) for r in world.replies()] == [("Hi.", "sent")]


def test_a_timeout_fails_the_run_like_any_api_failure(store: Store, fake: FakeAnthropic) -> None:
    world = World(store, fake, timeout=0.2)
    event = world.say("hello")
    fake.script(api.text("too late", delay=5))
    world.tick()
    stored = store.event(event)
    assert stored is not None and (stored.status, stored.attempts) == ("pending", 1)
    assert "timed out" in (stored.error or "")
    assert world.rows() == []


def test_repeated_failures_end_dead_after_max_attempts(world: World) -> None:
    event = world.say("hello")
    world.fake.script(api.error(529), api.error(529), api.error(529))
    for at in (T0, T0 + 10, T0 + 30):  # backoff 10 s, then 20 s
        world.tick(at)
    stored = world.store.event(event)
    assert stored is not None and (stored.status, stored.attempts) == ("dead", 3)
    world.tick(T0 + HOUR)
    assert len(world.fake.requests) == 3


def test_a_conversation_the_api_rejects_is_set_aside_and_the_next_message_runs_fresh(
    world: World,
) -> None:
    world.say("hello")
    world.fake.script(api.text("Hi."))
    world.tick()
    first = world.say("and now?")
    # The API refuses the saved conversation (400 invalid_request_error) on every attempt.
    world.fake.script(api.error(400), api.error(400), api.error(400))
    for at in (T0, T0 + 10, T0 + 30):  # backoff 10 s, then 20 s
        world.tick(at)
    stored = world.store.event(first)
    assert stored is not None and (stored.status, stored.attempts) == ("dead", 3)
    assert stored.error == (
        "session unusable: the Claude API refused the saved conversation "
        "(400: invalid_request_error)"
    )
    (aside,) = world.store.set_aside_sessions(INBOX)
    assert "hello" in aside.state and world.store.session(INBOX) is None
    told = [r for r in world.replies() if r.text.startswith("I had to start over")]
    assert len(told) == 1 and told[0].priority == "urgent"
    world.say("hello again")
    world.fake.script(api.text("Hello!"))
    world.tick(T0 + HOUR)
    fresh = world.fake.requests[-1]["messages"]
    assert len(fresh) == 1 and "hello again" in user_text(world.fake.requests[-1])
    assert [r.text for r in world.replies()][-1] == "Hello!"
    assert len([r for r in world.replies() if r.text.startswith("I had to start over")]) == 1


def test_a_saved_conversation_of_an_unknown_format_is_set_aside_not_dropped(
    world: World,
) -> None:
    world.say("setup")
    claim = world.store.acquire_and_claim(INBOX, "writer", T0)
    assert claim is not None
    fx = Effects()
    fx.set_session({"v": 2, "turns": ["from a newer release"]})
    assert world.store.finish(claim, fx, T0, release=True)
    event = world.say("what now?")
    for at in (T0 + 1, T0 + 11, T0 + 31):
        world.tick(at)
    stored = world.store.event(event)
    assert stored is not None and stored.status == "dead"
    assert stored.error == ("session unusable: the saved conversation has an unknown format (2)")
    (aside,) = world.store.set_aside_sessions(INBOX)
    assert "from a newer release" in aside.state
    assert world.fake.requests == []  # the API was never sent a conversation it cannot read


def test_a_tool_loop_stops_after_max_steps(store: Store, fake: FakeAnthropic) -> None:
    world = World(store, fake, max_steps=2)
    world.say("status forever")
    fake.script(api.tool_use("status", {}, "toolu_s1"), api.tool_use("status", {}, "toolu_s2"))
    world.tick()
    assert [r.text for r in world.replies()] == [TOO_MANY_STEPS_LINE]
    assert_valid_history(world.session()["messages"])


def test_a_lost_lease_between_model_calls_stops_the_run(store: Store, fake: FakeAnthropic) -> None:
    world = World(store, fake)
    world.say("status")
    claim = store.acquire_and_claim(INBOX, "worker-a", T0)
    assert claim is not None

    def heartbeat() -> None:
        raise LeaseLost("taken over")

    fake.script(api.tool_use("status", {}, "toolu_s"))
    with pytest.raises(LeaseLost):
        world.runner.run(claim, lambda: None, T0, heartbeat)
    assert len(fake.requests) == 1  # the loop stopped before its next model call


# -- durable session memory ------------------------------------------------------------------


def test_the_session_survives_a_restart_and_a_change_of_worker(world: World) -> None:
    world.say("my name is Ada")
    world.fake.script(api.text("Nice to meet you, Ada."))
    world.tick()
    other = world.restart("worker-b")
    other.say("what is my name?")
    world.fake.script(api.text("Ada."))
    other.tick(T0 + 60)
    turns = world.fake.requests[1]["messages"]
    assert "my name is Ada" in json.dumps(turns[0])
    assert api.plain(turns[1]["content"]) == [{"type": "text", "text": "Nice to meet you, Ada."}]
    assert [r.text for r in world.replies()] == ["Nice to meet you, Ada.", "Ada."]


def test_a_stale_worker_cannot_write_the_session(store: Store, fake: FakeAnthropic) -> None:
    world = World(store, fake, holder="worker-b")
    world.say("hello")
    claim = store.acquire_and_claim(INBOX, "worker-a", T0)
    assert claim is not None
    fake.script(api.text("the answer"))
    stale = world.runner.run(claim, lambda: store.session(INBOX), T0, lambda: None)
    assert stale.save_session and stale.session["since"] == T0
    # Worker A stalls past its lease; worker B takes over the same event, replays the answer A
    # recorded (no second call) and finishes: the session is B's, A's finish is refused.
    world.tick(T0 + store.settings.lease_ttl + 1)
    assert len(fake.requests) == 1
    assert store.finish(claim, stale, world.now) is False
    assert world.session()["since"] == world.now
    assert [r.text for r in world.replies()] == ["the answer"]


@st.composite
def histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Valid conversations: user turns, plain answers, and tool exchanges of several steps."""
    turns: list[dict[str, Any]] = []
    for n in range(draw(st.integers(1, 12))):
        turns.append(
            {"role": "user", "content": [{"type": "text", "text": "u" * draw(st.integers(1, 400))}]}
        )
        for step in range(draw(st.integers(0, 3))):
            uid = f"toolu_{n}_{step}"
            turns.append(
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": uid, "name": "status", "input": {}}],
                }
            )
            turns.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": uid,
                            "content": "r" * draw(st.integers(1, 400)),
                        }
                    ],
                }
            )
        turns.append(
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "a" * draw(st.integers(1, 400))}],
            }
        )
    return turns


@settings(max_examples=200, deadline=None)
@given(histories(), st.integers(1, 2000))
def test_trimming_keeps_a_valid_suffix_within_budget_when_it_can(
    turns: list[dict[str, Any]], budget: int
) -> None:
    kept = trim_history(turns, budget)
    assert kept == turns[len(turns) - len(kept) :]  # oldest dropped first
    assert_valid_history(kept)
    starts = [i for i, t in enumerate(turns) if is_clean_user_turn(t)]
    fits = [i for i in starts if sum(approx_tokens(t) for t in turns[i:]) <= budget]
    if fits:
        assert len(turns) - len(kept) == fits[0]  # dropped no more than needed
        assert sum(approx_tokens(t) for t in kept) <= budget
    else:
        assert len(turns) - len(kept) == starts[-1]  # the latest exchange always stays


def test_the_saved_session_is_trimmed_and_stays_valid_across_tool_steps(
    store: Store, fake: FakeAnthropic
) -> None:
    world = World(store, fake, token_budget=600)
    for n in range(6):
        world.say(f"message {n} " + "x" * 300)
        fake.script(
            api.tool_use("status", {}, f"toolu_{n}a"),
            api.tool_use("status", {}, f"toolu_{n}b"),
            api.text(f"answer {n}"),
        )
        world.tick(T0 + 10 * n)
    for request in fake.requests:
        assert_valid_history(request["messages"])
    turns = world.session()["messages"]
    assert_valid_history(turns)
    assert sum(approx_tokens(t) for t in turns) <= 600
    assert "message 0" not in json.dumps(turns)  # the oldest went first
    assert "answer 5" in json.dumps(turns)


# -- configuration and start-up --------------------------------------------------------------


BASE_ENV = {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s", "WAKEFUL_AGENT": "claude"}


def test_claude_without_an_api_key_stops_start_up_naming_it() -> None:
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY") as caught:
        Config.from_env(BASE_ENV, need={"token", "secret", "agent"})
    assert "\n" not in str(caught.value)
    config = Config.from_env({**BASE_ENV, "ANTHROPIC_API_KEY": "k", "WAKEFUL_MODEL": "claude-x"})
    assert (config.agent, config.anthropic_api_key, config.model) == ("claude", "k", "claude-x")


def test_build_runner_selects_claude_and_the_sdk_honours_anthropic_base_url(
    store: Store, fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
    env = {**BASE_ENV, "ANTHROPIC_API_KEY": "sk-test"}
    config = Config.from_env(env, need={"agent"})
    runner = build_runner(config, store, None, env=env)
    assert runner.hooks  # the Slack surfaces' hooks (Home tab, greeting) around it
    agent = runner.agent
    assert isinstance(agent, ClaudeAgent) and agent.model == DEFAULT_MODEL
    _agents.append(agent)
    fake.script(api.text("hello from the fake"))
    world = World(store, fake)
    world.worker = Worker(store=store, clock=world.clock, runner=runner)
    world.say("hi")
    world.tick()
    assert fake.requests[0]["model"] == DEFAULT_MODEL
    # anthropic 2.x sends the key as a bearer token (0.x sent x-api-key); the API takes both.
    sent = fake.headers[0].get("x-api-key") or fake.headers[0]["authorization"]
    assert sent.removeprefix("Bearer ") == "sk-test"
    assert [r.text for r in world.replies()] == ["hello from the fake"]
    with pytest.raises(InvalidInput, match="ANTHROPIC_API_KEY"):
        build_runner(Config(agent="claude"), store, None, env={})


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "WAKEFUL_"))}
    return {**env, **extra}


def test_wakeful_serve_without_the_key_exits_with_one_line(tmp_path: Path) -> None:
    env = _clean_env(**BASE_ENV, WAKEFUL_DB=str(tmp_path / "w.db"), WAKEFUL_PORT="0")
    done = subprocess.run(
        [sys.executable, "-m", "wakeful.bot.commands.cli", "serve"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "ANTHROPIC_API_KEY" in lines[0], done.stderr


def test_the_default_install_never_imports_anthropic(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "import wakeful.bot.commands.cli, wakeful.bot.process.runtime\n"
        "import wakeful.bot.process.config, wakeful.bot.front.wsgi\n"
        "import wakeful.agents\n"
        "from wakeful.bot.process.config import Config\n"
        "from wakeful.bot.process.loading import build_runner\n"
        "from wakeful.core.store import open_store\n"
        f"build_runner(Config(), open_store({str(tmp_path / 'w.db')!r}), None, env={{}})\n"
        "assert 'anthropic' not in sys.modules, 'anthropic was imported'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=_clean_env(), cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
