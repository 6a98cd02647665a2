"""The agent protocol: what a run is given and what it may return.

An agent is a pure-ish function from (inbox, claimed events, saved session) to Effects. It never
sends anything and never sees a Slack token; side effects happen only through tools, and a tool
that an unattended run may repeat must take an idempotency key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from wakeful.core.effects import Effects
from wakeful.core.records import Event

Policy = Literal["allow", "deny", "ask"]


@dataclass(frozen=True, slots=True)
class Tool:
    """A capability an agent may use, with the permission that governs it.

    `allow` runs at once; `deny` is refused without running; `ask` becomes an approval request
    and runs only after a yes, with the request id as its idempotency key.
    """

    name: str
    policy: Policy
    fn: Callable[[Mapping[str, Any], str], Any]
    description: str = ""


@dataclass(frozen=True, slots=True)
class Run:
    """One run: a claimed batch of one inbox and what the agent may read."""

    inbox: str
    events: tuple[Event, ...]
    session: Any
    now: int
    heartbeat: Callable[[], None]
    """Renew the lease between long steps; raises LeaseLost when the run has been fenced off."""
    tools: Mapping[str, Tool] = field(default_factory=dict)


class Agent(Protocol):
    """Anything that turns a run into effects."""

    def run(self, run: Run) -> Effects: ...


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What calling a tool came to: it ran, it was refused, or it needs a person's yes first."""

    status: Literal["ran", "refused", "needs_approval"]
    value: Any = None


class Toolbox:
    """The tools of one agent, each governed by its permission policy."""

    def __init__(self, tools: list[Tool]) -> None:
        self._tools = {t.name: t for t in tools}

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def policy(self, name: str) -> Policy:
        return self._tools[name].policy

    def specs(self) -> list[Tool]:
        return list(self._tools.values())

    def call(self, name: str, args: Mapping[str, Any], key: str) -> ToolResult:
        """Run an `allow` tool, refuse a `deny` one, and report that an `ask` one needs an
        approval (the caller turns that into an ApprovalRequest and ends the run)."""
        tool = self._tools.get(name)
        if tool is None or tool.policy == "deny":
            return ToolResult("refused", f"tool {name!r} is not permitted")
        if tool.policy == "ask":
            return ToolResult("needs_approval")
        return ToolResult("ran", tool.fn(args, key))

    def run_approved(self, name: str, args: Mapping[str, Any], key: str) -> ToolResult:
        """Run an `ask` tool after a yes; `key` (the approval request id) makes a repeat a no-op."""
        tool = self._tools.get(name)
        if tool is None or tool.policy == "deny":
            return ToolResult("refused", f"tool {name!r} is not permitted")
        return ToolResult("ran", tool.fn(args, key))
