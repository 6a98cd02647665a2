"""The Claude agent of `wakeful serve` as the issue-37 benchmarks' baselines need it
(bench/claude_stream.py), built by the built-in factory from the same environment:

- `WAKEFUL_AGENT=bench.claude_stream_agent:unstreamed`: replies posted whole when the run ends
  (`stream_replies=False`), the reply before issue 37;
- `WAKEFUL_AGENT=bench.claude_stream_agent:enqueueing`: a person's second message waits for the
  run in progress and gets a run of its own (`on_new_message = "enqueue"`), the engine's default.

Loaded with WAKEFUL_AGENT_PATH (or PYTHONPATH) naming the repository's root.
"""

from __future__ import annotations

from wakeful.agents import Setup
from wakeful.bot.builtin.claude import ClaudeAgent
from wakeful.bot.builtin.claude import factory as claude_factory


def unstreamed(setup: Setup) -> ClaudeAgent:
    """The built-in agent, its replies posted whole: the baseline of time to first word."""
    agent = claude_factory(setup)
    agent.stream_replies = False
    return agent


def enqueueing(setup: Setup) -> ClaudeAgent:
    """The built-in agent, a second message queued behind its run instead of interrupting it:
    the baseline of the calls interrupt saves. The engine reads the policy off the instance
    (core/runner.py `declared`), so the agent is otherwise the very same."""
    agent = claude_factory(setup)
    agent.on_new_message = "enqueue"  # type: ignore[assignment,misc]  # a ClassVar
    return agent
