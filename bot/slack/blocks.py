"""Block Kit for approval prompts and their outcomes. The buttons' `action_id`s (`approve`,
`deny`) and their `value` (the approval request id) are the contract the click handler reads."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

APPROVE = "approve"
DENY = "deny"
NOT_YOURS = "not yours to answer"

Block = dict[str, Any]


def when(ts: int) -> str:
    """A Slack date token: each reader sees their own time zone; the fallback is UTC."""
    fallback = datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{ts}^{{date_short_pretty}} at {{time}}|{fallback}>"


def utc(ts: int) -> str:
    """`2026-12-01 09:00 UTC`: a time every reader reads alike (logs, texts the model sees)."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _section(text: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}


def who_answers(requester: str, self_approval: bool = True) -> str:
    """Who may answer an approval, as the prompt and the note to anyone else say it."""
    if self_approval:
        return f"<@{requester}> or a configured approver"
    return f"a configured approver other than <@{requester}>"


def approval_prompt(
    request_id: str, summary: str, requester: str, deadline: int, self_approval: bool = True
) -> list[Block]:
    """The question with Approve / Deny buttons; both carry the request id. With
    `self_approval` off (WAKEFUL_SELF_APPROVAL=off) it says a second person must answer."""
    asked = f"*Approval needed:* {summary}\nRequested by <@{requester}>."
    if not self_approval:
        asked += f" Needs a second person: only {who_answers(requester, False)} can answer."
    return [
        _section(asked),
        {
            "type": "context",
            "elements": [
                {"type": "mrkdwn", "text": f"Expires {when(deadline)} · request `{request_id}`"}
            ],
        },
        {
            "type": "actions",
            "block_id": f"approval:{request_id}"[:255],
            "elements": [
                {
                    "type": "button",
                    "action_id": APPROVE,
                    "style": "primary",
                    "text": {"type": "plain_text", "text": "Approve"},
                    "value": request_id,
                },
                {
                    "type": "button",
                    "action_id": DENY,
                    "style": "danger",
                    "text": {"type": "plain_text", "text": "Deny"},
                    "value": request_id,
                },
            ],
        },
    ]


def outcome_line(answer: str, user: str | None, at: int | None, note: str | None = None) -> str:
    """One line saying which answer stands, by whom and when; `note` what became of an
    approved call (`not done yet: <why>`, `not done: <why>`)."""
    if answer == "yes":
        said = f"Approved by <@{user}> at {utc(at or 0)}"
        return f"{said}; {note.rstrip('. ')}." if note else f"{said}."
    if answer == "no":
        return f"Denied by <@{user}> at {utc(at or 0)}."
    return "Expired with no answer; nothing was done."


def approval_outcome(
    summary: str, answer: str, user: str | None, at: int | None, note: str | None = None
) -> list[Block]:
    """The prompt rewritten once answered: no buttons left to tap."""
    icon = {"yes": ":white_check_mark:", "no": ":no_entry_sign:"}.get(answer, ":hourglass:")
    if answer == "yes" and note:
        icon = ":hourglass_flowing_sand:" if "not done yet" in note else ":warning:"
    return [
        _section(f"*Approval:* {summary}"),
        {
            "type": "context",
            "elements": [
                {"type": "mrkdwn", "text": f"{icon} {outcome_line(answer, user, at, note)}"}
            ],
        },
    ]


def not_yours(requester: str, self_approval: bool = True) -> list[Block]:
    """What a tapper who may not answer sees (the requester too, when self-approval is off)."""
    return [
        _section(
            f"This approval is {NOT_YOURS}: only {who_answers(requester, self_approval)} "
            "can answer it."
        )
    ]


FEEDBACK = "wakeful_feedback"
"""The action_id of the feedback buttons under a reply (Block Kit `feedback_buttons` in a
`context_actions` block): the positive button's value is `positive`, the negative's `negative`."""
FEEDBACK_VALUES = ("positive", "negative")
FEEDBACK_THANKS = {
    "positive": "Thanks for the feedback: glad that helped.",
    "negative": "Thanks for the feedback: I'll keep it in mind.",
}
"""What the person who clicked sees, once, only them."""
SECTION_LIMIT = 3000


def feedback_blocks(text: str) -> list[Block]:
    """A reply as Block Kit with Slack's feedback buttons under it: the (already escaped) text
    in mrkdwn sections of at most 3,000 characters, cut at line ends where it can be, then a
    `context_actions` block with thumbs up / down. A click comes back as a `Feedback` event."""
    sections: list[Block] = []
    rest = text
    while rest:
        cut = len(rest) if len(rest) <= SECTION_LIMIT else rest.rfind("\n", 0, SECTION_LIMIT)
        if cut <= 0:
            cut = min(len(rest), SECTION_LIMIT)
        sections.append({"type": "section", "text": {"type": "mrkdwn", "text": rest[:cut]}})
        rest = rest[cut:].lstrip("\n")
    return [*sections, feedback_buttons()]


def feedback_buttons() -> Block:
    """Slack's thumbs up / down under a reply (a `context_actions` block): alone under a
    streamed reply, whose text is the message's own."""
    buttons = {
        "type": "feedback_buttons",
        "action_id": FEEDBACK,
        "positive_button": {
            "text": {"type": "plain_text", "text": "Good response"},
            "accessibility_label": "Mark this answer as helpful",
            "value": "positive",
        },
        "negative_button": {
            "text": {"type": "plain_text", "text": "Bad response"},
            "accessibility_label": "Mark this answer as not helpful",
            "value": "negative",
        },
    }
    return {"type": "context_actions", "elements": [buttons]}
