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
from dataclasses import dataclass, field, replace

from wakeful.core import effects as fx
from wakeful.core.errors import LeaseLost, StoreUnavailable
from wakeful.core.events import ApprovalAnswer, Event
from wakeful.core.run import RunServices
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
    tool = services.tools.get(event.tool)
    if tool is None:
        into.events.append(
            replace(event, error=f"the agent has no tool {event.tool!r}; nothing ran")
        )
        return
    ledger = services.ledger
    recorded = ledger.recorded_step(event.request_id)
    state = services.approval(event.request_id)
    if recorded is not None:
        if recorded.error is None:
            into.effects.tool_outcomes[event.request_id] = ("done", None)
            into.events.append(replace(event, result=recorded.result))
        else:
            waited = state is not None and state.tool_state in ("waiting", "given_up")
            outcome = "given_up" if waited and "gave up" in recorded.error else "failed"
            into.effects.tool_outcomes[event.request_id] = (outcome, recorded.error)
            into.events.append(replace(event, error=recorded.error))
        return
    heartbeat()  # LeaseLost, raised: another worker has the inbox; nothing is called
    try:
        value = tool.fn(event.args, event.request_id)
    except (LeaseLost, StoreUnavailable):
        raise
    except Exception as exc:
        verdict = classify(exc)
        log.warning(
            "%s: approved %s (request %s) failed (%s): %s",
            inbox,
            event.tool,
            event.request_id,
            "transient" if verdict.transient else "permanent",
            f"{type(exc).__name__}: {exc}",
        )
        first = (
            now
            if state is None or state.tool_first_failed_at is None
            else state.tool_first_failed_at
        )
        tries = (0 if state is None else state.tool_tries) + 1
        told = 0 if state is None else state.tool_told
        if verdict.transient:
            step = settings.backoff(tries)
            if now < first + settings.tool_retry_for - step:
                _wait(
                    event, verdict, first, tries, told, step, settings, inbox, now, into, services
                )
                return
            error = f"{verdict.reason}; wakeful gave up after {span(settings.tool_retry_for)}"
            outcome = "given_up"
        else:
            error, outcome = verdict.reason, "failed"
        _stand(services, inbox, event, error, outcome, now, into, tell_ops(exc, outcome))
        return
    fx.check_json(value, f"the result of tool {event.tool!r}")
    result = ledger.record_step(event.request_id, inbox, event.tool, event.args, value, now)
    into.effects.tool_outcomes[event.request_id] = ("done", None)
    into.events.append(replace(event, result=result))


def tell_ops(exc: BaseException, outcome: str) -> bool:
    """Whether a call's end is the operators' business: a call given up, or a failure the
    tool marks as theirs (a revoked destination, a credential refused)."""
    return outcome == "given_up" or (isinstance(exc, ToolFailed) and exc.tell_ops)


def _stand(
    services: RunServices,
    inbox: str,
    event: ApprovalAnswer,
    error: str,
    outcome: str,
    now: int,
    into: Approved,
    ops: bool,
) -> None:
    """Record the failure as the call's outcome (nothing calls it again) and answer with it;
    should a racing run have recorded a result first, that result stands."""
    ledger = services.ledger
    ledger.record_step(event.request_id, inbox, event.tool, event.args, None, now, error=error)
    stood = ledger.recorded_step(event.request_id)
    if stood is not None and stood.error is None:
        into.effects.tool_outcomes[event.request_id] = ("done", None)
        into.events.append(replace(event, result=stood.result))
        return
    into.effects.tool_outcomes[event.request_id] = (outcome, error)
    if ops:
        into.effects.ops.append(
            f"approved {event.tool} ({event.summary or event.tool}, request "
            f"{event.request_id}) {'given up' if outcome == 'given_up' else 'failed'}: {error}"
        )
    into.events.append(replace(event, error=error))


def _wait(
    event: ApprovalAnswer,
    verdict: Verdict,
    first: int,
    tries: int,
    told: int,
    step: int,
    settings: Settings,
    inbox: str,
    now: int,
    into: Approved,
    services: RunServices,
) -> None:
    """Hold the call until its next try; tell the requester once, the operators once past a
    minute."""
    ends = first + settings.tool_retry_for
    delay = step if verdict.retry_after is None else math.ceil(verdict.retry_after)
    retry_at = max(now + 1, min(now + delay, ends))
    effects = into.effects
    if not told & TOLD_REQUESTER:
        told |= TOLD_REQUESTER
        waiting = services.view.outcome(event, f"not done yet: {verdict.reason}")
        if waiting is not None:
            effects.messages.append(waiting)
        where = event.reply_to
        if where is not None:
            text = (
                f"Approved, but not done yet: {event.summary or event.tool}. "
                f"{_sentence(verdict.reason)}; wakeful keeps trying under the same key until "
                f"{until(ends, now)} and will tell you here."
            )
            if event.requester and not where.channel.startswith("D"):
                text = f"<@{event.requester}> {text}"
            effects.messages.append(
                fx.Message(where.channel, text, thread_ts=where.thread_ts, priority="urgent")
            )
    if not told & TOLD_OPS and now - first >= OPS_AFTER:
        told |= TOLD_OPS
        effects.ops.append(
            f"approved {event.tool} ({event.summary or event.tool}, request "
            f"{event.request_id}) has waited {span(now - first)}: {verdict.reason}; retried "
            f"until {until(ends, now)}"
        )
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
        said = any(
            m.channel == where.channel and m.kind not in SKIPPED_KINDS for m in effects.messages
        )
        if said:
            continue
        text = (
            f"Approved, but not done: {answer.summary or answer.tool}. {_sentence(answer.error)}."
        )
        if answer.requester and not where.channel.startswith("D"):
            text = f"<@{answer.requester}> {text}"
        effects.messages.append(
            fx.Message(where.channel, text, thread_ts=where.thread_ts, priority="urgent")
        )


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
