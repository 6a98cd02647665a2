"""`refund-desk`: the built-in deterministic agent (no network), for demos, tests and as the
reference for what an agent returns.

It answers each batch of chat with one reply, asks for approval before a refund, sets reminders
and paced digests, and reports status. Everything it knows between runs lives in the session
state that `finish` saves with the run, so counts in a digest are exact even across crashes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from wakeful.bot.agents.common import (
    DIGEST,
    MIN_DIGEST_SECONDS,
    TzLookup,
    approval_prompt,
    dead_letters_text,
    digest_lines,
    digest_too_often,
    fresh_stats,
    outcome_update,
    plural,
    refund_already,
    refund_once,
    reply_thread,
    status_text,
    unusable_session,
    user_zone,
)
from wakeful.bot.agents.webhook_report import is_webhook, report_line
from wakeful.bot.slack_text import inert
from wakeful.core.agent import Run, Tool, Toolbox
from wakeful.core.effects import ApprovalRequest, Effects, Message, Timer
from wakeful.core.records import Event
from wakeful.core.rules import digest
from wakeful.core.rules.approvals import ApprovalBudget
from wakeful.core.store import Store

REFUND = re.compile(r"refund\s+order\s+#?([A-Za-z0-9][A-Za-z0-9_-]{0,63})", re.IGNORECASE)
REMIND = re.compile(
    r"remind me in (\d{1,7}) (seconds?|minutes?|hours?) to (.+)", re.IGNORECASE | re.DOTALL
)
DIGEST_EVERY = re.compile(r"digest every (\d{1,7}) (seconds?|minutes?|hours?)", re.IGNORECASE)
DIGEST_DAILY = re.compile(r"digest daily at (\d{1,2}):(\d{2})\b", re.IGNORECASE)
DIGEST_OFF = re.compile(r"digest off\b", re.IGNORECASE)
MENTION = re.compile(r"<@[A-Z0-9]+>")
UNIT = {"second": 1, "minute": 60, "hour": 3600}


SLASH_USAGE = (
    "Try `/wakeful status`, `/wakeful digest every 1 hour` (or `daily at 09:00`, or `off`), "
    "`/wakeful remind me in 10 minutes to stretch`, or `/wakeful dead-letters` (approvers)."
)
ONLY_APPROVERS = "Only approvers (WAKEFUL_APPROVERS) may see the dead letters."


def _seconds(n: str, unit: str) -> int:
    return int(n) * UNIT[unit.lower().rstrip("s")]


def _load(session: Any, now: int, events: tuple[Event, ...]) -> dict[str, Any]:
    """The saved state, checked: a shape this agent did not write is an unusable session (the
    engine retries, then sets it aside), never a crash in the middle of a run."""
    if session is None:
        session = {}
    stats = session.get("stats", fresh_stats()) if isinstance(session, dict) else None
    problem = None
    if not isinstance(session, dict):
        problem = f"the saved state is a {type(session).__name__}, not an object"
    elif not isinstance(stats, dict) or not all(isinstance(v, int) for v in stats.values()):
        problem = "the saved digest counts are not numbers"
    elif set(fresh_stats()) - set(stats):
        problem = "the saved digest counts are incomplete"
    elif not isinstance(session.get("calls", {}), dict):
        problem = "the saved pending calls are not an object"
    elif not isinstance(session.get("since", now), int):
        problem = "the saved digest start is not a time"
    if problem is not None:
        raise unusable_session(problem, events)
    state: dict[str, Any] = dict(session)
    state.setdefault("stats", fresh_stats())
    state.setdefault("calls", {})
    state.setdefault("since", now)
    return state


class RefundDesk:
    """The default agent. `tz_lookup` maps a Slack user id to an IANA zone (users.info);
    `min_digest` is the shortest digest period it sets (the demo lowers it to show digests
    in seconds)."""

    def __init__(
        self,
        store: Store,
        approval_ttl: int | None = None,
        approvers: tuple[str, ...] = (),
        tz_lookup: TzLookup | None = None,
        quiet_digests: bool = True,
        min_digest: int = MIN_DIGEST_SECONDS,
    ) -> None:
        self.store = store
        self.quiet_digests = quiet_digests
        self.min_digest = min_digest
        self.approval_ttl = approval_ttl or store.settings.approval_ttl
        self.approvers = approvers
        self.tz_lookup = tz_lookup or (lambda _user: "UTC")
        self.tools = Toolbox(
            [
                Tool("refund_order", "ask", self._refund, "Refund an order (needs approval)."),
            ]
        )
        self._inbox = ""
        self._now = 0
        self._budget = ApprovalBudget(0, 0, 0)

    def _refund(self, args: Mapping[str, Any], key: str) -> str | None:
        """The default refund tool: records the refund under the approval's request id, so a
        retried run refunds once, and once per order (bot/agents/common.py). Returns None
        when this request refunded the order, else the line saying which one did."""
        order = str(args.get("order_id", ""))
        return refund_once(self.store, order, key, args, self._inbox, self._now)[1]

    # -- the run --------------------------------------------------------------------------

    def run(self, run: Run) -> Effects:
        self._inbox, self._now = run.inbox, run.now
        self._budget = self.store.approval_budget(run.inbox)
        state = _load(run.session, run.now, run.events)
        effects = Effects()
        chats = [e for e in run.events if e.source == "slack"]
        commands = [e for e in chats if e.payload.get("kind") == "command"]
        chats = [e for e in chats if e.payload.get("kind") != "command"]
        if chats:
            self._chat(run, chats, state, effects)
        for command in commands:
            self._slash(run, command, state, effects)
        for event in run.events:
            if event.source == "approval":
                self._answered(event, state, effects)
            elif event.source == "timer":
                self._timer(run, event, state, effects)
            elif is_webhook(event) and isinstance(event.payload.get("channel"), str):
                # One normal line per delivery: the outbox merges a burst into one post per gap.
                line = report_line(event.payload)
                effects.messages.append(Message(event.payload["channel"], line))
        effects.set_session(state)
        return effects

    def _chat(self, run: Run, chats: list[Event], state: dict[str, Any], fx: Effects) -> None:
        by_conversation: dict[tuple[str, str | None], list[Event]] = {}
        for e in chats:
            where = (e.payload["channel"], reply_thread(e.payload))
            by_conversation.setdefault(where, []).append(e)
        state["stats"]["messages"] += len(chats)
        for (channel, thread), events in by_conversation.items():
            state["home"] = {"channel": channel, "thread_ts": thread}
            lines = [f"Handled {plural(len(events), 'message')}."]
            for e in events:
                lines.extend(self._commands(run, e, channel, thread, state, fx))
            fx.messages.insert(
                0, Message(channel, "\n".join(lines), thread_ts=thread, priority="urgent")
            )

    def _slash(self, run: Run, e: Event, state: dict[str, Any], fx: Effects) -> None:
        """`/wakeful …`: the same commands as a message, answered to the caller alone."""
        p = e.payload
        channel, user = str(p["channel"]), str(p["user"])
        text = str(p.get("text") or "").strip()
        if text.lower() in ("dead-letters", "dead letters"):
            allowed = user in self.approvers
            lines = [dead_letters_text(self.store) if allowed else ONLY_APPROVERS]
        else:
            lines = self._commands(run, e, channel, None, state, fx) or [SLASH_USAGE]
        fx.messages.append(
            Message(
                channel,
                "\n".join(lines),
                kind="respond",
                ref=p.get("response_url") or None,
                user=user,
                priority="urgent",
            )
        )

    def _commands(
        self,
        run: Run,
        e: Event,
        channel: str,
        thread: str | None,
        state: dict[str, Any],
        fx: Effects,
    ) -> list[str]:
        text = MENTION.sub("", str(e.payload.get("text") or "")).strip()
        user = str(e.payload.get("user") or "")
        lines: list[str] = []
        skipped = self._budget.skipped
        for n, match in enumerate(REFUND.finditer(text)):
            order = match.group(1)
            # The pattern admits no <, > or &: the id is shown through inert all the same.
            shown = inert(order)
            request_id = f"refund-{e.id}-{n}"
            outcome = self.tools.call("refund_order", {"order_id": order}, request_id)
            if outcome.status == "refused":
                lines.append(f"I am not allowed to refund order {shown}.")
                continue
            asking = [(a.id, a.args) for a in fx.approvals]
            if already := refund_already(self.store, order, asking, run.now):
                lines.append(already)
                continue
            if not self._budget.take():
                continue  # over a cap: counted, and said once below
            summary = f"refund order {shown}"
            deadline = run.now + self.approval_ttl
            prompt = approval_prompt(channel, thread, request_id, summary, user, deadline)
            fx.approvals.append(
                ApprovalRequest(
                    id=request_id,
                    tool="refund_order",
                    args={"order_id": order, "reason": text[:500]},
                    requester=user,
                    approvers=self.approvers,
                    deadline=deadline,
                    prompt=prompt,
                )
            )
            state["calls"][request_id] = {
                "tool": "refund_order",
                "args": {"order_id": order},
                "channel": channel,
                "thread_ts": thread,
                "summary": summary,
            }
            lines.append(f"Asked for approval to refund order {shown}.")
        if note := self._budget.note(self._budget.skipped - skipped):
            lines.append(note)
        if m := REMIND.search(text):
            delay = _seconds(m.group(1), m.group(2))
            what = m.group(3).strip()
            payload = {"kind": "reminder", "text": what, "channel": channel, "thread_ts": thread}
            fx.timers.append(Timer.once(f"remind-{e.id}", run.now + delay, payload))
            lines.append(f"I'll remind you in {m.group(1)} {m.group(2)}: {inert(what)}")
        if m := DIGEST_EVERY.search(text):
            every = _seconds(m.group(1), m.group(2))
            if too_often := digest_too_often(every, self.min_digest):
                lines.append(too_often)
            else:
                payload = {"kind": DIGEST, "channel": channel, "thread_ts": thread}
                fx.timers.append(Timer.every(DIGEST, every, run.now + every, payload))
                state["digest"] = {"every": every}
                lines.append(f"Digest set: every {m.group(1)} {m.group(2)}.")
        elif m := DIGEST_DAILY.search(text):
            hh, mm = int(m.group(1)), int(m.group(2))
            if hh > 23 or mm > 59:
                lines.append(f"{m.group(1)}:{m.group(2)} is not a time of day; use HH:MM.")
            else:
                at = f"{hh:02d}:{mm:02d}"
                again = f"say `digest daily at {at}` again later"
                tz, shown = user_zone(self.tz_lookup, user, again)
                payload = {"kind": DIGEST, "channel": channel, "thread_ts": thread}
                fx.timers.append(Timer.daily(DIGEST, at, tz, payload))
                state["digest"] = {"daily": at, "tz": tz}
                lines.append(f"Digest set: daily at {at} ({shown}).")
        elif DIGEST_OFF.search(text):
            fx.cancel_timers.append(DIGEST)
            state["digest"] = None
            lines.append("Digest off.")
        if text.lower() == "status":
            lines.append(self._status(run, state))
        return lines

    def _answered(self, e: Event, state: dict[str, Any], fx: Effects) -> None:
        p = e.payload
        request_id = str(p["approval"])
        call = state["calls"].pop(request_id, None) or {
            "tool": p.get("tool"),
            "args": p.get("args") or {},
            "channel": (state.get("home") or {}).get("channel"),
            "thread_ts": None,
            "summary": inert(f"{p.get('tool')} {p.get('args')}"),
        }
        order = inert(str(call["args"].get("order_id", "?")))
        channel, thread = call["channel"], call["thread_ts"]
        answer = p["answer"]
        if answer == "yes":
            already = self.tools.run_approved("refund_order", call["args"], request_id).value
            state["stats"]["approved"] += 1
            state["stats"]["refunds"] += 1 if already is None else 0
            text = (
                f"Refunded order {order}." if already is None else f"{already} Not refunded again."
            )
        elif answer == "no":
            state["stats"]["denied"] += 1
            text = f"Refund for order {order} denied; nothing was done."
        else:
            state["stats"]["expired"] += 1
            text = f"Refund request for order {order} expired; nothing was done."
        if not channel:
            return
        fx.messages.append(
            outcome_update(
                channel,
                thread,
                request_id,
                call["summary"],
                answer,
                p.get("user"),
                p.get("answered_at"),
            )
        )
        fx.messages.append(Message(channel, text, thread_ts=thread, priority="urgent"))

    def _timer(self, run: Run, e: Event, state: dict[str, Any], fx: Effects) -> None:
        p = e.payload
        body = p.get("payload") or {}
        channel, thread = body.get("channel"), body.get("thread_ts")
        if not channel:
            return
        if body.get("kind") == "reminder":
            fx.messages.append(
                Message(
                    channel,
                    f"Reminder: {inert(str(body.get('text', '')))}",
                    thread,
                    priority="urgent",
                )
            )
        elif body.get("kind") == DIGEST:
            facts = self._digest(run, p, state)
            if self.quiet_digests and digest.quiet(facts):
                # Start quiet and earn attention: nothing new, nothing said. The next digest
                # that has news covers this period too.
                state["quiet"] = int(facts["periods"])  # those held quiet before, with this one
                return
            text = digest.render(facts)
            fx.messages.append(Message(channel, text, thread, kind="digest", facts=facts))
            state["stats"] = fresh_stats()
            state["since"] = run.now
            state["quiet"] = 0
            state["reported_dead"] = [e.id for e in self.store.dead_events(run.inbox)]

    # -- texts ----------------------------------------------------------------------------

    def _digest(self, run: Run, timer: Mapping[str, Any], state: dict[str, Any]) -> digest.Facts:
        """The digest's facts: held digests merge by them (core/rules/digest.py)."""
        unit = "day" if (state.get("digest") or {}).get("daily") else "period"
        channel = (timer.get("payload") or {}).get("channel")
        since = int(state.get("since") or run.now)
        reported = state.get("reported_dead") or ()
        lines = digest_lines(self.store, run.inbox, state["stats"], channel, since, reported)
        facts = digest.facts(since, lines, int(timer.get("skipped") or 0), unit)
        facts["periods"] += int(state.get("quiet") or 0)
        return facts

    def _status(self, run: Run, state: dict[str, Any]) -> str:
        return status_text(self.store, run.inbox)
