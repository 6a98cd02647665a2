"""An approved call, from its yes to the answer the agent gets.

On `yes` the tool runs as a durable step keyed by the request id. What it returns is recorded
and the agent gets it as `ApprovalAnswer.result`. When it raises, `tool_failures.classify`
says how to read it:

- transient (its service down, busy, not answering): the call waits. Its event goes back to
  pending until the next try (backoff from WAKEFUL_BACKOFF_BASE doubling to
  WAKEFUL_BACKOFF_CAP, or the `retry_after` the destination asked for), the attempt its claim
  counted given back, and the agent does not see it yet. The first wait rewrites the prompt
  ("Approved by …; not done yet: <why>.") and tells the requester once where the prompt is.
  A wait past a minute is told to the operators once.
- given up (still transient WAKEFUL_TOOL_RETRY_FOR after the first failure, less one backoff
  step) or permanent: the error is recorded as the step's outcome, so nothing calls the tool
  again, and the agent gets `ApprovalAnswer(error=<why>)` at once; the prompt says "not done".

Whatever a run of such an answer posts, the requester hears of it: when the agent says nothing
in the prompt's conversation, wakeful says it (`told_or_tell`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace

from wakeful.core import effects as fx
from wakeful.core import tracing
from wakeful.core.errors import LeaseLost, StoreUnavailable
from wakeful.core.events import ApprovalAnswer, Event
from wakeful.core.records import ApprovalState
from wakeful.core.services import RunServices
from wakeful.core.settings import Settings
from wakeful.core.tool_failures import ToolFailed, Verdict, classify

log = logging.getLogger("wakeful")

TOLD_REQUESTER, TOLD_OPS = 1, 2
"""Bits of an approval's `tool_told`: who has heard of its wait."""
OPS_AFTER = 60
"""Seconds an approved call may wait on its destination before the operators are told."""
SKIPPED_KINDS = frozenset({"update", "status", "home", "prompts"})
"""Rows that do not count as telling the requester (a prompt rewritten, a status, a tab)."""


@dataclass
class Approved:
    """What running a batch's approved calls came to: the answers the agent gets (a waiting
    call's event is not among them) and what the finish must write for the calls."""

    events: list[Event] = field(default_factory=list)
    effects: fx.Effects = field(default_factory=fx.Effects)


def run_approved(
    services: RunServices,
    settings: Settings,
    inbox: str,
    event: Event,
    now: int,
    into: Approved,
    heartbeat: Callable[[], None] = lambda: None,
) -> None:
    """Run `event`'s approved call if it is a yes (once: a recorded outcome is read back) and
    add the answer, or the call's wait, to `into`. The lease is renewed just before the call
    (`heartbeat`), so the call has the whole WAKEFUL_LEASE_TTL however long the batch took."""
    if not isinstance(event, ApprovalAnswer) or event.answer != "yes":
        into.events.append(event)
        return
    with _span(inbox, event):
        _Call(services, settings, inbox, event, now, into).run(heartbeat)


def _span(inbox: str, event: ApprovalAnswer) -> AbstractContextManager[None]:
    """The approved call's `execute_tool <tool>` span (OpenTelemetry's GenAI conventions),
    keyed by the request id; what it came to is noted as `wakeful.outcome`."""
    if not tracing.ON:
        return tracing.NOOP
    attrs = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": event.tool,
        "gen_ai.conversation.id": inbox,
        "wakeful.idempotency_key": event.request_id,
        "wakeful.approval.id": event.request_id,
    }
    return tracing.span(f"execute_tool {event.tool}", attrs)


@dataclass
class _Call:
    """One approved call's run: its outcome, or its wait, added to `into`."""

    services: RunServices
    settings: Settings
    inbox: str
    event: ApprovalAnswer
    now: int
    into: Approved
    replayed: bool = False
    """The call's outcome was recorded before: read back (tracing's `replayed`)."""

    def run(self, heartbeat: Callable[[], None]) -> None:
        event, ledger = self.event, self.services.ledger
        tool = self.services.tools.get(event.tool)
        if tool is None:
            tracing.note({"wakeful.outcome": "failed"})
            self._answer(error=f"the agent has no tool {event.tool!r}; nothing ran")
            return
        recorded = ledger.recorded_step(event.request_id)
        state = self.services.approval(event.request_id)
        if recorded is not None:
            self.replayed = True  # a retry reads the outcome back: nothing is called
            if recorded.error is None:
                self._answer("done", result=recorded.result)
            else:
                waited = state is not None and state.tool_state in ("waiting", "given_up")
                gave_up = waited and "gave up" in recorded.error
                self._answer("given_up" if gave_up else "failed", error=recorded.error)
            return
        heartbeat()  # LeaseLost, raised: another worker has the inbox; nothing is called
        try:
            value = tool.fn(event.args, event.request_id)
        except (LeaseLost, StoreUnavailable):
            raise
        except Exception as exc:
            self._failed(exc, state)
            return
        fx.check_json(value, f"the result of tool {event.tool!r}")
        result = ledger.record_step(
            event.request_id, self.inbox, event.tool, event.args, value, self.now
        )
        self._answer("done", result=result)

    def _failed(self, exc: Exception, state: ApprovalState | None) -> None:
        """A call that raised: a wait while it is transient and time is left, else its end."""
        verdict = classify(exc)
        event, settings = self.event, self.settings
        log.warning(
            "%s: approved %s (request %s) failed (%s): %s",
            self.inbox,
            event.tool,
            event.request_id,
            "transient" if verdict.transient else "permanent",
            f"{type(exc).__name__}: {exc}",
        )
        first = self.now
        if state is not None and state.tool_first_failed_at is not None:
            first = state.tool_first_failed_at
        tries = (0 if state is None else state.tool_tries) + 1
        if verdict.transient:
            step = settings.backoff(tries)
            if self.now < first + settings.tool_retry_for - step:
                told = 0 if state is None else state.tool_told
                self._wait(verdict, first, tries, told, step)
                return
            error = f"{verdict.reason}; wakeful gave up after {span(settings.tool_retry_for)}"
            self._stand(error, "given_up", ops=True)
        else:
            ops = isinstance(exc, ToolFailed) and exc.tell_ops
            self._stand(verdict.reason, "failed", ops=ops)

    def _stand(self, error: str, outcome: str, ops: bool) -> None:
        """Record the failure as the call's outcome (nothing calls it again) and answer with
        it; should a racing run have recorded a result first, that result stands. `ops`: the
        operators' business too (a call given up, a revoked destination, a refused
        credential)."""
        event, ledger = self.event, self.services.ledger
        key, inbox = event.request_id, self.inbox
        ledger.record_step(key, inbox, event.tool, event.args, None, self.now, error=error)
        stood = ledger.recorded_step(key)
        if stood is not None and stood.error is None:
            self._answer("done", result=stood.result)
            return
        if ops:
            ended = "given up" if outcome == "given_up" else "failed"
            self.into.effects.ops.append(f"{_named(event)} {ended}: {error}")
        self._answer(outcome, error=error)

    def _answer(self, outcome: str | None = None, **changes: object) -> None:
        """The answer the agent gets (`result` or `error` set), the call's `outcome` recorded
        with the finish."""
        if outcome is not None:
            said = "replayed" if self.replayed else "done" if outcome == "done" else "failed"
            tracing.note({"wakeful.outcome": said, "wakeful.tool.outcome": outcome})
            error = changes.get("error")
            self.into.effects.tool_outcomes[self.event.request_id] = (
                outcome,
                None if error is None else str(error),
            )
        self.into.events.append(replace(self.event, **changes))  # type: ignore[arg-type]

    def _wait(self, verdict: Verdict, first: int, tries: int, told: int, step: int) -> None:
        """Hold the call until its next try; tell the requester once, the operators once past
        a minute."""
        event, now, effects = self.event, self.now, self.into.effects
        ends = first + self.settings.tool_retry_for
        delay = step if verdict.retry_after is None else math.ceil(verdict.retry_after)
        retry_at = max(now + 1, min(now + delay, ends))
        if not told & TOLD_REQUESTER:
            told |= TOLD_REQUESTER
            waiting = self.services.view.outcome(event, f"not done yet: {verdict.reason}")
            if waiting is not None:
                effects.messages.append(waiting)
            said = _to_requester(
                event,
                f"Approved, but not done yet: {event.summary or event.tool}. "
                f"{_sentence(verdict.reason)}; wakeful keeps trying under the same key until "
                f"{until(ends, now)} and will tell you here.",
            )
            effects.messages += [said] if said is not None else []
        if not told & TOLD_OPS and now - first >= OPS_AFTER:
            told |= TOLD_OPS
            effects.ops.append(
                f"{_named(event)} has waited {span(now - first)}: {verdict.reason}; retried "
                f"until {until(ends, now)}"
            )
        tracing.note({"wakeful.outcome": "waiting", "wakeful.tool.retry_at": retry_at})
        effects.tool_waits.append(
            fx.ToolWait(event.id, event.request_id, verdict.reason, first, tries, retry_at, told)
        )


def told_or_tell(answers: list[ApprovalAnswer], effects: fx.Effects) -> None:
    """No approved call ends without a word to its requester: for each answer that came with
    an error, unless the run posts in the prompt's conversation, wakeful says it."""
    for answer in answers:
        where = answer.reply_to
        if answer.answer != "yes" or answer.error is None or where is None:
            continue
        if any(
            m.channel == where.channel and m.kind not in SKIPPED_KINDS for m in effects.messages
        ):
            continue
        what = answer.summary or answer.tool
        said = _to_requester(answer, f"Approved, but not done: {what}. {_sentence(answer.error)}.")
        effects.messages += [said] if said is not None else []


def _to_requester(answer: ApprovalAnswer, text: str) -> fx.Post | None:
    """A word to the requester where the prompt is (named, outside a DM)."""
    where = answer.reply_to
    if where is None:
        return None
    if answer.requester and not where.channel.startswith("D"):
        text = f"<@{answer.requester}> {text}"
    return fx.Post(where.channel, text, thread_ts=where.thread_ts, priority="urgent")


def _named(event: ApprovalAnswer) -> str:
    """An approved call as an operator's line names it."""
    return f"approved {event.tool} ({event.summary or event.tool}, request {event.request_id})"


def span(seconds: int) -> str:
    """A span as a person says it: `24 h`, `90 min`, `15 s`."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds // 60} min"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds} s"


def until(at: int, now: int) -> str:
    """A time later today as `09:40 UTC`, on another day with its date."""
    day = time.strftime("%Y-%m-%d", time.gmtime(now))
    shown = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(at))
    return shown[len(day) + 1 :] if shown.startswith(day) else shown


def _sentence(text: str) -> str:
    text = text.rstrip(". ")
    return text[:1].upper() + text[1:]
