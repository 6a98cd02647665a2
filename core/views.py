"""How what a run asks for is shown where there is no Slack edge to render it (tests, the
Harness): the approval view's contract, and its plain-text default."""

from __future__ import annotations

from typing import Protocol

from wakeful.core import effects as fx
from wakeful.core.effects import ApprovalRequest
from wakeful.core.events import ApprovalAnswer, Conversation


class ApprovalView(Protocol):
    """How an approval is shown and rewritten once answered: the Slack edge renders Block Kit
    with Approve / Deny buttons (bot/slack/surfaces.py); the engine's default is plain text."""

    def prompt(self, request: ApprovalRequest, to: Conversation) -> fx.Post: ...

    def outcome(self, answer: ApprovalAnswer, note: str | None = None) -> fx.Post | None:
        """The prompt rewritten with the answer; `note` (or the answer's error, as `not done:
        <error>`) says what became of an approved call (`not done yet: <why>`)."""
        ...


class PlainApprovals:
    """An approval shown as a line of text (for runs with no Slack edge: tests, the harness)."""

    def prompt(self, request: ApprovalRequest, to: Conversation) -> fx.Post:
        text = f"Approval needed: {request.summary} (request {request.id})"
        return fx.Post(to.channel, text, thread_ts=to.thread_ts, priority="urgent")

    def outcome(self, answer: ApprovalAnswer, note: str | None = None) -> fx.Post | None:
        return None
