"""What Claude may do from a run: the tools it is offered, the policy of each (allow, deny, ask),
and what a call does. An `ask` call becomes an approval (`run.ask`) that ends the run; wakeful
runs the approved refund once, as a durable step keyed by the request id, and its answer (or
the expiry) comes back as an `ApprovalAnswer` that resumes the conversation with the result.
Written on the public agent API alone."""

from __future__ import annotations

import contextlib
import functools
import json
import re
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Literal

from wakeful.agents import (
    ApprovalAnswer,
    Conversation,
    Interrupted,
    InvalidInput,
    Run,
    Setup,
    Timer,
    inert,
    step_key,
    tracing,
    utc,
)
from wakeful.bot.builtin.claude_memory import (
    MEMORY_TOOL,
    kept_listing,
    memory_command,
    memory_result,
)
from wakeful.bot.builtin.common import (
    DIGEST,
    MIN_DIGEST_SECONDS,
    REFUND_TOOL,
    digest_too_often,
    refund_already,
    refund_once,
    status_text,
    zone_shown,
)
from wakeful.bot.builtin.conversation import Block, safe_id, tool_result
from wakeful.bot.builtin.gateway_tool import GATEWAY_TOOL, GATEWAY_TOOL_SPEC, gateway_get
from wakeful.bot.builtin.stripe_confirm import refunded_text

Policy = Literal["allow", "deny", "ask"]
"""`allow` runs at once; `deny` is refused without running; `ask` needs a person's yes."""
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
    GATEWAY_TOOL: GATEWAY_TOOL_SPEC,
}
NOT_RUN = (
    "Not run: the person wrote again before this tool ran; nothing was done. Read what they "
    "added, then call it again if it is still wanted."
)
NOT_ASKED = "Not asked: the person wrote again first; nothing was done."
MAX_TOOL_CALLS_PER_TURN = 10
"""Tool calls of one model turn that run (WAKEFUL_CLAUDE_MAX_TOOL_CALLS_PER_TURN); the model is
told the rest did not, so one answer cannot set a flood of timers or calls."""
DEFAULT_POLICIES: dict[str, Policy] = {
    "refund_order": "ask",
    "remind_me": "allow",
    "set_digest": "allow",
    "status": "allow",
    GATEWAY_TOOL: "allow",
}


class ToolInputError(InvalidInput):
    """The model called a tool with arguments it cannot act on; it is told so, nothing runs."""


@dataclass
class RunContext:
    """What one run knows: where its reply goes, on whose behalf, and what it has decided."""

    run: Run
    state: dict[str, Any]
    channel: str | None = None
    thread_ts: str | None = None
    user: str = ""
    urgent: bool = False
    digest_fired: bool = False
    calls: int = 0
    now: int = 0
    """The run's time; a retried run replaying its calls acts at the time they were made."""
    history_end: int = -1
    """Index of the last turn of the saved conversation in the turns sent (-1: none)."""
    ttl: str = "5m"
    """The prompt cache's TTL for this run's calls (`off`: no breakpoints)."""
    live: Any = None
    """The streamed reply (claude_live.LiveReply) when a person watches it being written."""
    interrupted: bool = False
    """The person wrote again at a tool's step: the rest of the turn's tools did not run."""
    replayed: set[str] = field(default_factory=set)
    """The tool_use ids whose step a retry read back, calling nothing (tracing only)."""

    @property
    def where(self) -> Conversation | None:
        return None if self.channel is None else Conversation(self.channel, self.thread_ts)

    @functools.cached_property
    def listing(self) -> str:
        """The memory listing every call of the run sends (claude_memory.py `kept_listing`):
        the conversation's, taken anew only when the conversation was cut or began."""
        return kept_listing(self.state, self.run.memory)


class ClaudeTools:
    """The tool side of the Claude agent (a mixin: the agent supplies these attributes)."""

    setup: Setup
    policies: dict[str, Policy]
    max_tool_calls: int = MAX_TOOL_CALLS_PER_TURN
    refunds: Any = None
    """Where a refund goes (common.refund_backend): Stripe through the gateway, or None."""

    def _use_tools(
        self, ctx: RunContext, uses: list[Block]
    ) -> tuple[list[Block], dict[str, str] | None]:
        """Run `allow` tools, refuse `deny` ones; the first `ask` one becomes an approval
        request. Every tool_use gets a result except the one awaiting its answer; past
        `max_tool_calls` in the turn, an error result, and nothing runs."""
        results: list[Block] = []
        asked: dict[str, str] | None = None
        for n, use in enumerate(uses):
            with tool_span(ctx, use):
                before = asked
                asked = self._use_one(ctx, n, use, results, asked)
                if tracing.ON:
                    waits = asked is not before
                    tracing.note({"wakeful.outcome": tool_outcome(ctx, use, results, waits)})
        if ctx.interrupted and asked is not None:  # its prompt is never posted: not asked
            for uid, request_id in asked.items():
                ctx.state["pending"].pop(request_id, None)
                results.append(tool_result(uid, NOT_ASKED, error=True))
            asked = None
        return results, asked

    def _use_one(
        self,
        ctx: RunContext,
        n: int,
        use: Block,
        results: list[Block],
        asked: dict[str, str] | None,
    ) -> dict[str, str] | None:
        """One tool_use of `_use_tools`: its result added to `results`, or the approval it
        asks for returned as `asked`."""
        uid, name = str(use["id"]), str(use["name"])
        if ctx.interrupted:
            results.append(tool_result(uid, NOT_RUN, error=True))
            return asked
        args: Mapping[str, Any] = use["input"] if isinstance(use["input"], dict) else {}
        if n >= self.max_tool_calls:
            results.append(tool_result(uid, too_many_calls(self.max_tool_calls), True))
            return asked
        if name == MEMORY_TOOL:  # no policy, no step: the run's finish writes it, once
            results.append(memory_result(ctx.run.memory, uid, args))
            return asked
        if name not in TOOL_SPECS or (name == GATEWAY_TOOL and self.setup.gateway is None):
            results.append(tool_result(uid, f"There is no tool {name!r}; nothing was done.", True))
            return asked
        policy = self.policies[name]
        if policy == "deny":
            refused = f"Refused: tool {name!r} is not permitted; nothing was done."
            results.append(tool_result(uid, refused, error=True))
            return asked
        try:
            if policy == "ask":
                if asked is not None:
                    raise ToolInputError(
                        "Not asked: one approval at a time. Ask again once the other one "
                        "is answered."
                    )
                return {uid: self._ask(ctx, name, args, uid)}
            results.append(tool_result(uid, self._run_tool(ctx, name, args, uid)))
        except ToolInputError as exc:
            results.append(tool_result(uid, str(exc), error=True))
        except Interrupted:  # before the tool's step: it did not run
            ctx.interrupted = True
            results.append(tool_result(uid, NOT_RUN, error=True))
        return asked

    def _redo(self, ctx: RunContext, turns: list[dict[str, Any]]) -> None:
        """An interrupted run's tools, carried with their results (claude_live.py), done again
        for their effects, which that run's finish never wrote (a reminder's timer): under the
        same keys, so a timer is the same timer and a refund replays its recorded step; a
        memory command changes this run's memory as it did that run's. One that did not run,
        or was not asked, or failed, stays so."""
        done = {
            b.get("tool_use_id")
            for t in turns
            if t.get("role") == "user"
            for b in t.get("content") or []
            if isinstance(b, dict) and b.get("type") == "tool_result" and not b.get("is_error")
        }
        for t in turns:
            for use in t.get("content") or [] if t.get("role") == "assistant" else []:
                uid, name = str(use.get("id")), str(use.get("name"))
                if use.get("type") != "tool_use" or uid not in done:
                    continue
                args = use["input"] if isinstance(use.get("input"), dict) else {}
                if name == MEMORY_TOOL:
                    memory_command(ctx.run.memory, args)
                elif name in TOOL_SPECS and self.policies.get(name) == "allow":
                    with contextlib.suppress(ToolInputError):
                        self._run_tool(ctx, name, args, uid)

    def _run_tool(self, ctx: RunContext, name: str, args: Mapping[str, Any], uid: str) -> str:
        """An `allow` tool, now. The refund, allowed without a yes, runs as a durable step
        keyed by the run's first event and the tool_use id: a retried run does not repeat it."""
        key = f"{ctx.run.events[0].id}-{safe_id(uid)}"
        if name == REFUND_TOOL:
            order, _ = refund_args(args)
            step, called = f"{REFUND_TOOL}:{safe_id(uid)}", list[str]()

            def refund(idempotency_key: str) -> Any:
                called.append(idempotency_key)
                return self._refund_tool(dict(args), idempotency_key)

            result = ctx.run.step(step, refund, cause=ctx.run.events[0])
            if tracing.ON:
                ctx.replayed.update([] if called else [uid])
                made = step_key(ctx.run.inbox, ctx.run.events[0], step)
                tracing.note({"wakeful.idempotency_key": made})
            return refund_text(order, result)
        if name == "remind_me":
            tracing.note({"wakeful.idempotency_key": f"remind-{key}"})  # the timer's name
            return self._remind(ctx, args, key)
        if name == "set_digest":
            return self._set_digest(ctx, args)
        if name == GATEWAY_TOOL:
            return gateway_get(self.setup.gateway, args, ToolInputError)
        return status_text(self.setup.query, ctx.run.inbox)

    def _ask(self, ctx: RunContext, tool: str, args: Mapping[str, Any], tool_use_id: str) -> str:
        """Turn an `ask` call into an approval request; return the request id.

        The id comes from the batch's first event and the tool_use id, so a retried run asks
        under the same id and the store keeps one approval, one prompt, one expiry."""
        order, reason = refund_args(args)
        if already := refund_already(self.setup.query, order, (), ctx.run.now):
            raise ToolInputError(already)
        where = ctx.where
        if where is None:
            raise ToolInputError("There is no conversation to ask for approval in.")
        request_id = f"claude-{ctx.run.events[0].id}-{safe_id(tool_use_id)}"
        tracing.note({"wakeful.idempotency_key": request_id})  # the approval's, and its step's
        summary = f"refund order {inert(order)}" + (f" ({inert(reason)})" if reason else "")
        call_args = {"order_id": order, "reason": reason}
        asked = ctx.run.ask(
            tool, call_args, summary=summary, to=where, requester=ctx.user, id=request_id
        )
        if asked is None:
            note = ctx.run.not_asked_note() or "Not asked: too many approvals."
            raise ToolInputError(f"{note} Nothing was done; tell the person.")
        ctx.state["pending"][request_id] = {
            "tool_use_id": tool_use_id,
            "tool": tool,
            "args": call_args,
            "channel": where.channel,
            "thread_ts": where.thread_ts,
        }
        return request_id

    def _answered(self, ctx: RunContext, e: ApprovalAnswer) -> tuple[str, bool]:
        """An approval's answer or expiry (on yes wakeful already ran the tool, once): what
        the model is told."""
        stats = ctx.state["stats"]
        ctx.state["pending"].pop(e.request_id, None)
        who = e.by
        if e.answer == "yes":
            stats["approved"] += 1
            if e.error and self._denied(e.tool):
                why = f"tool {e.tool!r} is not permitted"
                ok, text = False, f"Approved by <@{who}>, but refused: {why}; nothing was done."
            elif e.error:
                # The call failed for good or was given up: the person must hear it was not
                # done and why (wakeful says it itself if the reply does not).
                ok, text = (
                    False,
                    f"Approved by <@{who}>, but not done: {e.error}. Nothing was done; tell "
                    "the person it was not done and why.",
                )
            elif isinstance(e.result, dict) and e.result.get("refunded") is False:
                already = e.result.get("already")
                ok, text = False, f"Approved by <@{who}>, but refused: {already}; nothing was done."
            else:
                order = str((e.args or {}).get("order_id", "?"))
                ok, text = True, f"Approved by <@{who}>. {refund_text(order, e.result)}"
                stats["refunds"] += 1 if e.tool == REFUND_TOOL else 0
        elif e.answer == "no":
            ok, text = (
                False,
                f"Denied by <@{who}>: the {e.tool} call did not run; nothing was done.",
            )
            stats["denied"] += 1
        else:
            ok, text = False, f"The approval request expired unanswered: {e.tool} did not run."
            stats["expired"] += 1
        return text, ok

    def _denied(self, tool: str) -> bool:
        return self.policies.get(tool) == "deny"

    def _refund_tool(self, args: Any, key: str) -> Any:
        """The refund, run once per request id (and once per order, whoever asks)."""
        order, _ = refund_args(args if isinstance(args, Mapping) else {})
        return refund_once(self.setup.steps, self.setup.query, order, key, self.refunds)

    def _remind(self, ctx: RunContext, args: Mapping[str, Any], key: str) -> str:
        text = args.get("text")
        seconds = args.get("in_seconds")
        if not isinstance(text, str) or not text.strip() or len(text) > 1000:
            raise ToolInputError("remind_me needs a text of 1 to 1000 characters.")
        if not isinstance(seconds, int) or isinstance(seconds, bool):
            raise ToolInputError("remind_me needs in_seconds as a whole number.")
        if not 1 <= seconds <= 31_536_000:
            raise ToolInputError("in_seconds must be between 1 and 31536000 (a year).")
        where = ctx.where
        if where is None:
            raise ToolInputError("There is no conversation to post the reminder in.")
        at = ctx.now + seconds
        data = {"kind": "reminder", "text": text.strip()}
        _capped(ctx, ctx.run.set_timer(Timer.once(f"remind-{key}", at, data), to=where))
        return f"Reminder set for {utc(at)}."

    def _set_digest(self, ctx: RunContext, args: Mapping[str, Any]) -> str:
        mode = args.get("mode")
        if mode == "off":
            ctx.run.cancel_timer(DIGEST)
            ctx.state["digest"] = None
            return "Digest off."
        where = ctx.where
        if where is None:
            raise ToolInputError("There is no conversation to post the digest in.")
        data = {"kind": DIGEST}
        if mode == "every":
            every = args.get("every_seconds")
            if not isinstance(every, int) or isinstance(every, bool):
                raise ToolInputError("every_seconds must be a whole number.")
            if too_often := digest_too_often(every, self.setup.settings.min_digest_period):
                raise ToolInputError(too_often)
            _capped(
                ctx, ctx.run.set_timer(Timer.every(DIGEST, every, ctx.now + every, data), to=where)
            )
            ctx.state["digest"] = {"every": every}
            return f"Digest set: every {every} seconds, first at {utc(ctx.now + every)}."
        if mode == "daily":
            at = str(args.get("daily_at") or "")
            if not _HHMM.match(at):
                raise ToolInputError("daily_at must be HH:MM on a 24-hour clock.")
            zone = self.setup.time_zone(ctx.user)
            shown = zone_shown(zone, "ask again later to use it")
            _capped(ctx, ctx.run.set_timer(Timer.daily(DIGEST, at, zone.name, data), to=where))
            ctx.state["digest"] = {"daily": at, "tz": zone.name}
            return f"Digest set: daily at {at} ({shown})."
        raise ToolInputError("mode must be 'every', 'daily' or 'off'.")


def tool_span(ctx: RunContext, use: Block) -> AbstractContextManager[None]:
    """A tool call's `execute_tool <tool>` span (OpenTelemetry's GenAI conventions); its
    arguments, which may quote the person, only with WAKEFUL_OTEL_CONTENT=on."""
    if not tracing.ON:
        return tracing.NOOP
    name = str(use.get("name"))
    known = name if name in TOOL_SPECS or name == MEMORY_TOOL else None
    attrs = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": str(use.get("id")),
        "gen_ai.conversation.id": ctx.run.inbox,
        **tracing.content("gen_ai.tool.call.arguments", json.dumps(use.get("input"), default=str)),
    }
    return tracing.span("execute_tool" + (f" {known}" if known else ""), attrs)


def tool_outcome(ctx: RunContext, use: Block, results: list[Block], waits: bool) -> str:
    """What a tool_use came to: `waiting` (an approval asked), `failed` (its result an
    error), `replayed` (a retry read its step back) or `done`."""
    if waits:
        return "waiting"
    uid = str(use.get("id"))
    mine = [r for r in results if r.get("tool_use_id") == uid]
    if not mine or mine[-1].get("is_error"):
        return "failed"
    return "replayed" if uid in ctx.replayed else "done"


def max_tool_calls(setting: str) -> int:
    """WAKEFUL_CLAUDE_MAX_TOOL_CALLS_PER_TURN, checked: a whole number from 1 to 100 (default
    10)."""
    raw = setting.strip()
    if not raw:
        return MAX_TOOL_CALLS_PER_TURN
    if not raw.isdigit() or not 1 <= int(raw) <= 100:
        raise InvalidInput(
            f"WAKEFUL_CLAUDE_MAX_TOOL_CALLS_PER_TURN must be a whole number from 1 to 100, "
            f"got {setting!r}"
        )
    return int(raw)


def too_many_calls(cap: int) -> str:
    """What the model is told of each tool call past the cap of one turn."""
    return (
        f"Not run: at most {cap} tool calls per turn (WAKEFUL_CLAUDE_MAX_TOOL_CALLS_PER_TURN); "
        "nothing was done for this one. Tell the person what was not done."
    )


def _capped(ctx: RunContext, set_: bool) -> None:
    """A timer the cap refused (WAKEFUL_MAX_TIMERS_PER_INBOX): the model is told why, and
    tells the person (wakeful does not say it again)."""
    if not set_:
        note = ctx.run.not_set_note() or "Not set: too many timers."
        raise ToolInputError(f"{note} Nothing was done; tell the person.")


def refund_text(order: str, result: Any) -> str:
    """What the model is told a refund came to."""
    if isinstance(result, dict) and result.get("refunded") is False:
        raise ToolInputError(str(result.get("already") or result.get("why")))
    if isinstance(result, dict) and result.get("via") == "stripe":
        return refunded_text(order, result)
    return f"Refunded order {order}."


def refund_args(args: Mapping[str, Any]) -> tuple[str, str]:
    order = str(args.get("order_id") or "").strip().lstrip("#")
    if not _ORDER_ID.match(order):
        raise ToolInputError(
            "order_id must be 1 to 64 letters, digits, '-' or '_' (e.g. A-7); nothing was done."
        )
    reason = " ".join(str(args.get("reason") or "").split())[:300]
    return order, reason
