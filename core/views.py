"""How what a run asks for is shown where there is no Slack edge to render it (tests, the
Harness): the approval and privacy views' contracts, and their plain-text defaults."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from wakeful.core import effects as fx
from wakeful.core.effects import ApprovalRequest
from wakeful.core.events import ApprovalAnswer, Conversation
from wakeful.core.privacy_text import CANCELLED, FORGET_QUESTION, Kept, plain_listing


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


class PrivacyView(Protocol):
    """How `/wakeful memory` and `/wakeful forget` answer (core/privacy.py): the Slack edge
    renders the forget prompt with its Forget and Cancel buttons (bot/slack/privacy.py); the
    engine's default is plain text."""

    def listing(self, kept: Sequence[Kept]) -> tuple[str, list[dict[str, Any]] | None]:
        """What is kept about the person: each document's path and first lines."""
        ...

    def forget_prompt(self, user: str) -> tuple[str, list[dict[str, Any]] | None]:
        """The question before anything is erased (its Forget button names `user`)."""
        ...

    def cancelled(self) -> str:
        """The prompt, once Cancel was pressed: nothing was erased."""
        ...


class PlainPrivacy:
    """The privacy answers as text (for runs with no Slack edge: tests, the harness)."""

    def listing(self, kept: Sequence[Kept]) -> tuple[str, list[dict[str, Any]] | None]:
        return plain_listing(kept), None

    def forget_prompt(self, user: str) -> tuple[str, list[dict[str, Any]] | None]:
        return FORGET_QUESTION, None

    def cancelled(self) -> str:
        return CANCELLED
