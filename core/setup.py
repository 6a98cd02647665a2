"""The agent's side of the engine: what a factory is given (`Setup`), and what it returns.

An agent turns a run (a batch of one inbox's typed events) into effects it asks the run for
(core/run.py). It never sends anything and never sees a Slack token; a tool that touches the
outside world runs as a durable step with a stable idempotency key. A factory is called once
per worker with a `Setup`: the settings an agent may read, the approvers, a time-zone look-up,
read-only queries and the environment without Slack's secrets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from wakeful.core.gateway.client import Gateway
from wakeful.core.query import Query
from wakeful.core.settings import DEFAULTS
from wakeful.core.steps import Steps


@dataclass(frozen=True, slots=True)
class Zone:
    """A person's time zone: `name` (IANA). `known` is False when UTC stands in, and `reason`
    says why (Slack could not be read now, and a later run asks again; or Slack named a zone
    this host does not know): say so when you use it."""

    name: str
    known: bool = True
    reason: str = ""


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """The engine's settings an agent may read (their WAKEFUL_* variables)."""

    approval_ttl: int = DEFAULTS.approval_ttl
    max_attempts: int = DEFAULTS.max_attempts
    outbox_gap: int = DEFAULTS.outbox_gap
    lease_ttl: int = DEFAULTS.lease_ttl
    max_approvals_per_run: int = DEFAULTS.max_approvals_per_run
    max_open_approvals: int = DEFAULTS.max_open_approvals
    max_timers_per_inbox: int = DEFAULTS.max_timers_per_inbox
    quiet_digests: bool = True
    min_digest_period: int = 60
    """The shortest digest period the built-in agents set, in seconds
    (WAKEFUL_MIN_DIGEST_PERIOD)."""
    failure_text: str | None = None


def _utc(user: str) -> Zone:
    return Zone("UTC", known=False, reason="no Slack to ask")


@dataclass(frozen=True)
class Setup:
    """What a factory is given, once per worker process."""

    query: Query
    """Read-only questions about the store (open approvals, timers, dead events, ...), in the
    workspace of the run that asks unless it says `everywhere=True`."""
    steps: Steps
    """Durable steps under keys of your own (`steps.once(key, fn, name=...)`), for a tool
    that must act once per order, whoever asks and in whatever inbox of the workspace (or of
    every workspace: `everywhere=True`)."""
    settings: AgentSettings = field(default_factory=AgentSettings)
    approvers: tuple[str, ...] = ()
    """WAKEFUL_APPROVERS: `T…:U…` (that person in that workspace) or `U…` (single-workspace
    mode): who may answer the approvals of their workspace (`query.is_approver`)."""
    time_zone: Callable[[str], Zone] = _utc
    """A person's time zone from Slack, cached and never slow (see Zone)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """The process environment without wakeful's secrets: your agent's own settings."""
    gateway: Gateway | None = None
    """The credential gateway (WAKEFUL_GATEWAY_URL; `wakeful serve` starts one for
    WAKEFUL_GATEWAY_CONFIG), or None: where a tool reaches an outside service with a secret
    this process never holds (`gateway.url("stripe")` for an SDK, `gateway.request(...)`)."""


__all__ = ["AgentSettings", "Setup", "Zone"]
