"""What both built-in agents say and ask the same way: the approval prompt and the rewrite of it
once answered, the facts of a digest, the status text, where a reply goes, and a person's time
zone. One place, so the two agents cannot drift apart."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from wakeful.bot import blocks
from wakeful.bot.config import OWN_SOURCES
from wakeful.bot.slack_text import inert
from wakeful.bot.webhooks import channel_inbox
from wakeful.core.effects import Message
from wakeful.core.errors import InvalidInput, SessionUnusable
from wakeful.core.records import Event
from wakeful.core.rules import digest
from wakeful.core.rules.schedule import zone
from wakeful.core.store import Store

DIGEST = "digest"
"""The timer name of an inbox's digest."""
MIN_DIGEST_SECONDS = 60
"""The shortest digest period either built-in agent sets: a digest every second would be a
post every second in someone's conversation."""
TzLookup = Callable[[str], str]


def digest_too_often(every: int, minimum: int = MIN_DIGEST_SECONDS) -> str | None:
    """Why a digest every `every` seconds is not set, or None when it may be."""
    if every >= minimum:
        return None
    return (
        f"Digest not set: every {plural(every, 'second')} is too often; the shortest period "
        f"is {plural(minimum, 'second')} (e.g. `digest every 1 hour`)."
    )


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def ids_note(events: Sequence[Event]) -> str:
    return f" (ids {', '.join(str(e.id) for e in events)})" if events else ""


def fresh_stats() -> dict[str, int]:
    """The counters a digest reports, zeroed when a digest goes out."""
    return {"messages": 0, "approved": 0, "denied": 0, "expired": 0, "refunds": 0}


def reply_thread(payload: Mapping[str, Any]) -> str | None:
    """The thread a reply to this Slack message belongs in: its thread, or, for a mention
    outside one, a new thread under the mention."""
    thread = payload.get("thread_ts") or (
        payload.get("ts") if payload.get("kind") == "mention" else None
    )
    return str(thread) if thread else None


SESSION_RESET = (
    "I had to start over in this conversation: my saved state could not be used ({reason}). "
    "The message I was working on could not be handled; please send it again."
)


def reply_target(events: Sequence[Event]) -> tuple[str, str | None] | None:
    """Where a reply to this batch goes: the latest Slack message's conversation, else the
    conversation a timer or approval names in its payload; None when nothing says."""
    for e in reversed(events):
        p = e.payload if isinstance(e.payload, dict) else {}
        if e.source == "slack" and isinstance(p.get("channel"), str):
            return str(p["channel"]), reply_thread(p)
    for e in reversed(events):
        p = e.payload if isinstance(e.payload, dict) else {}
        nested = p.get("payload")  # a timer's own payload sits inside its occurrence's
        inner: dict[str, Any] = nested if isinstance(nested, dict) else p
        if isinstance(inner.get("channel"), str):
            thread = inner.get("thread_ts")
            return str(inner["channel"]), str(thread) if thread else None
    return None


def unusable_session(reason: str, events: Sequence[Event]) -> SessionUnusable:
    """The failure a run raises when the saved state, not the events, is the problem; it says
    so to the person (once, when the engine gives up on the state and sets it aside)."""
    target = reply_target(events)
    notice = None
    if target is not None:
        text = SESSION_RESET.format(reason=inert(reason))
        notice = Message(target[0], text, thread_ts=target[1], priority="urgent")
    return SessionUnusable(reason, notice)


def user_zone(lookup: TzLookup, user: str, again: str) -> tuple[str, str]:
    """The person's IANA zone from Slack, and how a reply names it: the zone itself, or, when
    UTC stands in, `UTC: <why>`. A zone that could not be read (Slack failed or is slow) is
    read again on a later run, so `again` tells the person how to get theirs (say the command
    again later); it is never saved as theirs."""
    tz = lookup(user)
    if not tz:
        return "UTC", f"UTC: your Slack time zone could not be read; {again}"
    try:
        zone(tz)
    except InvalidInput:  # Slack named a zone this machine's tz database lacks
        return "UTC", f"UTC: your Slack time zone {tz} is not known on this host"
    return tz, tz


def approval_prompt(
    channel: str,
    thread_ts: str | None,
    request_id: str,
    summary: str,
    requester: str,
    deadline: int,
) -> Message:
    """The Approve / Deny question, urgent: a person is waiting to answer it."""
    return Message(
        channel,
        f"Approval needed: {summary} for <@{requester}>",
        thread_ts=thread_ts,
        blocks=blocks.approval_prompt(request_id, summary, requester, deadline),
        priority="urgent",
    )


def outcome_update(
    channel: str,
    thread_ts: str | None,
    request_id: str,
    summary: str,
    answer: str,
    user: str | None,
    at: int | None,
) -> Message:
    """The prompt rewritten with the answer that stands, its buttons gone."""
    line = blocks.outcome_line(answer, user, at)
    return Message(
        channel,
        f"{summary}: {line}",
        thread_ts=thread_ts,
        kind="update",
        ref=request_id,
        blocks=blocks.approval_outcome(summary, answer, user, at),
    )


def outage_note(skipped: int, unit: str) -> str | None:
    """How much a digest covers when `skipped` periods (of `unit`: day or period) were missed."""
    if not skipped:
        return None
    return f"After an outage, this digest covers {plural(skipped + 1, unit)} ({skipped} missed)."


def digest_lines(
    store: Store,
    inbox: str,
    stats: Mapping[str, int],
    channel: str | None = None,
    since: int | None = None,
    reported_dead: Collection[int] = (),
) -> list[digest.Facts]:
    """What happened since the last digest as fact lines (core/rules/digest.py): counts that
    add up when held digests merge, states (pending approvals, dead events) that the latest
    tells; with the digest's `channel` and start, the webhook deliveries reported there too.
    A dead event not in `reported_dead` counts as news."""
    pending = sum(1 for a in store.approvals(inbox) if a.answer is None)
    dead = store.dead_events(inbox)
    new_dead = sum(1 for e in dead if e.id not in set(reported_dead))
    approvals = (
        "approvals: {approved} approved, {denied} denied, {expired} expired, {pending} pending"
    )
    lines = [
        digest.line("messages", "messages handled: {messages}", {"messages": stats["messages"]}),
        digest.line(
            "approvals",
            approvals,
            {k: stats[k] for k in ("approved", "denied", "expired")},
            pending=pending,
        ),
        digest.line("refunds", "refunds done: {refunds}", {"refunds": stats["refunds"]}),
        digest.line(
            "dead",
            f"dead events: {len(dead)}{ids_note(dead)}" if dead else "dead events: none",
            {"new_dead": new_dead},
        ),
    ]
    if channel and since is not None:
        lines.extend(webhook_lines(store, channel, since))
    return lines


def digest_facts(
    store: Store,
    inbox: str,
    stats: Mapping[str, int],
    channel: str | None = None,
    since: int | None = None,
) -> list[str]:
    """What happened since the last digest, one fact a line (see `digest_lines`)."""
    return digest.render_lines(digest_lines(store, inbox, stats, channel, since))


def webhook_lines(store: Store, channel: str, since: int) -> list[digest.Facts]:
    """`webhook deliveries: 5 (github 2, stripe 3)` for a conversation webhooks report to,
    nothing for one they do not (a person's DM digest stays as it was)."""
    counts = {
        source: n
        for source, n in store.source_counts(channel_inbox(channel), since).items()
        if source not in OWN_SOURCES
    }
    if not counts:
        return []
    total = {"deliveries": sum(counts.values())}
    line = digest.line("webhooks", "webhook deliveries: {deliveries} ({by})", total)
    return [{**line, "by": counts}]


def status_text(store: Store, inbox: str) -> str:
    """Pending and dead events (with ids), open approvals and the next digest of an inbox."""
    pending = [e for e in store.open_events(inbox) if e.status == "pending"]
    dead = store.dead_events(inbox)
    lines = [
        f"Status: {plural(len(pending), 'pending event')}{ids_note(pending)}, "
        f"{len(dead)} dead{ids_note(dead)}"
    ]
    open_approvals = [a for a in store.approvals(inbox) if a.answer is None]
    if open_approvals:
        described = "; ".join(
            inert(f"{a.id} ({a.tool} {_order_id(a.args)}, expires {blocks.utc(a.deadline)})")
            for a in open_approvals
        )
        lines.append(f"Open approvals: {described}")
    else:
        lines.append("Open approvals: none")
    digest = next((t for t in store.timers(inbox) if t.id.endswith(f"/{DIGEST}")), None)
    lines.append(
        "Next digest: none scheduled"
        if digest is None
        else f"Next digest: {blocks.utc(digest.next_at)}"
    )
    return "\n".join(lines)


REFUND_TOOL = "refund_order"
ORDER_REFUNDED = "refund_order:once"
"""The tool name of the one record per refunded order (key `refund_order:<order id>`), written
before the refund itself: whichever request writes it first is the one that refunds."""
ALREADY_REFUNDED = "Order {order} was already refunded on {when} (request {request})."
ALREADY_WAITING = (
    "Order {order} is already waiting for approval (request {request}); I did not ask again."
)


def refunded_key(order: str) -> str:
    return f"{REFUND_TOOL}:{order}"


def refund_already(
    store: Store, order: str, asking: Collection[tuple[str, Any]] = (), now: int = 0
) -> str | None:
    """The answer to a request to refund `order` when it must not be asked for again: the
    order was refunded, or an approval for it is open (in the store, or among `asking`, the
    (request id, args) this run is about to ask for); None when it may be asked."""
    first = store.tool_call(refunded_key(order))
    if first is not None:
        return _already_refunded(order, first)
    open_ = [(a.id, a.args) for a in store.open_approvals(REFUND_TOOL) if a.deadline > now]
    for request_id, args in [*open_, *asking]:
        if isinstance(args, dict) and str(args.get("order_id")) == order:
            return ALREADY_WAITING.format(order=inert(order), request=inert(request_id))
    return None


def refund_once(
    store: Store, order: str, request_id: str, args: Mapping[str, Any], inbox: str, now: int
) -> tuple[bool, str | None]:
    """Refund `order` under `request_id` (the approval's id, so a retried run refunds once).
    Returns (refunded by this call, the line saying which other request refunded the order
    first, or None): two approvals for one order refund it once."""
    store.record_tool_call(
        refunded_key(order), ORDER_REFUNDED, {"order_id": order, "request": request_id}, inbox, now
    )
    first = store.tool_call(refunded_key(order))
    if first is not None and _request_of(first) != request_id:
        return False, _already_refunded(order, first)
    return store.record_tool_call(request_id, REFUND_TOOL, dict(args), inbox, now), None


def _request_of(record: Mapping[str, Any]) -> str:
    try:
        args = json.loads(record["args"])
    except (TypeError, ValueError):
        return ""
    return str(args.get("request", "")) if isinstance(args, dict) else ""


def _already_refunded(order: str, record: Mapping[str, Any]) -> str:
    when = blocks.utc(int(record["created_at"]))
    return ALREADY_REFUNDED.format(
        order=inert(order), when=when, request=inert(_request_of(record) or "?")
    )


def dead_letters_text(store: Store, limit: int = 10) -> str:
    """Dead events and parked outbox rows with their errors, for an approver's eyes."""
    dead = store.dead_letters(limit=limit)
    lines = [f"Dead events: {len(dead.events)}"]
    lines += [inert(f"- event {e.id} ({e.inbox}): {(e.error or '')[:200]}") for e in dead.events]
    lines.append(f"Parked posts: {len(dead.outbox)}")
    lines += [
        inert(f"- outbox {r.id} to {r.channel}: {(r.error or '')[:200]}") for r in dead.outbox
    ]
    return "\n".join(lines)


def _order_id(args: Any) -> str:
    return str(args.get("order_id", "")) if isinstance(args, dict) else ""
