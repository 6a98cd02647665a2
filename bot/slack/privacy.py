"""`/wakeful memory` and `/wakeful forget` as Slack shows them (core/privacy.py asks): the
listing as mrkdwn, every piece of stored text made inert (a document is the person's or the
model's words: it must never ping or link), and the forget prompt as Block Kit with its Forget
and Cancel buttons. The buttons' `action_id`s and their `value` (the user id the prompt was
asked for) are the contract the click listener reads (bot/front/listeners.py): only that
person's click is an answer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from wakeful.bot.slack.text import inert
from wakeful.core.privacy_text import CANCELLED, FORGET_QUESTION, Kept, plain_listing

FORGET = "memory_forget"
"""The Forget button: erases what is kept about the person whose id is its value."""
FORGET_CANCEL = "memory_forget_cancel"
"""The Cancel button: nothing is erased, the prompt says so."""


class SlackPrivacy:
    """The privacy answers as Slack renders them (core/views.py `PrivacyView`)."""

    def listing(self, kept: Sequence[Kept]) -> tuple[str, list[dict[str, Any]] | None]:
        """Each document's path and size, its first lines quoted under it; plain mrkdwn (no
        blocks), so a long listing is cut as any text is, never refused as a block."""
        if not kept:
            return plain_listing(kept), None
        noun = "document" if len(kept) == 1 else "documents"
        lines = [f"*What I remember about you* ({len(kept)} {noun}):"]
        for doc in kept:
            lines.append(f"• *{inert(doc.path)}* ({doc.bytes} bytes)")
            lines.extend(f">{inert(line)}" for line in doc.first_lines.splitlines())
        lines.append("To erase it all, `/wakeful forget`.")
        return "\n".join(lines), None

    def forget_prompt(self, user: str) -> tuple[str, list[dict[str, Any]] | None]:
        """The question with Forget (danger) and Cancel; both carry `user`, so a click by
        anyone else is no answer. The text is the fallback notifications show."""
        buttons = [
            _button(FORGET, "Forget", user, style="danger"),
            _button(FORGET_CANCEL, "Cancel", user),
        ]
        return FORGET_QUESTION, [
            {"type": "section", "text": {"type": "mrkdwn", "text": FORGET_QUESTION}},
            {"type": "actions", "block_id": "memory_forget", "elements": buttons},
        ]

    def cancelled(self) -> str:
        return CANCELLED


def _button(action_id: str, label: str, value: str, style: str | None = None) -> dict[str, Any]:
    button: dict[str, Any] = {
        "type": "button",
        "action_id": action_id,
        "text": {"type": "plain_text", "text": label},
        "value": value,
    }
    if style is not None:
        button["style"] = style
    return button
