"""The App Home tab: what one person has going (pending approvals with the same Approve / Deny
buttons as the prompts, next reminders, the digest, recent refunds) and, for approvers, what
needs an operator (dead events and parked outbox rows, each with a Requeue button).

The view is built from the store and published through the outbox (kind `home`; only the
latest per person is sent), so nothing holds a lock across the Slack call.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from wakeful.bot import blocks
from wakeful.bot.agents.common import DIGEST
from wakeful.bot.blocks import Block
from wakeful.bot.payloads import REQUEUE
from wakeful.bot.slack_text import inert
from wakeful.core.agent import Run
from wakeful.core.effects import Effects, Message
from wakeful.core.records import TimerState
from wakeful.core.rules.schedule import first_occurrence
from wakeful.core.store import Store

SHOWN = 5
"""Rows shown per list: the Home tab is a glance, `wakeful inspect` has the rest."""


def person(inbox: str) -> tuple[str, str] | None:
    """(team, user) of a person's inbox `<team>:<user>`; None for a conversation's inbox."""
    team, sep, user = inbox.partition(":")
    if not sep or team == "channel" or not user.startswith(("U", "W")):
        return None
    return team, user


def home_message(
    store: Store, inbox: str, approvers: Collection[str], now: int, effects: Effects | None = None
) -> Message | None:
    """The Home view of a person's inbox as an outbox row, or None for a conversation's.
    `effects`: what the run being finished adds (its approvals and reminders are not in the
    store until the finish commits)."""
    who = person(inbox)
    if who is None:
        return None
    view = home_blocks(store, inbox, who[1], approvers, effects or Effects(), now)
    return Message(who[1], "Home", blocks=view, kind="home", user=who[1], priority="urgent")


def home_blocks(
    store: Store, inbox: str, user: str, approvers: Collection[str], effects: Effects, now: int
) -> list[Block]:
    """The Home tab's blocks for `user` (at most 50, each section under Slack's 3,000)."""
    out: list[Block] = [_header("Pending approvals")]
    pending = [
        (a.id, a.tool, a.args, a.requester, a.deadline)
        for a in store.approvals(inbox)
        if a.answer is None
    ]
    pending += [(a.id, a.tool, a.args, a.requester, a.deadline) for a in effects.approvals]
    for rid, tool, args, requester, deadline in pending[-SHOWN:]:
        summary = f"{tool} {args.get('order_id', '') if isinstance(args, dict) else ''}"
        out.extend(blocks.approval_prompt(rid, inert(summary.strip()), requester, deadline))
    if not pending:
        out.append(_text("Nothing waits for an answer."))
    timers = store.timers(inbox)
    out.append(_header("Next reminders"))
    due = [(t.next_at, t.payload) for t in timers if "/remind-" in t.id]
    due += [
        (t.first_at, t.payload)
        for t in effects.timers
        if t.name.startswith("remind-") and t.first_at is not None
    ]
    due.sort(key=lambda d: d[0])
    lines = [f"{blocks.when(at)}: {_payload_text(payload)}" for at, payload in due[:SHOWN]]
    out.append(_text("\n".join(lines) or "No reminders."))
    out.append(_header("Digest"))
    out.append(_text(_digest_line(store, inbox, timers, effects, now)))
    refunds = store.tool_calls(tool="refund_order", inbox=inbox)[-SHOWN:]
    out.append(_header("Recent refunds"))
    shown = [
        f"order {inert(_order(r['args']))} at {blocks.utc(int(r['created_at']))}" for r in refunds
    ]
    out.append(_text("\n".join(reversed(shown)) or "None."))
    if user in approvers:
        out.extend(operator_blocks(store))
    return out[:50]


def operator_blocks(store: Store) -> list[Block]:
    """Dead events and parked rows with a Requeue button each: approvers only."""
    dead = store.dead_letters(limit=SHOWN)
    out: list[Block] = [_header("Dead letters (approvers only)")]
    for e in dead.events:
        error = (e.error or "")[:200]
        out.append(_requeue(inert(f"event {e.id} in {e.inbox}: {error}"), f"event:{e.id}"))
    for r in dead.outbox:
        error = (r.error or "")[:200]
        out.append(_requeue(inert(f"outbox row {r.id} to {r.channel}: {error}"), f"outbox:{r.id}"))
    if not dead.events and not dead.outbox:
        out.append(_text("No dead events, no parked posts."))
    return out


def as_text(view: Sequence[Block]) -> str:
    """A Home view as plain lines (the demo shows it so): headers, texts and buttons."""
    lines: list[str] = []
    for block in view:
        if block.get("type") == "header":
            lines.append(f"== {block['text']['text']} ==")
        elif block.get("type") in ("section", "context"):
            texts = [block["text"]] if "text" in block else block.get("elements", [])
            lines.extend(str(t.get("text", "")) for t in texts)
            if "accessory" in block:
                lines[-1] += f"  [{block['accessory']['text']['text']}]"
        elif block.get("type") == "actions":
            lines.append("  ".join(f"[{e['text']['text']}]" for e in block["elements"]))
    return "\n".join(lines)


@dataclass
class HomeHook:
    """After each run of the inbox of a person who opened their Home tab, the tab is queued
    for a refresh (written by the run's fenced finish, sent through the outbox). People who
    never opened it cost nothing."""

    store: Store
    approvers: tuple[str, ...] = ()

    def before(self, run: Run) -> None:
        return None

    def after(self, run: Run, effects: Effects) -> None:
        if person(run.inbox) is None or not self.store.home_opened(run.inbox):
            return
        message = home_message(self.store, run.inbox, self.approvers, run.now, effects)
        if message is not None:
            effects.messages.append(message)


def _header(text: str) -> Block:
    return {"type": "header", "text": {"type": "plain_text", "text": text[:150]}}


def _text(text: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}


def _requeue(text: str, value: str) -> Block:
    button = {
        "type": "button",
        "action_id": REQUEUE,
        "text": {"type": "plain_text", "text": "Requeue"},
        "value": value,
    }
    return {**_text(text), "accessory": button}


def _digest_line(
    store: Store, inbox: str, timers: list[TimerState], effects: Effects, now: int
) -> str:
    """The digest setting and its next time, as this run leaves them."""
    stored = next((t for t in timers if t.id.endswith(f"/{DIGEST}")), None)
    next_at = None if stored is None else stored.next_at
    for t in effects.timers:
        if t.name == DIGEST:
            next_at = first_occurrence(t.kind, now, t.first_at, t.daily_at, t.tz)
    if DIGEST in effects.cancel_timers or next_at is None:
        return "Off."
    session = effects.session if effects.save_session else store.session(inbox)
    return f"{_digest_setting(session)}Next digest {blocks.when(next_at)}."


def _digest_setting(session: Any) -> str:
    """The digest as the agent saved it (`every` seconds or `daily` at HH:MM in a zone)."""
    digest = session.get("digest") if isinstance(session, dict) else None
    if not isinstance(digest, dict):
        return ""
    if digest.get("every"):
        return f"Every {digest['every']} s. "
    if digest.get("daily"):
        return f"Daily at {digest['daily']} ({digest.get('tz') or 'UTC'}). "
    return ""


def _payload_text(payload: Any) -> str:
    return inert(str(payload.get("text", ""))) if isinstance(payload, dict) else ""


def _order(args: Any) -> str:
    try:
        parsed = json.loads(args) if isinstance(args, str) else args
    except ValueError:
        return "?"
    return str(parsed.get("order_id", "?")) if isinstance(parsed, dict) else "?"
