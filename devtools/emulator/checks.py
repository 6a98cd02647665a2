"""What Slack refuses, checked by the emulator before a method runs, so the tests meet Slack's
own limits rather than a more forgiving stand-in.

Each check returns Slack's error code, or None when Slack would take the call:
`msg_too_long` (text over 40,000 characters), `invalid_blocks` (over 50 blocks, a section
text over 3,000, a `markdown` block's text over 12,000, or a `context_actions` block whose
feedback buttons are not Slack's shape),
`missing_scope` (a method the granted scopes do not cover, per bot/slack/scopes.py).
Membership (`not_in_channel`, `user_not_in_channel`) and authorship (`cant_update_message`) need
the emulator's state and are checked where it is kept.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any

TEXT_LIMIT = 40_000
BLOCK_LIMIT = 50
SECTION_TEXT_LIMIT = 3_000
MARKDOWN_BLOCK_LIMIT = 12_000
POSTING = ("chat.postMessage", "chat.update", "chat.postEphemeral")


def missing_scope(method: str, granted: Collection[str]) -> dict[str, Any] | None:
    """Slack's answer for a method none of whose scopes the token has, else None."""
    from wakeful.bot.slack.scopes import METHOD_SCOPES

    needed = METHOD_SCOPES.get(method) or ()
    if not needed or set(needed) & set(granted):
        return None
    return {
        "ok": False,
        "error": "missing_scope",
        "needed": ",".join(needed),
        "provided": ",".join(granted),
    }


def content_error(method: str, params: Mapping[str, Any]) -> str | None:
    """`msg_too_long` / `invalid_blocks` for a posting method's text and blocks."""
    if method not in POSTING:
        return None
    text = params.get("text")
    if isinstance(text, str) and len(text) > TEXT_LIMIT:
        return "msg_too_long"
    return blocks_error(params.get("blocks"))


def blocks_error(raw: Any) -> str | None:
    """`invalid_blocks` for too many blocks or a section's text over Slack's limit."""
    if raw is None or raw == "":
        return None
    try:
        blocks = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return "invalid_blocks"
    if not isinstance(blocks, list) or len(blocks) > BLOCK_LIMIT:
        return "invalid_blocks"
    for block in blocks:
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            return "invalid_blocks"
        text = block.get("text")
        long = isinstance(text, dict) and len(str(text.get("text", ""))) > SECTION_TEXT_LIMIT
        if block["type"] == "section" and long:
            return "invalid_blocks"
        if block["type"] == "markdown" and not _markdown_ok(block):
            return "invalid_blocks"
        if block["type"] == "context_actions" and not _context_actions_ok(block):
            return "invalid_blocks"
    return None


def _markdown_ok(block: Mapping[str, Any]) -> bool:
    """A `markdown` block: its `text` a string of at most 12,000 characters."""
    text = block.get("text")
    return isinstance(text, str) and len(text) <= MARKDOWN_BLOCK_LIMIT


CONTEXT_ACTIONS_LIMIT = 5
LABEL_LIMIT = 75


def _context_actions_ok(block: Mapping[str, Any]) -> bool:
    """A `context_actions` block as the Block Kit reference describes it: 1 to 5 elements,
    feedback buttons (a positive and a negative button, each with plain text and a value) or
    icon buttons."""
    elements = block.get("elements")
    if not isinstance(elements, list) or not 1 <= len(elements) <= CONTEXT_ACTIONS_LIMIT:
        return False
    for element in elements:
        kind = element.get("type") if isinstance(element, dict) else None
        if kind == "icon_button":
            continue
        if kind != "feedback_buttons":
            return False
        for side in ("positive_button", "negative_button"):
            button = element.get(side)
            if not isinstance(button, dict) or not isinstance(button.get("value"), str):
                return False
            label = button.get("text")
            if not isinstance(label, dict) or label.get("type") != "plain_text":
                return False
            if len(str(button.get("accessibility_label", ""))) > LABEL_LIMIT:
                return False
    return True
