"""The agent protocol: what a run is given and what it may return.

An agent is a pure-ish function from (inbox, claimed events, saved session) to Effects. It never
sends anything and never sees a Slack token; side effects happen only through tools, and a tool
that an unattended run may repeat must take an idempotency key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
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


class RunHook(Protocol):
    """Work around a run that is not the agent's: a surface to refresh (the Home tab), a
    status to show while it thinks. `before` may queue what must show at once; `after` may
    add to the run's effects, which the fenced finish writes with the rest."""

    def before(self, run: Run) -> None: ...

    def after(self, run: Run, effects: Effects) -> None: ...


SURFACE_KINDS = frozenset({"home_opened"})
"""Slack events that wake an inbox for its hooks alone (the agent never sees them)."""


@dataclass(frozen=True, slots=True)
class Hooked:
    """An agent with hooks around each run (see `with_hooks`)."""

    agent: Agent
    hooks: tuple[RunHook, ...]

    def run(self, run: Run) -> Effects:
        for hook in self.hooks:
            hook.before(run)
        events = tuple(e for e in run.events if not _surface(e))
        effects = self.agent.run(replace(run, events=events)) if events else Effects()
        if not effects.failed and not effects.dead:
            for hook in self.hooks:
                hook.after(run, effects)
        return effects


def with_hooks(agent: Agent, *hooks: RunHook) -> Agent:
    """`agent` with `hooks` called before and after each of its runs; a run whose events are
    all surface events (SURFACE_KINDS) calls the hooks only."""
    return Hooked(agent, hooks) if hooks else agent


def _surface(event: Event) -> bool:
    payload = event.payload if isinstance(event.payload, dict) else {}
    return event.source == "slack" and payload.get("kind") in SURFACE_KINDS


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
