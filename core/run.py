"""One run of an agent: the batch it was woken for, and everything it may do about it.

A `Run` is what an agent's `run(run)` receives. Nothing it asks for happens during the run:
replies, approvals, timers and the saved state are collected here and written by the worker's
fenced finish, in one transaction, or not at all (a worker that lost its lease writes nothing).
The exceptions: a durable step (`step`), whose result is recorded as soon as it returns,
because the point of a step is that a retried run does not call it again; and a streamed reply
(`stream`), which shows while it is written and is taken back if the run does not finish
(core/streams.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from wakeful.core import effects as fx
from wakeful.core import metrics
from wakeful.core.effects import ApprovalRequest, Effects, Timer
from wakeful.core.errors import Interrupted, InvalidInput
from wakeful.core.events import (
    ApprovalAnswer,
    Command,
    Conversation,
    Event,
    Message,
    TimerTick,
    decode,
    timer_payload,
)
from wakeful.core.inbox_id import InboxId
from wakeful.core.memory import Memory, workspace_owner
from wakeful.core.rules import digest as digests
from wakeful.core.rules.approvals import ApprovalBudget
from wakeful.core.rules.timers import TimerBudget
from wakeful.core.services import RunServices
from wakeful.core.settings import DAY
from wakeful.core.steps import durable_step, step_key
from wakeful.core.stream_edge import StreamPlace
from wakeful.core.streams import RunStreams, Stream
from wakeful.core.usage import ModelUsage, OverBudget, SpendBudget

if TYPE_CHECKING:
    from wakeful.core.query import Query

T = TypeVar("T")


def _no_heartbeat() -> None:
    return None


class Run:
    """One claimed batch of one inbox, and what the agent asks for in answer to it."""

    def __init__(
        self,
        inbox: str,
        events: Sequence[Event],
        session: Any,
        now: int,
        services: RunServices,
        heartbeat: Callable[[], None] = _no_heartbeat,
    ) -> None:
        self.inbox = InboxId(inbox)
        """Whose inbox this is: a person's (`.team`, `.user`) or a conversation's."""
        self.events: tuple[Event, ...] = tuple(events)
        """The batch, oldest first: a person's quick messages arrive together."""
        self.now = now
        """The engine's clock (integer seconds) when the run started."""
        self._session = session
        self._services = services
        self._heartbeat = heartbeat
        self._effects = Effects()
        self._asked_for: dict[tuple[str, str], int] = {}
        self._budget: ApprovalBudget | None = None
        self._not_asked_in: Conversation | None = None
        self._untold = 0
        self._timers: TimerBudget | None = None
        self._said_in = next((e.reply_to for e in reversed(self.events) if e.reply_to), None)
        self._memory: Memory | None = None
        self._usage: list[ModelUsage] = []
        first = self.events[0] if self.events else None
        self._streams = RunStreams(
            services.streams,
            services.ledger,
            lambda name: step_key(self.inbox, self._only_cause(first, name), name),
            self.heartbeat,
            self.inbox,
            now,
            services.stream_segment,
            retried=first is not None and first.attempt > 1,
        )

    # -- reading -----------------------------------------------------------------------

    @property
    def session(self) -> Any:
        """The state this inbox's last finished run saved (`save`), or None."""
        return self._session

    @property
    def query(self) -> Query:
        """Read-only questions about the store: open approvals, timers, dead events, ..."""
        return self._services.query

    @property
    def memory(self) -> Memory:
        """What the agent remembers of this inbox (`read`, `list`, `write`, `edit`, `insert`,
        `delete`, `rename`), and `.shared`, the workspace's (read only unless the agent's
        `shared_memory = "write"`): its writes are seen by
        this run at once and written by its finish, once (core/memory.py)."""
        if self._memory is None:
            s = self._services
            self._memory = Memory(
                str(self.inbox),
                s.memory_read,
                s.memory_paths,
                s.memory_limits,
                shared_owner=workspace_owner(self.inbox.team),
                shared_writes=s.shared_memory_writes,
            )
        return self._memory

    def heartbeat(self) -> None:
        """Renew the inbox's lease between long steps; raises LeaseLost when another worker
        has taken over (nothing this run asked for will then be written)."""
        self._heartbeat()

    # -- asking ------------------------------------------------------------------------

    def reply(
        self,
        text: str,
        *,
        to: Event | Conversation,
        blocks: list[dict[str, Any]] | None = None,
        urgent: bool | None = None,
        private: bool = False,
        user: str | None = None,
    ) -> None:
        """Answer in a conversation: `to` is an event (its conversation and thread) or a
        `Conversation`. Replies to a person's message, command or approval are urgent (they
        skip the outbox's gap); others wait for it and merge into one post. A reply to a
        `Command`, or with `private=True`, is shown to that one person only (`user`, or the
        person of the event)."""
        where = _where(to)
        rush = (to.urgent if isinstance(to, Event) else False) if urgent is None else urgent
        priority: fx.Priority = "urgent" if rush else "normal"
        if isinstance(to, Command) and not private:
            message = fx.Post(
                where.channel,
                text,
                blocks=blocks,
                kind="ephemeral",
                ref=to.response_url or None,
                user=to.user,
                priority="urgent",
            )
        elif private:
            person = user or _person(to)
            if person is None:
                raise InvalidInput("a private reply needs the person it is for: user=...")
            message = fx.Post(
                where.channel,
                text,
                thread_ts=where.thread_ts,
                blocks=blocks,
                kind="ephemeral",
                user=person,
                priority="urgent",
            )
        else:
            message = fx.Post(
                where.channel, text, thread_ts=where.thread_ts, blocks=blocks, priority=priority
            )
        self._effects.messages.append(message)

    def stream(self, *, to: Event | Conversation) -> Stream:
        """A reply written as it is produced (`write` text, then `close(blocks)`; or `with`):
        to a person's `Message`, it shows in Slack as it comes (under that message, in its
        thread), ends as one message, and a crash never leaves half of it beside the retried
        answer (core/streams.py). To anything else (a timer, a conversation), or with no Slack
        edge, it is an ordinary reply posted when closed."""
        where = _where(to)
        place = None
        if isinstance(to, Message):
            thread = to.thread_ts or to.ts
            place = StreamPlace(to.channel, thread, to.team, to.user, str(self.inbox))
        return self._streams.open(where, place)

    @property
    def stopped_by_user(self) -> bool:
        """The person pressed stop on this run's streamed reply (in this attempt or an
        earlier one): make no more model calls, say nothing more."""
        return self._streams.stopped_by_user

    def interrupted(self) -> bool:
        """The person wrote again since this batch was claimed, and the agent answers the
        newest words (`on_new_message = "interrupt"`): the run should stop at its next step
        boundary (`checkpoint`). A retried batch (an attempt after a failure) is never
        interrupted: it is answered, and the newer message runs next."""
        ask = self._services.waiting_after
        if ask is None or not self.events or any(e.attempt > 1 for e in self.events):
            return False
        people = {p for e in self.events if isinstance(e, Message | Command) for p in e.people}
        if not people:
            return False
        after = max(e.id for e in self.events)
        for stored in ask(self.inbox, after):
            event = decode(stored.payload, source=stored.source, key=stored.source_id)
            if isinstance(event, Message | Command) and people & set(event.people):
                return True
        return False

    def checkpoint(self) -> None:
        """A step boundary: raise Interrupted when the person wrote again (see `interrupted`).
        `step` calls it before each step; an agent may call it between its own pieces of
        work. Never inside a tool call."""
        if self.interrupted():
            raise Interrupted(f"{self.inbox}: the person wrote again")

    def recorded(self, name: str, *, cause: Event | None = None) -> Any:
        """The result recorded by `step(name, ..., cause=cause)`, or None: looked up, never
        called."""
        origin = cause or self._only_event(name)
        found = self._services.ledger.recorded_step(step_key(self.inbox, origin, name))
        return None if found is None else found.result

    def digest(self, facts: digests.Facts, *, to: Event | Conversation) -> None:
        """A digest, as facts (core/rules/digest.py): digests the outbox holds back merge into
        one covering the whole span, counts added up. Sent for a timer's tick, it goes with
        its timer: while the gap still holds it, cancelling the timer withdraws it."""
        where = _where(to)
        text = digests.render(facts)
        timer = to.name if isinstance(to, TimerTick) else None
        self._effects.messages.append(
            fx.Post(
                where.channel,
                text,
                thread_ts=where.thread_ts,
                kind="digest",
                facts=facts,
                ref=timer,
            )
        )

    def ask(
        self,
        tool: str,
        args: Any,
        *,
        summary: str,
        to: Event | Conversation,
        requester: str | None = None,
        ttl: int | None = None,
        id: str | None = None,
    ) -> str | None:
        """Ask a person to approve a call of `tool` with `args`: wakeful posts `summary` with
        Approve / Deny buttons in `to`'s conversation, lets only the requester and the
        approvers answer, and rewrites the prompt with the answer that stands. On yes the tool
        runs as a durable step keyed by the request id; the agent then gets an
        `ApprovalAnswer` with its result (or `no` / `expired`, and the tool never runs).

        Returns the request id, or None when the caps say no (too many asked in this run or
        open in this inbox): the person is told once, in this run's finish, how many were not
        asked and why."""
        if tool not in self._services.tools:
            known = ", ".join(sorted(self._services.tools)) or "none"
            raise InvalidInput(f"no tool {tool!r} to ask about (the agent's tools: {known})")
        if not isinstance(summary, str) or not summary.strip():
            raise InvalidInput("an approval needs a one-line summary of what it does")
        where = _where(to)
        who = requester or _person(to)
        if not who:
            raise InvalidInput("an approval needs the person asking: requester=...")
        if self._budget is None:
            self._budget = self._services.budget(self.inbox)
        if not self._budget.take():
            self._not_asked_in = self._not_asked_in or where
            self._untold += 1
            return None
        cause = (
            to if isinstance(to, Event) and to.key else (self.events[0] if self.events else None)
        )
        request_id = id or self._request_id(tool, cause)
        request = ApprovalRequest(
            id=request_id,
            tool=tool,
            args=args,
            requester=who,
            deadline=self.now + (ttl or self._services.approval_ttl),
            approvers=self._services.approvers,
            summary=summary.strip(),
            channel=where.channel,
            thread_ts=where.thread_ts,
        )
        self._effects.approvals.append(
            _with_prompt(request, self._services.view.prompt(request, where))
        )
        return request_id

    def not_asked_note(self) -> str | None:
        """The line saying how many approvals the caps held back since this was last asked
        (None: none), for an agent that says it in its own reply; wakeful then does not."""
        if not self._untold or self._budget is None:
            return None
        note = self._budget.note(self._untold)
        self._untold = 0
        return note

    def step(
        self,
        name: str,
        fn: Callable[[str], T],
        *,
        cause: Event | None = None,
        replay: bool = False,
        boundary: bool = True,
    ) -> T:
        """Run `fn(key)` once per `(cause, name)` and record what it returns.

        The key is stable across retries (see `step_key`): pass it to the system you call as
        its idempotency key. A retried or resumed run gets the recorded result back without
        calling `fn` again. The step itself is at-least-once: a crash after `fn` acted and
        before its result was recorded calls it again with the same key, so the system it
        calls must honour the key. `cause` defaults to the run's only event.

        `replay=True` for a result that only a retry of this run needs (a model's answer, so a
        retried run does not pay for it again): it is pruned with the run log once older than
        WAKEFUL_RETENTION. A step that records a side effect (a refund) is kept for good.

        `boundary`: the step is a step boundary (`checkpoint` first), unless False."""
        origin = cause or self._only_event(name)
        if boundary:
            self.checkpoint()
        key = step_key(self.inbox, origin, name)
        return durable_step(self._services.ledger, key, fn, name, self.inbox, self.now, replay)

    def record_usage(self, usage: ModelUsage) -> None:
        """One model call's tokens and estimated cost (or `ModelUsage.replay(model)` for an
        answer a retried run got back from its step). Counted in the metrics at once (a run
        that never finishes was still billed) and written to the run log with the finish,
        added up per model (`wakeful inspect <inbox>` shows it)."""
        if not isinstance(usage, ModelUsage):
            raise InvalidInput("record_usage takes a ModelUsage")
        self._usage.append(usage)
        metrics.count_model(usage)

    @property
    def usage(self) -> tuple[ModelUsage, ...]:
        """The model calls this run has recorded so far."""
        return tuple(self._usage)

    def over_budget(self, budget: SpendBudget) -> OverBudget | None:
        """Before each model call: None to make it, else the budget the inbox's (or its
        workspace's) last 24 hours of calls, this run's included, spent: make none."""
        if budget == SpendBudget():
            return None
        spent = self.query.model_spend(self.inbox, self.now - DAY)
        if over := budget.spent(spent, sum(u.cost or 0.0 for u in self._usage)):
            metrics.MODEL_BUDGET_REFUSALS.labels(over.scope).inc()
        return over

    def set_timer(self, timer: Timer, *, to: Event | Conversation | None = None) -> bool:
        """Add or replace the inbox's timer of that name; its ticks answer in `to`. False: past
        WAKEFUL_MAX_TIMERS_PER_INBOX, not set (the finish tells the person, docs/agents.md)."""
        where = None if to is None else _where(to)
        if where is not None:
            timer = Timer(**{**_fields(timer), "payload": timer_payload(timer.payload, where)})
        self._timers = self._timers or self._services.timers(self.inbox)
        if not self._timers.take(timer.name, where or self._said_in):
            return False
        self._effects.timers.append(timer)
        return True

    def not_set_note(self) -> str | None:
        """The line about timers the cap held back since last asked, to say it yourself."""
        return None if self._timers is None else self._timers.told()

    def cancel_timer(self, name: str) -> None:
        if self._timers is not None:  # its place under the cap is free
            self._timers.drop(name)
        self._effects.cancel_timers.append(name)

    def save(self, state: Any) -> None:
        """Keep `state` (JSON) for this inbox's next run; written with the finish."""
        self._effects.set_session(state)
        self._session = state

    # -- the engine's side -------------------------------------------------------------

    def effects(self) -> Effects:
        """Everything asked for, with one note each about approvals and timers the caps held."""
        for note, where in (
            (self.not_asked_note(), self._not_asked_in),
            (self.not_set_note(), self._timers.where if self._timers else None),
        ):
            if note is not None and where is not None:
                self._effects.messages.append(
                    fx.Post(where.channel, note, thread_ts=where.thread_ts, priority="urgent")
                )
        self._effects.messages += self._streams.posts()
        if self._memory is not None:
            self._effects.memory = self._memory.pending()
        self._effects.usage = list(self._usage)
        return self._effects

    def settle_streams(self) -> None:
        """Take back what earlier attempts of this batch streamed and never finished, whatever
        its attempt count says (the worker's, for events made dead without a run)."""
        self._streams.retried = True
        self._streams.settle()

    def abandon_streams(self) -> None:
        """The run ends without its finish: take back what it streamed (core/streams.py)."""
        self._streams.abandon()

    def _request_id(self, tool: str, cause: Event | None) -> str:
        """A readable request id, the same in a retried run (numbered per causing event) and
        unique across inboxes and store copies (a short hash of the event's source key)."""
        if cause is None:
            raise InvalidInput("an approval outside any event needs an id=")
        n = self._asked_for.get((cause.source, cause.key), 0)
        self._asked_for[(cause.source, cause.key)] = n + 1
        origin = step_key(self.inbox, cause, f"ask:{tool}:{n}")[3:11]
        return f"{tool.replace('_', '-')}-{cause.id}-{n}-{origin}"

    @staticmethod
    def _only_cause(first: Event | None, name: str) -> Event:
        if first is None:
            raise InvalidInput(f"step {name!r}: a run with no event cannot stream")
        return first

    def _only_event(self, name: str) -> Event:
        if len(self.events) != 1:
            raise InvalidInput(
                f"step {name!r}: this run has {len(self.events)} events; say which one caused "
                "the step: run.step(name, fn, cause=event)"
            )
        return self.events[0]


def _where(to: Event | Conversation) -> Conversation:
    if isinstance(to, Conversation):
        return to
    where = to.reply_to
    if where is None:
        raise InvalidInput(
            f"a {type(to).__name__} names no conversation to answer in: pass to=Conversation(...)"
        )
    return where


def _person(to: Event | Conversation) -> str | None:
    if isinstance(to, (Message, Command)):
        return to.user
    if isinstance(to, ApprovalAnswer):
        return to.requester
    return None


def _with_prompt(request: ApprovalRequest, prompt: fx.Post) -> ApprovalRequest:
    return ApprovalRequest(**{**_fields(request), "prompt": prompt})


def _fields(value: Any) -> dict[str, Any]:
    return {name: getattr(value, name) for name in value.__slots__}
