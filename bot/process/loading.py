"""Loading the configured agent: its factory found (WAKEFUL_AGENT, WAKEFUL_AGENT_PATH), checked,
and called with a `Setup`; the runner that puts it behind the worker, with the Slack edge's
surfaces around it."""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any

from slack_sdk import WebClient

from wakeful.bot.process.config import SECRET_VARIABLES, Config, ConfigError
from wakeful.bot.slack.home import failed_home
from wakeful.core.clock import Clock, wall_clock
from wakeful.core.errors import InvalidInput
from wakeful.core.gateway.client import Gateway
from wakeful.core.memory import MemoryLimits
from wakeful.core.query import Query
from wakeful.core.rules.schedule import zone as check_zone
from wakeful.core.runner import AgentLike, Declared, RunHook, Runner
from wakeful.core.services import RunServices, Tool
from wakeful.core.setup import AgentSettings, Setup, Zone
from wakeful.core.steps import Steps
from wakeful.core.store import Store
from wakeful.core.stream_edge import StreamSurface
from wakeful.core.tenancy import Workspace

BUILT_IN = {
    "refund-desk": "wakeful.bot.builtin.refund_desk:factory",
    "claude": "wakeful.bot.builtin.claude:factory",
}
Factory = Callable[[Setup], Any]
EXPECTED = "a factory taking one argument, setup: wakeful.agents.Setup, and returning the agent"


def agent_path(env: Mapping[str, str]) -> list[str]:
    """The folders an agent module is looked for in, before the installed packages: those of
    WAKEFUL_AGENT_PATH (separated by os.pathsep), then the current directory."""
    extra = [p for p in env.get("WAKEFUL_AGENT_PATH", "").split(os.pathsep) if p.strip()]
    return [*extra, os.getcwd()]


def load_factory(spec: str, env: Mapping[str, str] | None = None) -> Factory:
    """The factory `spec` names (`module.path:name`, or a built-in agent's name), checked:
    ConfigError with one line saying what is wrong and where it was looked for."""
    env = os.environ if env is None else env
    target = BUILT_IN.get(spec, spec)
    module_name, _, name = target.partition(":")
    for folder in reversed(agent_path(env)):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if spec == "claude" and "anthropic" in str(exc):
            raise ConfigError(
                "WAKEFUL_AGENT=claude needs the anthropic package: pip install 'wakeful[claude]'"
            ) from exc
        missing = exc.name or ""
        if missing and not _is_part_of(module_name, missing):
            # the module was found; something it imports is not installed
            raise ConfigError(
                f"WAKEFUL_AGENT {spec!r}: its module {module_name} was found but cannot import "
                f"{missing!r} ({exc}): install it in the environment wakeful runs in"
            ) from exc
        looked = ", ".join(agent_path(env))
        raise ConfigError(
            f"WAKEFUL_AGENT {spec!r} cannot be loaded: {exc} (looked in {looked} and the "
            "installed packages; set WAKEFUL_AGENT_PATH to the folder holding the module)"
        ) from exc
    factory = getattr(module, name, None)
    if factory is None:
        raise ConfigError(f"WAKEFUL_AGENT {spec!r}: module {module_name} has no {name!r}")
    check_factory(spec, factory)
    return factory  # type: ignore[no-any-return]


def _is_part_of(module_name: str, missing: str) -> bool:
    """`missing` is `module_name` or one of the packages it lies in (`a` or `a.b` of `a.b.c`):
    the agent's module itself was not found, rather than something it imports."""
    return module_name == missing or module_name.startswith(missing + ".")


def check_factory(spec: str, factory: Any) -> None:
    """A factory must be callable with exactly one positional argument (the setup)."""
    if not callable(factory):
        raise ConfigError(f"WAKEFUL_AGENT {spec!r} is not callable: expected {EXPECTED}")
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return  # a builtin without a signature: let the call say
    try:
        signature.bind(object())
    except TypeError:
        shown = str(signature)
        raise ConfigError(f"WAKEFUL_AGENT {spec!r} takes {shown}: expected {EXPECTED}") from None


AGENT_KEYS = frozenset({"ANTHROPIC_API_KEY"})
"""Credentials an agent holds itself (the Claude agent calls the Messages API)."""
_SECRET_NAME = re.compile(r"(SECRET|TOKEN|PASSWORD|_KEY$)")


def agent_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment an agent sees: without Slack's tokens and signing secret, webhook
    secrets, the store's address (it may carry a password) or anything named like a secret,
    except the model's key the Claude agent needs."""
    hidden = set(SECRET_VARIABLES) | {"WAKEFUL_DB", "WAKEFUL_WEBHOOKS"}
    return {
        k: v
        for k, v in env.items()
        if k in AGENT_KEYS or (k not in hidden and not _SECRET_NAME.search(k))
    }


def make_setup(
    config: Config,
    store: Store,
    zone: Callable[[str], str],
    env: Mapping[str, str],
    clock: Clock = wall_clock,
) -> Setup:
    """What an agent may know: settings, approvers, a time-zone look-up, read-only queries, the
    environment without Slack's secrets, and the credential gateway when there is one."""
    s = config.settings

    def time_zone(user: str) -> Zone:
        name = zone(user)
        if not name:
            return Zone("UTC", known=False, reason="your Slack time zone could not be read")
        try:
            check_zone(name)
        except InvalidInput:  # Slack named a zone this machine's tz database lacks
            why = f"your Slack time zone {name} is not known on this host"
            return Zone("UTC", known=False, reason=why)
        return Zone(name)

    gateway_url = env.get("WAKEFUL_GATEWAY_URL", "").strip()
    try:
        token = env.get("WAKEFUL_GATEWAY_TOKEN")
        gateway = Gateway(gateway_url, token) if gateway_url else None
    except InvalidInput as exc:
        raise ConfigError(str(exc)) from None
    return Setup(
        settings=AgentSettings(
            approval_ttl=s.approval_ttl,
            max_attempts=s.max_attempts,
            outbox_gap=s.outbox_gap,
            lease_ttl=s.lease_ttl,
            max_approvals_per_run=s.max_approvals_per_run,
            max_open_approvals=s.max_open_approvals,
            max_timers_per_inbox=s.max_timers_per_inbox,
            quiet_digests=config.quiet_digests,
            min_digest_period=config.min_digest_period,
            failure_text=config.failure_text,
        ),
        approvers=config.approvers,
        time_zone=time_zone,
        query=Query(store, config.approvers),
        steps=Steps(store, clock),
        env=agent_env(env),
        gateway=gateway,
    )


def build_runner(
    config: Config,
    store: Store,
    client: WebClient | None,
    factory: Factory | None = None,
    env: Mapping[str, str] | None = None,
    clock: Clock = wall_clock,
    tokens: Callable[[str | None], str] | None = None,
    wake_dispatcher: Callable[[], None] | None = None,
    zone: Callable[[str], str] | None = None,
    streams: StreamSurface | None = None,
) -> Runner:
    """The configured agent behind the worker: its tools, the Slack approval prompts, and the
    hooks of the Slack surfaces (the Home tab, the "is thinking…" status, the greeting).
    `streams`: where its streamed replies show as they are written (bot/slack/streams.py).
    `tokens` (distribution mode) gives the time-zone look-up the token of the workspace whose
    run asks; `wake_dispatcher` sends a status at once; `zone` (the test harness) names a
    person's time zone instead of asking Slack."""
    from wakeful.bot.slack.privacy import SlackPrivacy
    from wakeful.bot.slack.surfaces import SlackApprovals, Surface, surface_hooks
    from wakeful.bot.slack.zones import WorkspaceHook, ZoneLookup

    env = os.environ if env is None else env
    made = factory or load_factory(config.agent, env)
    setup = make_setup(config, store, zone or ZoneLookup(client, tokens=tokens), env, clock)
    agent: object = made(setup)
    if not (isinstance(agent, AgentLike) and callable(agent.run)):
        raise ConfigError(
            f"WAKEFUL_AGENT {config.agent!r} returned {type(agent).__name__}, which has no "
            "run(self, run) method"
        )
    # What the agent declares beside `run`, read once here (an agent with only `run` gets
    # the defaults): its tools and failure text for the engine, its surfaces for Slack.
    try:
        agent_declared = Declared.of(agent)
    except InvalidInput as exc:
        raise ConfigError(str(exc)) from exc
    if any(not isinstance(tool, Tool) for tool in agent_declared.tools):
        raise ConfigError(f"{type(agent).__name__}.tools must hold wakeful.agents.Tool")
    services = RunServices(
        ledger=store,
        query=setup.query,
        budget=store.approval_budget,
        timers=store.timer_budget,
        approvers=config.approvers,
        approval_ttl=config.settings.approval_ttl,
        view=SlackApprovals(config.settings.self_approval),
        tools=agent_declared.tool_map,
        approval=store.approval,
        # One workspace holds every inbox; in distribution mode, each team (or its org).
        workspace_of=store.workspace_of if config.distribution else Workspace.only,
        streams=streams,
        stream_segment=config.settings.stream_segment,
        memory_read=store.memory_read,
        memory_paths=store.memory_paths,
        memory_docs=store.memory_sizes,
        shared_memory_writes=agent_declared.shared_memory == "write",
        memory_limits=MemoryLimits(config.settings.memory_doc_bytes, config.settings.memory_docs),
        privacy=SlackPrivacy(),
        waiting_after=store.waiting_after if agent_declared.interrupts else None,
    )
    hooks: list[RunHook] = surface_hooks(store, config, agent, Surface.of(agent), wake_dispatcher)
    if tokens is not None:
        hooks.insert(0, WorkspaceHook())
    return Runner(
        agent,
        services,
        tuple(hooks),
        config.settings,
        failure_text=agent_declared.failure_text or config.failure_text,
        edge_notice=failed_home,
        kinds=store.kinds,  # Slack's, as the process's assembly opened the store with them
    )
