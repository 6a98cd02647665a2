"""What operators are told in Slack (WAKEFUL_OPS_CHANNEL), and the one way it is written.

Dead rows reach no one who is not looking, so every failure nobody else is told of becomes a
line here, written as an outbox row of the reserved inbox `ops` (core/inbox_id.py) in the
transaction that records the failure: an event that went dead (out of attempts at a claim, or
dead-lettered by its run's finish), a post Slack refused for good (`Outbox.fail_part`), sends
paused by Slack or an unreadable token (`Outbox.defer_batch`), and what a run reports
(`Effects.ops`: a tool given up, a destination revoked or unreachable).

The rows are of kind `ops` (core/kinds.py): normal priority, so the gap holds them like any
post, and gathered, so every ops row a batch holds becomes ONE post (core/rules/ops.py): the
channel gets at most one post per gap however many failures, its lines capped so that a flood
never makes a post Slack refuses. A refused ops post is parked and logged once, never reported again
(the dispatcher and `fail_part` ask `InboxId.is_ops`).

A line names what and where (inbox, event id, source) and the first line of the error,
redacted like every log line and made inert for Slack (a `<!channel>` in an error pages no
one). Nothing a person wrote is copied beyond that first line of an error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from wakeful.core import logs
from wakeful.core.effects import Post
from wakeful.core.inbox_id import InboxId
from wakeful.core.kinds import OPS
from wakeful.core.settings import Settings
from wakeful.core.store.codec import message_params
from wakeful.core.store.sql import Tx

MAX_TEXT = 300
"""Characters of an error (or a run's line) an ops line quotes; the rest is cut."""
_BARE_AMPERSAND = re.compile(r"&(?!(?:amp|lt|gt);)")


def destination(settings: Settings) -> tuple[InboxId, str] | None:
    """The ops rows' inbox and channel, or None when WAKEFUL_OPS_CHANNEL is unset."""
    if not settings.ops_channel:
        return None
    team, _, channel = settings.ops_channel.rpartition(":")
    return InboxId.ops(team or None), channel


def queue_lines(tx: Tx, settings: Settings, lines: Iterable[str], now: int) -> int:
    """Queue one ops row per line inside the caller's transaction (nothing when the ops
    channel is unset); how many."""
    where = destination(settings)
    if where is None:
        return 0
    inbox, channel = where
    queued = 0
    for line in lines:
        params = message_params(inbox, Post(channel, line, kind=OPS.name))
        tx.run("insert_outbox", {**params, "now": now})
        queued += 1
    return queued


# -- the lines ----------------------------------------------------------------------------------


def dead(inbox: str, event_id: int, source: str, error: str | None) -> str:
    """An event that went dead: whose, which, from where, and why."""
    return f"inbox {inbox}: event {event_id} from {source} is dead: {quoted(error)}"


def reported(inbox: str, text: str) -> str:
    """A line a run reported (`Effects.ops`), under the inbox it ran for."""
    return f"inbox {inbox}: {quoted(text)}"


def parked(inbox: str, kind: str, channel: str, row_ids: Sequence[int], error: str) -> str:
    """Rows Slack refused for good, parked (`wakeful requeue outbox ID` sends one again)."""
    ids = ", ".join(str(i) for i in row_ids[:5])
    more = f" and {len(row_ids) - 5} more" if len(row_ids) > 5 else ""
    where = f"<#{channel}>" if channel[:1] in ("C", "G") else quoted(channel)
    return (
        f"inbox {inbox}: a {quoted(kind)} to {where} was parked for good (outbox {ids}{more}): "
        f"{quoted(error)}"
    )


def paused(workspace: str, seconds: int, why: str) -> str:
    """Sends paused (a rate limit, an unreadable token): said once per pause."""
    who = f"workspace {quoted(workspace)}: " if workspace not in ("", "-") else ""
    return f"{who}Slack sends paused for {seconds} s: {quoted(why)}"


def quoted(text: str | None) -> str:
    """Outside text as an ops line may show it: its first line only, redacted like every log
    line, cut to MAX_TEXT, and inert for Slack (`&`, `<`, `>` escaped as bot/slack/text.py
    does: `<!channel>` shows as typed, pages no one)."""
    lines = (text or "").strip().splitlines()
    first = logs.redact(lines[0].strip()) if lines else "(no error text)"
    if len(first) > MAX_TEXT:
        first = first[: MAX_TEXT - 1] + "…"
    return _BARE_AMPERSAND.sub("&amp;", first).replace("<", "&lt;").replace(">", "&gt;")
