"""`WAKEFUL_AGENT=tests.support.claude_kill:factory`: the Claude agent of `wakeful serve`, whose
process SIGKILLs itself at a chosen point of a run, once, for the crash tests.

`CLAUDE_KILL=before-call-<n>` kills the process right before it sends its n-th model call
(counted in this process), so exactly n-1 calls were made and recorded; `after-run` kills it
when the agent's run returns, before the fenced finish (every call made, nothing written).
`CLAUDE_KILL_MARK` names a file written just before the kill: a process that finds it (the
restart) never kills, so the retried run goes to the end. The client is the SDK's own
(`anthropic.DefaultHttpxClient`); the kill is an event hook on its requests.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import anthropic

from wakeful.agents import Run, Setup
from wakeful.bot.builtin.claude import ClaudeAgent
from wakeful.bot.builtin.claude import factory as claude_factory


def _kill(mark: Path) -> None:
    mark.write_text("killed")
    os.kill(os.getpid(), signal.SIGKILL)


def factory(setup: Setup) -> ClaudeAgent:
    plan = os.environ.get("CLAUDE_KILL", "")
    mark = Path(os.environ.get("CLAUDE_KILL_MARK", "claude-kill.mark"))
    armed = bool(plan) and not mark.exists()
    made = [0]

    def on_request(request: Any) -> None:
        made[0] += 1
        if armed and plan == f"before-call-{made[0]}":
            _kill(mark)

    agent = claude_factory(setup)
    agent.client.close()
    client = anthropic.Anthropic(
        api_key=setup.env["ANTHROPIC_API_KEY"],
        max_retries=0,
        timeout=agent.timeout,
        http_client=anthropic.DefaultHttpxClient(event_hooks={"request": [on_request]}),
    )
    agent.client = agent.caller.client = client
    if armed and plan == "after-run":
        inner = agent.run

        def run(r: Run) -> None:
            inner(r)
            _kill(mark)

        agent.run = run  # type: ignore[method-assign]
    return agent
