"""What Claude may do from a run: the tools it is offered, the policy of each (allow, deny, ask),
and what a call does. An `ask` call becomes an approval request that ends the run; its answer
or expiry comes back as an inbox event and resumes the conversation with the tool's result."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from wakeful.bot import blocks
from wakeful.bot.agents.common import (
    DIGEST,
    MIN_DIGEST_SECONDS,
    TzLookup,
    approval_prompt,
    digest_too_often,
    outcome_update,
    refund_already,
    refund_once,
    status_text,
    user_zone,
)
from wakeful.bot.agents.conversation import Block, safe_id, tool_result
from wakeful.bot.slack_text import inert
from wakeful.core.agent import Policy, Run, Tool, Toolbox, ToolResult
from wakeful.core.effects import ApprovalRequest, Effects, Priority, Timer
from wakeful.core.errors import InvalidInput
from wakeful.core.rules.approvals import ApprovalBudget
from wakeful.core.store import Store

_ORDER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_HHMM = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")

TOOL_SPECS: dict[str, dict[str, Any]] = {
    "refund_order": {
        "description": "Refund a customer's order. Needs a person's approval before it runs.",
        "input_schema": {
            "type": "object",
            "properties": {
                "order_id": {"type": "string", "description": "The order id, e.g. A-7 or 9001."},
                "reason": {"type": "string", "description": "Why, in a few words."},
            },
            "required": ["order_id", "reason"],
        },
    },
    "remind_me": {
        "description": "Post a reminder in this conversation after a delay.",
        "input_schema": {
            "type": "object",
            "properties": {
                "text": {"type": "string", "description": "What to remind the person of."},
                "in_seconds": {"type": "integer", "minimum": 1, "maximum": 31_536_000},
            },
            "required": ["text", "in_seconds"],
        },
    },
    "set_digest": {
        "description": (
            "Schedule a recurring digest of activity in this conversation (every N seconds, "
            "or daily at HH:MM in the person's time zone), or turn it off."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "mode": {"type": "string", "enum": ["every", "daily", "off"]},
                "every_seconds": {"type": "integer", "minimum": MIN_DIGEST_SECONDS},
                "daily_at": {"type": "string", "description": "HH:MM, 24-hour clock."},
            },
            "required": ["mode"],
        },
    },
    "status": {
        "description": "Pending and dead events, open approvals and the next digest.",
        "input_schema": {"type": "object", "properties": {}},
    },
}
DEFAULT_POLICIES: dict[str, Policy] = {
    "refund_order": "ask",
    "remind_me": "allow",
    "set_digest": "allow",
    "status": "allow",
}


class ToolInputError(InvalidInput):
    """The model called a tool with arguments it cannot act on; it is told so, nothing runs."""


@dataclass
class RunContext:
    """What one run knows: where its reply goes, on whose behalf, and what it has decided."""

    run: Run
    state: dict[str, Any]
    fx: Effects
    channel: str | None = None
    thread_ts: str | None = None
    user: str = ""
    priority: Priority = "normal"
    digest_fired: bool = False
    calls: int = 0
    usage: list[int] = field(default_factory=lambda: [0, 0])
    budget: ApprovalBudget | None = None
    """The approval caps (read at the first ask of the run)."""


class ClaudeTools:
    """The tool side of the Claude agent (a mixin: the agent supplies these attributes)."""

    store: Store
    policies: dict[str, Policy]
    approval_ttl: int
    approvers: tuple[str, ...]
    tz_lookup: TzLookup

    def _toolbox(self, ctx: RunContext) -> Toolbox:
        fns: dict[str, Callable[[Mapping[str, Any], str], Any]] = {
            "refund_order": lambda args, key: self._refund(ctx, args, key),
            "remind_me": lambda args, key: self._remind(ctx, args, key),
            "set_digest": lambda args, key: self._set_digest(ctx, args),
            "status": lambda args, key: self._status(ctx),
        }
        return Toolbox(
            [Tool(n, self.policies[n], fns[n], TOOL_SPECS[n]["description"]) for n in TOOL_SPECS]
        )

    def _use_tools(
        self, ctx: RunContext, uses: list[Block]
    ) -> tuple[list[Block], dict[str, str] | None]:
        """Run `allow` tools, refuse `deny` ones; the first `ask` one becomes an approval
        request. Every tool_use gets a result except the one awaiting its answer."""
        box = self._toolbox(ctx)
        results: list[Block] = []
        asked: dict[str, str] | None = None
        for use in uses:
            uid, name = str(use["id"]), str(use["name"])
            args: Mapping[str, Any] = use["input"] if isinstance(use["input"], dict) else {}
            if name not in box:
                results.append(
                    tool_result(uid, f"There is no tool {name!r}; nothing was done.", True)
                )
                continue
            key = f"{ctx.run.events[0].id}-{safe_id(uid)}"
            try:
                outcome = box.call(name, args, key)
                if outcome.status == "needs_approval":
                    if asked is not None:
                        raise ToolInputError(
                            "Not asked: one approval at a time. Ask again once the other one "
                            "is answered."
                        )
                    asked = {uid: self._ask(ctx, name, args, uid)}
                    continue
            except ToolInputError as exc:
                results.append(tool_result(uid, str(exc), error=True))
                continue
            if outcome.status == "refused":
                results.append(
                    tool_result(uid, f"Refused: {outcome.value}; nothing was done.", error=True)
                )
            else:
                results.append(tool_result(uid, str(outcome.value)))
        return results, asked

    def _ask(self, ctx: RunContext, tool: str, args: Mapping[str, Any], tool_use_id: str) -> str:
        """Turn an `ask` call into an approval request; return the request id.

        The id comes from the batch's first event and the tool_use id, so a retried run asks
        under the same id and the store keeps one approval, one prompt, one expiry."""
        order, reason = refund_args(args)
        asking = [(a.id, a.args) for a in ctx.fx.approvals]
        if already := refund_already(self.store, order, asking, ctx.run.now):
            raise ToolInputError(already)
        if ctx.channel is None:
            raise ToolInputError("There is no conversation to ask for approval in.")
        if ctx.budget is None:
            ctx.budget = self.store.approval_budget(ctx.run.inbox)
        if not ctx.budget.take():
            raise ToolInputError(f"{ctx.budget.note(1)} Nothing was done; tell the person.")
        request_id = f"claude-{ctx.run.events[0].id}-{safe_id(tool_use_id)}"
        summary = f"refund order {inert(order)}" + (f" ({inert(reason)})" if reason else "")
        deadline = ctx.run.now + self.approval_ttl
        prompt = approval_prompt(
            ctx.channel, ctx.thread_ts, request_id, summary, ctx.user, deadline
        )
        call_args = {"order_id": order, "reason": reason}
        ctx.fx.approvals.append(
            ApprovalRequest(
                id=request_id,
                tool=tool,
                args=call_args,
                requester=ctx.user,
                approvers=self.approvers,
                deadline=deadline,
                prompt=prompt,
            )
        )
        ctx.state["pending"][request_id] = {
            "tool_use_id": tool_use_id,
            "tool": tool,
            "args": call_args,
            "channel": ctx.channel,
            "thread_ts": ctx.thread_ts,
            "summary": summary,
        }
        return request_id

    def _answered(self, ctx: RunContext, p: Mapping[str, Any]) -> tuple[str, bool]:
        """An approval's answer or expiry: on yes run the tool under the request id (so a
        retried run acts once), rewrite the prompt, and return what the model is told."""
        request_id = str(p.get("approval"))
        stats = ctx.state["stats"]
        note: dict[str, Any] = ctx.state["pending"].pop(request_id, None) or {
            "tool": p.get("tool"),
            "args": p.get("args") if isinstance(p.get("args"), dict) else {},
            "channel": ctx.channel,
            "thread_ts": ctx.thread_ts,
            "summary": inert(f"{p.get('tool')} {json.dumps(p.get('args'))}"),
        }
        tool, answer, who = str(note["tool"]), p.get("answer"), p.get("user")
        if answer == "yes":
            try:
                outcome = self._toolbox(ctx).run_approved(tool, note["args"], request_id)
            except ToolInputError as exc:
                outcome = ToolResult("refused", str(exc))
            ok = outcome.status == "ran"
            text = (
                f"Approved by <@{who}>. {outcome.value}"
                if ok
                else f"Approved by <@{who}>, but refused: {outcome.value}; nothing was done."
            )
            stats["approved"] += 1
            stats["refunds"] += 1 if ok and tool == "refund_order" else 0
        elif answer == "no":
            ok, text = False, f"Denied by <@{who}>: the {tool} call did not run; nothing was done."
            stats["denied"] += 1
        else:
            ok, text = False, f"The approval request expired unanswered: {tool} did not run."
            stats["expired"] += 1
        if note.get("channel"):
            ctx.fx.messages.append(
                outcome_update(
                    note["channel"],
                    note.get("thread_ts"),
                    request_id,
                    note["summary"],
                    str(answer),
                    who,
                    p.get("answered_at"),
                )
            )
        return text, ok

    def _refund(self, ctx: RunContext, args: Mapping[str, Any], key: str) -> str:
        """Runs only after a yes, with the request id as `key`: recorded once, so a retried
        run never refunds twice."""
        order, reason = refund_args(args)
        call_args = {"order_id": order, "reason": reason}
        first, already = refund_once(self.store, order, key, call_args, ctx.run.inbox, ctx.run.now)
        if already is not None:
            raise ToolInputError(already)
        if first:
            return f"Refunded order {order}."
        return f"Refunded order {order} (already recorded under request {key}; not repeated)."

    def _remind(self, ctx: RunContext, args: Mapping[str, Any], key: str) -> str:
        text = args.get("text")
        seconds = args.get("in_seconds")
        if not isinstance(text, str) or not text.strip() or len(text) > 1000:
            raise ToolInputError("remind_me needs a text of 1 to 1000 characters.")
        if not isinstance(seconds, int) or isinstance(seconds, bool):
            raise ToolInputError("remind_me needs in_seconds as a whole number.")
        if not 1 <= seconds <= 31_536_000:
            raise ToolInputError("in_seconds must be between 1 and 31536000 (a year).")
        if ctx.channel is None:
            raise ToolInputError("There is no conversation to post the reminder in.")
        at = ctx.run.now + seconds
        payload = {
            "kind": "reminder",
            "text": text.strip(),
            "channel": ctx.channel,
            "thread_ts": ctx.thread_ts,
        }
        ctx.fx.timers.append(Timer.once(f"remind-{key}", at, payload))
        return f"Reminder set for {blocks.utc(at)}."

    def _set_digest(self, ctx: RunContext, args: Mapping[str, Any]) -> str:
        mode = args.get("mode")
        if mode == "off":
            ctx.fx.cancel_timers.append(DIGEST)
            ctx.state["digest"] = None
            return "Digest off."
        if ctx.channel is None:
            raise ToolInputError("There is no conversation to post the digest in.")
        payload = {"kind": DIGEST, "channel": ctx.channel, "thread_ts": ctx.thread_ts}
        if mode == "every":
            every = args.get("every_seconds")
            if not isinstance(every, int) or isinstance(every, bool):
                raise ToolInputError("every_seconds must be a whole number.")
            if too_often := digest_too_often(every):
                raise ToolInputError(too_often)
            ctx.fx.timers.append(Timer.every(DIGEST, every, ctx.run.now + every, payload))
            ctx.state["digest"] = {"every": every}
            return f"Digest set: every {every} seconds, first at {blocks.utc(ctx.run.now + every)}."
        if mode == "daily":
            at = str(args.get("daily_at") or "")
            if not _HHMM.match(at):
                raise ToolInputError("daily_at must be HH:MM on a 24-hour clock.")
            tz, shown = user_zone(self.tz_lookup, ctx.user, "ask again later to use it")
            ctx.fx.timers.append(Timer.daily(DIGEST, at, tz, payload))
            ctx.state["digest"] = {"daily": at, "tz": tz}
            return f"Digest set: daily at {at} ({shown})."
        raise ToolInputError("mode must be 'every', 'daily' or 'off'.")

    def _status(self, ctx: RunContext) -> str:
        return status_text(self.store, ctx.run.inbox)


def refund_args(args: Mapping[str, Any]) -> tuple[str, str]:
    order = str(args.get("order_id") or "").strip().lstrip("#")
    if not _ORDER_ID.match(order):
        raise ToolInputError(
            "order_id must be 1 to 64 letters, digits, '-' or '_' (e.g. A-7); nothing was done."
        )
    reason = " ".join(str(args.get("reason") or "").split())[:300]
    return order, reason
