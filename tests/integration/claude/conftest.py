"""ClaudeAgent through the real engine, against a local fake of the Messages API
(tests/support/claude_world.py). Tests assert what a Slack user would see (outbox rows, the
parts a recording sender was handed), what the model was shown (the request bodies the fake
received), and what the store holds (approvals, timers, tool calls, the saved session).
"""

from tests.support.claude_world import _close_agents, fake, world

__all__ = ["_close_agents", "fake", "world"]  # the fixtures every module here uses
