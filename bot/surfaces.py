"""The Slack surfaces around an agent's runs: how an approval is shown (Block Kit with Approve /
Deny buttons) and rewritten once answered, the assistant thread's greeting and suggested
prompts, its "is thinking…" status, and the Home tab (bot/home.py).

The engine asks for none of these by name: it shows approvals through the `ApprovalView` it is
given and runs the hooks it is given around each run. Everything here goes through the run's
effects, so the fenced finish writes it with the rest and the dispatcher sends it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import wakeful.bot.kinds  # noqa: F401 (registers Slack's outbox kinds)
from wakeful.bot import blocks
from wakeful.bot.config import Config
from wakeful.bot.events import AssistantThreadStarted
from wakeful.bot.home import HomeHook, legacy_summary
from wakeful.bot.slack_text import inert
from wakeful.core.effects import ApprovalRequest, Effects, Message
from wakeful.core.events import ApprovalAnswer, Conversation
from wakeful.core.events import Message as Said
from wakeful.core.run import Run
from wakeful.core.runner import RunHook
from wakeful.core.store import Store

THINKING = "is thinking…"
GREETING = "Hi! Ask me anything here; I answer in this thread."
PROMPTS_TITLE = "Try one of these"
MAX_PROMPTS = 4


class SlackApprovals:
    """Approvals as Block Kit: the question with Approve / Deny buttons (their `value` is the
    request id, the contract the click handler reads), rewritten with the answer that
    stands."""

    def prompt(self, request: ApprovalRequest, to: Conversation) -> Message:
        summary = inert(request.summary)
        return Message(
            to.channel,
            f"Approval needed: {summary} for <@{request.requester}>",
            thread_ts=to.thread_ts,
            blocks=blocks.approval_prompt(request.id, summary, request.requester, request.deadline),
            priority="urgent",
        )

    def outcome(self, answer: ApprovalAnswer) -> Message | None:
        if not answer.channel:
            return None
        summary = inert(answer.summary or legacy_summary(answer.tool, answer.args))
        line = blocks.outcome_line(answer.answer, answer.by, answer.answered_at)
        return Message(
            answer.channel,
            f"{summary}: {line}",
            thread_ts=answer.thread_ts,
            kind="update",
            ref=answer.request_id,
            blocks=blocks.approval_outcome(summary, answer.answer, answer.by, answer.answered_at),
        )


@dataclass
class GreetingHook:
    """A new assistant thread is greeted once, with the agent's greeting and suggested prompts
    (the thread's key refuses a retried event's second greeting)."""

    agent: Any

    def before(self, run: Run) -> None:
        return None

    def after(self, run: Run, effects: Effects) -> None:
        greeting = str(getattr(self.agent, "greeting", "") or GREETING)
        prompts = [
            {"title": str(title), "message": str(message)}
            for title, message in list(getattr(self.agent, "suggested_prompts", ()) or ())[
                :MAX_PROMPTS
            ]
        ]
        for e in run.events:
            if not isinstance(e, AssistantThreadStarted):
                continue
            effects.messages.append(
                Message(e.channel, greeting, thread_ts=e.thread_ts, priority="urgent")
            )
            if prompts:
                effects.messages.append(
                    Message(
                        e.channel,
                        PROMPTS_TITLE,
                        thread_ts=e.thread_ts,
                        kind="prompts",
                        blocks=prompts,
                    )
                )


def assistant_threads(run: Run) -> list[tuple[str, str]]:
    """(channel, thread) of each DM thread this run answers: where a status can show."""
    found: list[tuple[str, str]] = []
    for e in run.events:
        if not isinstance(e, Said) or e.channel_type != "im" or e.mention or not e.thread_ts:
            continue
        if (e.channel, e.thread_ts) not in found:
            found.append((e.channel, e.thread_ts))
    return found


@dataclass
class StatusHook:
    """Shows "is thinking…" in the assistant thread while its run is in flight (queued at
    once, urgent, so it skips the gap), cleared behind the run's reply. A workspace or app
    without the feature answers the call with an error the sender logs once."""

    store: Store

    def before(self, run: Run) -> None:
        rows = [
            Message(channel, THINKING, thread_ts=thread, kind="status", priority="urgent")
            for channel, thread in assistant_threads(run)
        ]
        if rows:
            self.store.post(run.inbox, rows, run.now)

    def after(self, run: Run, effects: Effects) -> None:
        for channel, thread in assistant_threads(run):
            effects.messages.append(
                Message(channel, "", thread_ts=thread, kind="status", priority="urgent")
            )


def surface_hooks(store: Store, config: Config, agent: Any) -> list[RunHook]:
    """The hooks every agent's runs get: the Home tab, the greeting, and (with
    WAKEFUL_ASSISTANT) the assistant thread's status."""
    hooks: list[RunHook] = [HomeHook(store, agent, config.approvers), GreetingHook(agent)]
    if config.assistant:
        hooks.append(StatusHook(store))
    return hooks


__all__: Sequence[str] = (
    "GreetingHook",
    "SlackApprovals",
    "StatusHook",
    "legacy_summary",
    "surface_hooks",
)
