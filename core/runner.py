"""From a claimed batch to the effects its finish writes: typed events, approved tools run as
durable steps, the agent's run, and the hooks of the surfaces around it.

The worker hands each claim to a `Runner`. Before the agent sees an approval's `yes`, the
approved tool runs here, once, as a durable step keyed by the request id, so the agent gets
the answer and the tool's result together; every answer also rewrites its prompt with the
outcome that stands. Hooks (the Slack edge's Home tab, its "is thinking…" status, its
assistant-thread greeting) see the same typed run before and after the agent.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from wakeful.core import effects as fx
from wakeful.core.errors import LeaseLost, SessionUnusable, StoreUnavailable
from wakeful.core.events import ApprovalAnswer, Command, Conversation, Event, Message, decode
from wakeful.core.records import Claim
from wakeful.core.records import Event as Stored
from wakeful.core.run import PlainApprovals, Run, RunServices, Tool
from wakeful.core.settings import DEFAULTS

log = logging.getLogger("wakeful")

FAILURE_TEXT = (
    "Sorry, I could not handle your message: it failed {attempts} times. "
    "It is set aside for an operator (`wakeful dead-letters`); please try again later."
)
"""Told once to a person whose message ran out of attempts (WAKEFUL_FAILURE_TEXT, or an
agent's `failure_text`, replaces it; `{attempts}` is filled in)."""


class Agent(Protocol):
    """What the worker calls: anything with `run(run)` (see wakeful.agents.Agent)."""

    def run(self, run: Run) -> Any: ...


class RunHook(Protocol):
    """Work around a run that is not the agent's (a surface to refresh, a status to show).
    `before` may queue what must show at once; `after` may add to the run's effects, which
    the fenced finish writes with the rest. A hook may also have `failed(run, effects)`,
    called instead of `after` when the agent failed (to undo what `before` showed)."""

    def before(self, run: Run) -> None: ...

    def after(self, run: Run, effects: fx.Effects) -> None: ...


def typed(event: Stored) -> Event:
    """The typed event of a stored row."""
    return decode(
        event.payload,
        id=event.id,
        source=event.source,
        key=event.source_id,
        received_at=event.created_at,
        attempt=event.attempts,
    )


@dataclass
class Runner:
    """Runs one claim's batch through the agent; returns what its finish must write."""

    agent: Agent
    services: RunServices
    hooks: Sequence[RunHook] = field(default_factory=tuple)
    max_attempts: int = DEFAULTS.max_attempts
    failure_text: str | None = None
    """WAKEFUL_FAILURE_TEXT; the agent's own `failure_text` comes first, FAILURE_TEXT last."""

    def notice_for(self, event: Stored) -> fx.Message | None:
        """What the person whose message ran out of attempts is told, once, where they wrote
        (nothing for an event no person is waiting on: a timer, a webhook)."""
        typed_event = typed(event)
        where = typed_event.reply_to
        person = getattr(typed_event, "user", None)
        if where is None or not typed_event.urgent or not person:
            return None
        text = getattr(self.agent, "failure_text", None) or self.failure_text or FAILURE_TEXT
        text = text.replace("{attempts}", str(event.attempts))
        if isinstance(typed_event, Command):
            return fx.Message(
                where.channel,
                text,
                kind="ephemeral",
                ref=typed_event.response_url,
                user=person,
                priority="urgent",
            )
        return fx.Message(where.channel, text, thread_ts=where.thread_ts, priority="urgent")

    def run(self, claim: Claim, session: Callable[[], Any], now: int, heartbeat: Any) -> fx.Effects:
        """The effects of one claim's run. An agent's failure is the run's effects too (its
        events retried, or dead on their last attempt, the error and traceback kept); a lost
        lease or a store that cannot be reached is raised: neither is the run's fault."""
        started: list[Run] = []
        try:
            return self._run(claim, session(), now, heartbeat, started)
        except (LeaseLost, StoreUnavailable):
            raise
        except SessionUnusable as exc:
            return self._failed(started, self._unusable_session(claim, exc))
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            log.warning("agent failed on %s %s: %s", claim.inbox, claim.ids, error)
            trace = traceback.format_exc()
            if log.isEnabledFor(logging.DEBUG):
                log.debug("%s", trace)
            failed = fx.Effects(failed={e.id: error for e in claim.events}, traceback=trace)
            return self._failed(started, failed)

    def _failed(self, started: list[Run], effects: fx.Effects) -> fx.Effects:
        """A failed run's effects keep what it already paid for (its model calls, logged with
        the run) and what its surfaces must undo (a status shown, cleared now)."""
        for run in started:
            effects.usage = list(run.usage)
            for hook in self.hooks:
                undo = getattr(hook, "failed", None)
                if undo is not None:
                    undo(run, effects)
        return effects

    def _unusable_session(self, claim: Claim, exc: SessionUnusable) -> fx.Effects:
        """Retry as any failure; on the last attempt dead-letter the events, set the session
        aside and tell the person (once: only this finish carries the notice)."""
        error = f"{SessionUnusable.ERROR_PREFIX}{exc}"
        if all(e.attempts < self.max_attempts for e in claim.events):
            log.warning("agent failed on %s %s: %s", claim.inbox, claim.ids, error)
            return fx.Effects(failed={e.id: error for e in claim.events})
        log.error(
            "%s: %s; events %s dead-lettered, session set aside, next run starts fresh",
            claim.inbox,
            error,
            claim.ids,
        )
        notice = exc.notice
        if isinstance(notice, str):
            where = _conversation_of(claim)
            notice = (
                None
                if where is None
                else fx.Message(where.channel, notice, thread_ts=where.thread_ts, priority="urgent")
            )
        return fx.Effects(
            messages=[notice] if isinstance(notice, fx.Message) else [],
            dead={e.id: error for e in claim.events},
            set_aside_session=str(exc),
        )

    def _run(
        self, claim: Claim, session: Any, now: int, heartbeat: Any, started: list[Run]
    ) -> fx.Effects:
        events: list[Event] = []
        tool_failed: dict[int, str] = {}
        trace = None
        for stored in claim.events:
            try:
                events.append(self._answered(claim.inbox, typed(stored), now))
            except (LeaseLost, StoreUnavailable):
                raise
            except Exception as exc:
                # An approved tool that failed (its service unreachable, say) fails its own
                # answer alone: it is retried with backoff, the batch's other events run now.
                tool_failed[stored.id] = f"{type(exc).__name__}: {exc}"
                trace = traceback.format_exc()
                log.warning("tool failed on %s event %s: %s", claim.inbox, stored.id, exc)
        if tool_failed and not events:
            return fx.Effects(failed=tool_failed, traceback=trace)
        run = Run(claim.inbox, events, session, now, self.services, heartbeat)
        started.append(run)
        for hook in self.hooks:
            hook.before(run)
        returned = self.agent.run(run)
        # The engine's own test agents return their effects; an agent asks through the run.
        effects = returned if isinstance(returned, fx.Effects) else run.effects()
        updates = [u for e in events if isinstance(e, ApprovalAnswer) if (u := self._outcome(e))]
        effects.messages[:0] = updates
        if not effects.failed and not effects.dead:
            for hook in self.hooks:
                hook.after(run, effects)
        else:
            effects = self._failed([run], effects)
        if tool_failed:
            effects.failed.update(tool_failed)
            effects.traceback = effects.traceback or trace
        return effects

    def _answered(self, inbox: str, event: Event, now: int) -> Event:
        """A `yes` runs the approved tool first, as a durable step keyed by the request id:
        a retried run gets the recorded result back instead of calling the tool again."""
        if not isinstance(event, ApprovalAnswer) or event.answer != "yes":
            return event
        tool = self.services.tools.get(event.tool)
        if tool is None:
            return replace(event, error=f"the agent has no tool {event.tool!r}; nothing ran")
        ledger = self.services.ledger
        recorded = ledger.recorded_step(event.request_id)
        if recorded is not None:
            result = recorded.result
        else:
            value = tool.fn(event.args, event.request_id)
            fx.check_json(value, f"the result of tool {event.tool!r}")
            result = ledger.record_step(event.request_id, inbox, event.tool, event.args, value, now)
        return replace(event, result=result)

    def _outcome(self, answer: ApprovalAnswer) -> fx.Message | None:
        """The prompt rewritten with the answer that stands (its buttons gone)."""
        if not answer.channel:
            return None
        return self.services.view.outcome(answer)


def _conversation_of(claim: Claim) -> Conversation | None:
    """Where a notice about the whole batch goes: the latest person's message or command,
    else the latest event that names a conversation (a timer's, an approval's)."""
    events = [typed(e) for e in reversed(claim.events)]
    for e in events:
        if isinstance(e, Message | Command):
            return e.reply_to
    return next((e.reply_to for e in events if e.reply_to is not None), None)


def runner_for(agent: Agent, store: Any) -> Runner:
    """A runner with the engine's defaults: approvals shown as plain text, the agent's own
    tools, no hooks (what the engine's tests and the scenarios run; `wakeful serve` builds
    one with the Slack edge's surfaces, bot/loading.py)."""
    from wakeful.core.query import Query

    tools = {t.name: t for t in getattr(agent, "tools", ()) or () if isinstance(t, Tool)}
    services = RunServices(
        ledger=store,
        query=Query(store),
        budget=store.approval_budget,
        approval_ttl=store.settings.approval_ttl,
        view=PlainApprovals(),
        tools=tools,
    )
    return Runner(agent, services, (), store.settings.max_attempts)
