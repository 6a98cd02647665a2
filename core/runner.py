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
from dataclasses import dataclass, field, fields
from typing import Any, Protocol, runtime_checkable

from wakeful.core import effects as fx
from wakeful.core import tenancy
from wakeful.core.approved import Approved, run_approved, told_or_tell
from wakeful.core.errors import (
    Interrupted,
    InvalidInput,
    LeaseLost,
    SessionUnusable,
    StoreUnavailable,
)
from wakeful.core.events import ApprovalAnswer, Command, Conversation, Event, Message, decode
from wakeful.core.kinds import ENGINE_KINDS, Kinds
from wakeful.core.memory import MemoryLimits
from wakeful.core.privacy import answer_privacy, kept_docs, to_caller
from wakeful.core.privacy_text import Kept
from wakeful.core.records import Claim, StoredEvent
from wakeful.core.run import Run
from wakeful.core.services import RunServices, Tool
from wakeful.core.settings import DEFAULTS, Settings
from wakeful.core.views import PlainApprovals

log = logging.getLogger("wakeful")

FAILURE_TEXT = (
    "Sorry, I could not handle your message: it failed {attempts} times. "
    "It is set aside for an operator (`wakeful dead-letters`); please try again later."
)
"""Told once to a person whose message ran out of attempts (WAKEFUL_FAILURE_TEXT, or an
agent's `failure_text`, replaces it; `{attempts}` is filled in)."""


ON_NEW_MESSAGE = ("enqueue", "interrupt")
SHARED_MEMORY = ("read", "write")


@runtime_checkable
class AgentLike(Protocol):
    """What the worker calls: anything with `run(run)` (see wakeful.agents.Agent)."""

    def run(self, run: Run) -> Any: ...


class RunHook(Protocol):
    """Work around a run that is not the agent's (a surface to refresh, a status to show).
    `before` may queue what must show at once; `after` may add to the run's effects, which
    the fenced finish writes with the rest; `failed` is called instead of `after` when the
    agent failed (to undo what `before` showed)."""

    def before(self, run: Run) -> None: ...

    def after(self, run: Run, effects: fx.Effects) -> None: ...

    def failed(self, run: Run, effects: fx.Effects) -> None: ...


def declared(agent: object, shape: type[Any]) -> dict[str, Any]:
    """The attributes `agent` has among the fields of the dataclass `shape`, by name: read
    once, where the agent is loaded, into a typed object. The one place an agent's optional
    attributes are looked up by name: an agent need not subclass wakeful.agents.Agent (one
    with only `run` has none of them, and gets the defaults)."""
    return {f.name: getattr(agent, f.name) for f in fields(shape) if hasattr(agent, f.name)}


@dataclass(frozen=True)
class Declared:
    """What the engine reads off an agent beside `run` (wakeful.agents.Agent declares
    both): the tools it may ask a person to approve and its own failure text."""

    tools: tuple[object, ...] = ()
    """As the agent lists them: loading refuses an agent that lists anything but Tools."""
    failure_text: str | None = None
    on_new_message: str = "enqueue"
    """`enqueue` or `interrupt` (wakeful.agents.Agent); anything else is refused by `of`."""
    shared_memory: str = "read"
    """`read` or `write`: whether runs write the workspace's shared memory."""

    @classmethod
    def of(cls, agent: object) -> Declared:
        found = declared(agent, cls)
        text = found.get("failure_text")
        policy = found.get("on_new_message", "enqueue")
        if policy not in ON_NEW_MESSAGE:
            raise InvalidInput(
                f"{type(agent).__name__}.on_new_message must be 'enqueue' or 'interrupt', "
                f"got {policy!r}"
            )
        shared = found.get("shared_memory", "read")
        if shared not in SHARED_MEMORY:
            raise InvalidInput(
                f"{type(agent).__name__}.shared_memory must be 'read' or 'write', got {shared!r}"
            )
        tools = tuple(found.get("tools") or ())
        return cls(tools, str(text) if text else None, str(policy), str(shared))

    @property
    def interrupts(self) -> bool:
        return self.on_new_message == "interrupt"

    @property
    def tool_map(self) -> dict[str, Tool]:
        """The agent's Tools by name (what the engine runs once a person approves)."""
        return {t.name: t for t in self.tools if isinstance(t, Tool)}


def typed(event: StoredEvent) -> Event:
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

    agent: AgentLike
    services: RunServices
    hooks: Sequence[RunHook] = field(default_factory=tuple)
    settings: Settings = DEFAULTS
    """The engine's tunables: attempts, and how long an approved call waits on its service."""
    failure_text: str | None = None
    """What a person whose event ran out of attempts is told: the agent's own
    `failure_text`, else WAKEFUL_FAILURE_TEXT (decided where the agent is loaded); None:
    FAILURE_TEXT."""
    edge_notice: Callable[[Event, str], list[fx.Post]] | None = None
    """How the edge tells a person whose event names no conversation (the Slack edge: the
    Home tab, redrawn with the notice)."""
    kinds: Kinds = ENGINE_KINDS
    """The outbox's kinds and limits (the store's): what the agent asked to post is checked
    against them when the run ends (core/kinds.py `Kinds.check`)."""

    def notice_for(self, event: StoredEvent) -> list[fx.Post]:
        """What the people who caused an event that ran out of attempts are told, once (the
        store queues it in the transaction that makes the event dead): the first where they
        wrote (a command's answer only to them), each other one (an approver who is not the
        requester) only to them, in the same conversation. An event with no conversation
        (the Home tab opened) is told by the edge (`edge_notice`). Nothing for an event no
        person caused (a timer, a webhook)."""
        typed_event = typed(event)
        people = typed_event.people
        if not people:
            return []
        text = self.failure_text or FAILURE_TEXT
        text = text.replace("{attempts}", str(event.attempts))
        if isinstance(typed_event, Command):
            return [to_caller(typed_event, text)]
        where = typed_event.reply_to
        if where is None:
            return [] if self.edge_notice is None else self.edge_notice(typed_event, text)
        first, *others = people
        told: list[fx.Post] = []
        if typed_event.urgent:
            told.append(fx.Post(where.channel, text, thread_ts=where.thread_ts, priority="urgent"))
        else:  # a click beside a message (feedback): answered to that person alone
            others = [first, *others]
        told += [
            fx.Post(
                where.channel,
                text,
                thread_ts=where.thread_ts,
                kind="ephemeral",
                user=person,
                priority="urgent",
            )
            for person in others
        ]
        return told

    def take_back_dead(self, dead: Sequence[StoredEvent], now: int) -> None:
        """Events made dead without a run (their last attempt was killed): what those attempts
        streamed is taken back (a run that never finished leaves a half answer, or a stream
        still open, beside the failure notice). Best effort, as every take-back."""
        if self.services.streams is None:
            return
        for stored in dead:
            try:
                Run(stored.inbox, [typed(stored)], None, now, self.services).settle_streams()
            except Exception as exc:
                log.warning("could not take back what dead event %s streamed: %s", stored.id, exc)

    def run(self, claim: Claim, session: Callable[[], Any], now: int, heartbeat: Any) -> fx.Effects:
        """The effects of one claim's run. An agent's failure is the run's effects too (its
        events retried, or dead on their last attempt, the error and traceback kept); a lost
        lease or a store that cannot be reached is raised: neither is the run's fault. An
        approved call that waits on its service keeps its wait whatever the agent did."""
        started: list[Run] = []
        approved = Approved()
        try:
            # Everything the agent is called for here (approved tools, the run, the surfaces'
            # hooks) reads and keys steps in the inbox's workspace (core/tenancy.py).
            with tenancy.serving(claim.inbox, self.services.workspace_of):
                return self._run(claim, session(), now, heartbeat, started, approved)
        except (LeaseLost, StoreUnavailable):
            for run in started:
                run.abandon_streams()  # a half answer never stays: the retry answers whole
            raise
        except Interrupted as exc:
            log.info(
                "%s: run interrupted (%s); its events run again with the newer message",
                claim.inbox,
                exc,
            )
            return self._interrupted(claim, started, approved)
        except SessionUnusable as exc:
            effects = self._unusable_session(claim, exc)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            log.warning("agent failed on %s %s: %s", claim.inbox, claim.ids, error)
            trace = traceback.format_exc()
            if log.isEnabledFor(logging.DEBUG):
                log.debug("%s", trace)
            effects = fx.Effects(failed={e.id: error for e in claim.events}, traceback=trace)
        return self._failed(started, _with_calls(effects, approved.effects))

    def _interrupted(self, claim: Claim, started: list[Run], approved: Approved) -> fx.Effects:
        """The person wrote again (`Run.checkpoint`): nothing the run asked for is written,
        what it streamed is taken back, and its events go back, attempt given back, to run
        again at once with the newer message. An approved call it ran stays done (a step)."""
        calls = approved.effects
        effects = fx.Effects(released=[e.id for e in claim.events])
        effects = _with_calls(effects, calls)  # a call that now waits is told, as ever
        waiting = {w.event_id for w in calls.tool_waits}
        effects.released = [i for i in effects.released if i not in waiting]
        for run in started:
            effects.usage = list(run.usage)
            run.abandon_streams()
        return effects

    def _failed(self, started: list[Run], effects: fx.Effects) -> fx.Effects:
        """A failed run's effects keep what it already paid for (its model calls, logged with
        the run) and what its surfaces must undo (a status shown, cleared now, and a reply
        it streamed, taken back)."""
        for run in started:
            run.abandon_streams()
            effects.usage = list(run.usage)
            for hook in self.hooks:
                hook.failed(run, effects)
        return effects

    def _unusable_session(self, claim: Claim, exc: SessionUnusable) -> fx.Effects:
        """Retry as any failure; on the last attempt dead-letter the events, set the session
        aside and tell the person (once: only this finish carries the notice)."""
        error = f"{SessionUnusable.ERROR_PREFIX}{exc}"
        if all(e.attempts < self.settings.max_attempts for e in claim.events):
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
                else fx.Post(where.channel, notice, thread_ts=where.thread_ts, priority="urgent")
            )
        return fx.Effects(
            messages=[notice] if isinstance(notice, fx.Post) else [],
            dead={e.id: error for e in claim.events},
            set_aside_session=str(exc),
        )

    def _run(
        self,
        claim: Claim,
        session: Any,
        now: int,
        heartbeat: Any,
        started: list[Run],
        approved: Approved,
    ) -> fx.Effects:
        tool_failed: dict[int, str] = {}
        trace = None
        for stored in claim.events:
            try:
                event = typed(stored)
                run_approved(
                    self.services, self.settings, claim.inbox, event, now, approved, heartbeat
                )
            except (LeaseLost, StoreUnavailable):
                raise
            except Exception as exc:
                # Not the tool's failure (that is classified and answered above) but the
                # engine's around it: fails this answer alone, the batch's other events run.
                tool_failed[stored.id] = f"{type(exc).__name__}: {exc}"
                trace = traceback.format_exc()
                log.warning("approved call failed on %s event %s: %s", claim.inbox, stored.id, exc)
        events, calls = approved.events, approved.effects
        events, privacy = answer_privacy(
            events, lambda: self._kept(claim.inbox), self.services.privacy
        )
        if privacy is not None and (privacy.forget or not events):
            # The engine's own answers (core/privacy.py), or a pressed Forget: no agent run.
            privacy.failed, privacy.traceback = tool_failed, trace
            return _with_calls(privacy, calls)
        if not events:
            calls.failed, calls.traceback = tool_failed, trace
            return calls  # every event waits on its call (or failed): no run of the agent
        run = Run(claim.inbox, events, session, now, self.services, heartbeat)
        started.append(run)
        for hook in self.hooks:
            hook.before(run)
        returned = self.agent.run(run)
        run.checkpoint()  # the last boundary: an answer to words the person has added to
        # The engine's own test agents return their effects; an agent asks through the run.
        effects = returned if isinstance(returned, fx.Effects) else run.effects()
        for post in [*effects.messages, *(a.prompt for a in effects.approvals if a.prompt)]:
            self.kinds.check(post)  # one the store would refuse fails the run, as the agent's
        answers = [e for e in events if isinstance(e, ApprovalAnswer)]
        updates = [u for e in answers if (u := self._outcome(e))]
        effects.messages[:0] = [*calls.messages, *updates, *(privacy.messages if privacy else [])]
        if not effects.failed and not effects.dead:
            told_or_tell(answers, effects)
            for hook in self.hooks:
                hook.after(run, effects)
            _with_calls(effects, calls, messages=False)
        else:
            effects = self._failed([run], _with_calls(effects, calls, messages=False))
        if tool_failed:
            effects.failed.update(tool_failed)
            effects.traceback = effects.traceback or trace
        return effects

    def _kept(self, inbox: str) -> list[Kept]:
        s = self.services
        return kept_docs(s.memory_docs, s.memory_read, inbox)

    def _outcome(self, answer: ApprovalAnswer) -> fx.Post | None:
        """The prompt rewritten with the answer that stands (its buttons gone)."""
        if not answer.channel:
            return None
        return self.services.view.outcome(answer)


def _with_calls(effects: fx.Effects, calls: fx.Effects, messages: bool = True) -> fx.Effects:
    """`effects` with what the batch's approved calls must write whatever the agent did: their
    waits (those events are neither done nor failed), their outcomes, the operators' lines,
    and (`messages`) the prompt and the word to the requester of a call that now waits."""
    waiting = {w.event_id for w in calls.tool_waits}
    for errors in (effects.failed, effects.dead):
        for event_id in waiting & set(errors):
            del errors[event_id]
    effects.tool_waits += calls.tool_waits
    effects.tool_outcomes.update(calls.tool_outcomes)
    effects.ops += calls.ops
    if messages:
        effects.messages[:0] = calls.messages
    return effects


def _conversation_of(claim: Claim) -> Conversation | None:
    """Where a notice about the whole batch goes: the latest person's message or command,
    else the latest event that names a conversation (a timer's, an approval's)."""
    events = [typed(e) for e in reversed(claim.events)]
    for e in events:
        if isinstance(e, Message | Command):
            return e.reply_to
    return next((e.reply_to for e in events if e.reply_to is not None), None)


def runner_for(agent: AgentLike, store: Any) -> Runner:
    """A runner with the engine's defaults: approvals shown as plain text, the agent's own
    tools and failure text, no hooks (what the engine's tests and the scenarios run;
    `wakeful serve` builds one with the Slack edge's surfaces, bot/process/loading.py)."""
    from wakeful.core.query import Query

    agent_declared = Declared.of(agent)
    services = RunServices(
        ledger=store,
        query=Query(store),
        budget=store.approval_budget,
        timers=store.timer_budget,
        approval_ttl=store.settings.approval_ttl,
        view=PlainApprovals(),
        tools=agent_declared.tool_map,
        approval=store.approval,
        workspace_of=store.workspace_of,
        stream_segment=store.settings.stream_segment,
        memory_read=store.memory_read,
        memory_paths=store.memory_paths,
        memory_docs=store.memory_sizes,
        shared_memory_writes=agent_declared.shared_memory == "write",
        memory_limits=MemoryLimits(store.settings.memory_doc_bytes, store.settings.memory_docs),
        waiting_after=store.waiting_after if agent_declared.interrupts else None,
    )
    return Runner(
        agent,
        services,
        (),
        store.settings,
        failure_text=agent_declared.failure_text,
        kinds=store.kinds,
    )
