"""What the person is told when Slack refuses for good a post they caused: the one place these
texts live (tests compare them exactly).

A reminder set with `/wakeful` in a channel the bot is not in is confirmed (the command's answer
goes through its response_url, which works anywhere), then refused when it is posted. The row is
parked, and the person whose inbox it belongs to gets one DM from the bot (the bot can always DM
a person of its workspace) saying where it could not post, why, and what to do. An ephemeral
would not do: Slack refuses it in such a channel for the same reason.
"""

from __future__ import annotations

from wakeful.bot.slack.kinds import NOTICE
from wakeful.core.effects import Post
from wakeful.core.inbox_id import InboxId
from wakeful.core.rules.outbox import Part

INVITE = "Invite me with `/invite @wakeful` there, then ask me again."
WHY: dict[str, str] = {
    "not_in_channel": f"I'm not a member of that channel. {INVITE}",
    "channel_not_found": (
        f"I can't see that channel (it is private and I'm not in it, or it is gone). {INVITE}"
    ),
    "is_archived": "that channel is archived. Ask me again in a channel that is not archived.",
    "channel_is_archived": (
        "that channel is archived. Ask me again in a channel that is not archived."
    ),
    "restricted_action": (
        "the workspace doesn't let me post there. Ask a workspace admin to allow it, "
        "or ask me again in another channel."
    ),
    "restricted_action_read_only_channel": (
        "that channel is read-only for me. Ask me again in another channel."
    ),
    "restricted_action_thread_only_channel": (
        "that channel only takes replies in threads. Ask me again in a thread there."
    ),
    "restricted_action_non_threadable_channel": (
        "that channel doesn't take replies in threads. Ask me again outside a thread."
    ),
}
"""Slack's refusals of a post that a person can do something about, and what they can do."""
QUOTED = 150
"""Characters of the refused text quoted in the notice, so the person knows which it was."""


def notice_text(error: str, channel: str, text: str) -> str | None:
    """What the person reads, or None for a refusal they can do nothing about."""
    why = WHY.get(error)
    if why is None:
        return None
    first = text.strip().splitlines()[0] if text.strip() else ""
    if len(first) > QUOTED:
        first = first[: QUOTED - 1] + "…"
    said = f"\n>{first}" if first else ""
    return f"I couldn't post in <#{channel}>: {why}{said}"


def notice_for(part: Part, error: str) -> Post | None:
    """The notice for a refused part: to the person whose inbox the part belongs to, in their
    DM. None when nobody is to be told: the part is itself a notice (never a loop), it was
    going to a DM (the same refusal would meet the notice), or its inbox is not a person's."""
    user = InboxId(part.inbox).user
    if part.kind == NOTICE.name or user is None or part.channel.startswith("D"):
        return None
    text = notice_text(error, part.channel, part.text)
    if text is None:
        return None
    return Post(channel=user, user=user, text=text, kind=NOTICE.name, priority="urgent")
