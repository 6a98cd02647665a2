"""The Slack surfaces the outbox carries beside the engine's own kinds, and Slack's limits.

`SLACK_KINDS` is the engine's registry (core/kinds.py) with these added: a value, built here and
handed to the store by whoever assembles a process (bot/process/runtime.py, the Harness, the
demo), so importing this module changes nothing. A new surface is a line here and a method in
bot/slack/sender.py, never a schema change.
"""

from __future__ import annotations

from wakeful.core.kinds import ENGINE_KINDS, KEEP_LAST, Kind, Kinds, Limits

SLACK_TEXT_LIMIT = 40_000
"""Characters of one chat.postMessage text (Slack truncates past it)."""
SLACK_BLOCK_LIMIT = 50
"""Blocks of one message (Slack refuses more)."""

RESPOND = Kind("respond", needs_user=True)
"""A slash command's answer through its response_url (rows written before 0.2; a reply to a
command is now an ephemeral whose `ref` is the response_url)."""
HOME = Kind("home", merge=KEEP_LAST, gathered=True, needs_user=True)
"""A person's App Home view (views.publish): only the latest of a batch is published."""
STATUS = Kind("status", merge=KEEP_LAST, needs_thread=True, may_be_empty=True)
"""A conversation's "is thinking…" under the thread being answered (assistant.threads.setStatus;
`blocks` carry the loading messages; empty text clears it)."""
PROMPTS = Kind("prompts", merge=KEEP_LAST)
"""Suggested prompts (assistant.threads.setSuggestedPrompts): pinned to the Messages tab (no
thread), or an assistant thread's."""

NOTICE = Kind("notice", needs_user=True)
"""A word to one person in their DM with the bot (chat.postMessage to the user id): why a post
they caused was refused and what to do (bot/slack/refusals.py). A notice that is refused in turn is
parked without another notice."""

SLACK_KINDS: Kinds = ENGINE_KINDS.with_kinds(RESPOND, HOME, STATUS, PROMPTS, NOTICE).with_limits(
    Limits(text=SLACK_TEXT_LIMIT, blocks=SLACK_BLOCK_LIMIT)
)
"""What every wakeful process's outbox carries: the engine's kinds, Slack's surfaces, and
Slack's limits on one call."""
