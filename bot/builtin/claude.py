"""`claude`: Claude behind the same inbox, with tools, permissions, deferred approvals and
durable session memory.

One run is one claimed batch: everything in it goes to the model as one user turn after the
saved conversation; the model may call tools in a loop, and what it writes is the reply,
streamed into Slack as it comes when a person's message is answered (claude_live.py: also the
stop button, and a person writing again mid-run), else one outbox message. An `ask` tool ends
the run: the conversation is saved mid-call and the answer (or the expiry) comes back as an
event that resumes it. The conversation lives in the session `finish` writes (a worker that
lost its lease cannot write it). Each model call is a durable step with prompt-cache
breakpoints (claude_calls.py): a retry replays the answers it paid for.
This module and claude_calls.py alone import `anthropic`; loaded only for WAKEFUL_AGENT=claude.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import anthropic

from wakeful.agents import (
    Agent,
    ApprovalAnswer,
    Command,
    Conversation,
    Event,
    Feedback,
    Interrupted,
    InvalidInput,
    Message,
    Run,
    Setup,
    SpendBudget,
    TimerTick,
    Tool,
    Unknown,
    WebhookDelivery,
    feedback_blocks,
    inert,
    utc,
)
from wakeful.bot.builtin.claude_calls import (
    DIGEST_LONG_TTL,
    BudgetSpent,
    ModelCaller,
    ModelUnavailable,
    StoppedByUser,
    cache_ttl,
    log_usage,
)
from wakeful.bot.builtin.claude_live import keep_carry, live_reply, pending_turn, stopped
from wakeful.bot.builtin.claude_memory import cut_or_note
from wakeful.bot.builtin.claude_prices import DEFAULT_BUDGET, Price, price_of, prices, spend_budget
from wakeful.bot.builtin.claude_prompt import (
    CUT_OFF_LINE,
    REFUSED_LINE,
    SYSTEM_PROMPT,
    TOO_MANY_STEPS_LINE,
    feedback_note,
    note_feedback,
    over_budget_line,
    slack_block,
)
from wakeful.bot.builtin.claude_tools import (
    DEFAULT_POLICIES,
    MAX_TOOL_CALLS_PER_TURN,
    TOOL_SPECS,
    ClaudeTools,
    Policy,
    RunContext,
    max_tool_calls,
)
from wakeful.bot.builtin.common import (
    DIGEST,
    REFUND_TOOL,
    digest_facts,
    fresh_stats,
    outage_note,
    refund_backend,
)
from wakeful.bot.builtin.conversation import (
    NO_REPLY,
    Block,
    Turn,
    assistant_content,
    final_text,
    label_attrs,
    load_session,
    neutralise,
    strip_old_thinking,
    text_block,
    tool_result,
    trim_history,
    webhook_view,
)
from wakeful.bot.builtin.gateway_tool import GATEWAY_TOOL
from wakeful.bot.builtin.stripe_confirm import confirmation

log = logging.getLogger("wakeful")

DEFAULT_MODEL = "claude-sonnet-5"
"""The current Sonnet: fast and cheap enough to wake for every batch. WAKEFUL_MODEL overrides."""
TOKEN_BUDGET = 12_000
"""Saved conversation kept per inbox, in approximate tokens (characters / 4)."""
TRIM_TO = 8_000
"""Past TOKEN_BUDGET the oldest turns go at once until this much is left: the saved
conversation then stays the same prefix (read from the prompt cache) for several turns,
instead of changing at its start, and missing the cache, on every turn at the cap."""
MAX_TOKENS = 4096
"""Output cap of one model call; room for adaptive thinking plus a short Slack answer."""
MAX_STEPS = 8
"""Model calls per run; a loop of tool calls stops here instead of running up a bill."""


MODEL_EVENTS = (Message, Command, ApprovalAnswer, TimerTick, WebhookDelivery, Unknown)
"""What becomes part of the model's turn; surface events (the Home tab opened, an assistant
thread started) are wakeful's to answer, and cost no model call. Feedback on a reply costs none
either: it is counted for the digest and told to the model with the next turn."""


class ClaudeAgent(Agent, ClaudeTools):
    """Claude as a wakeful agent. `policies` overrides a tool's allow / deny / ask."""

    greeting = "Hi, I'm Claude, working through wakeful. Ask me anything; I ask before refunds."
    suggested_prompts = (
        ("Status", "What is waiting for me?"),
        ("A reminder", "Remind me in 10 minutes to stretch"),
        ("Daily digest", "Send me a digest every day at 09:00"),
    )
    thinking_status = True
    on_new_message = "interrupt"
    """A person who adds to what they wrote while Claude works gets one answer to all of it."""
    loading_messages = (
        "Reading what you wrote…",
        "Looking at your inbox…",
        "Thinking it over…",
        "Writing the answer…",
    )

    def __init__(
        self,
        setup: Setup,
        *,
        api_key: str,
        model: str = DEFAULT_MODEL,
        base_url: str | None = None,
        policies: Mapping[str, Policy] | None = None,
        token_budget: int = TOKEN_BUDGET,
        trim_to: int | None = None,
        max_tokens: int = MAX_TOKENS,
        max_steps: int = MAX_STEPS,
        timeout: float = 90.0,
        cache: str = "5m",
        price_table: Mapping[str, Price] | None = None,
        client: anthropic.Anthropic | None = None,
        max_tool_calls: int = MAX_TOOL_CALLS_PER_TURN,
        budget: SpendBudget = DEFAULT_BUDGET,
        stream_replies: bool = True,
    ) -> None:
        self.setup = setup
        self.stream_replies = stream_replies
        """Replies to a person's message stream into Slack as the model writes them."""
        self.model = model
        self.policies: dict[str, Policy] = {**DEFAULT_POLICIES, **(policies or {})}
        unknown = set(self.policies) - set(TOOL_SPECS)
        if unknown:
            raise ValueError(f"no such tool: {', '.join(sorted(unknown))}")
        self.token_budget = token_budget
        cut = token_budget * TRIM_TO // TOKEN_BUDGET if trim_to is None else trim_to
        self.trim_to = min(token_budget, cut)
        self.max_tokens = max_tokens
        self.max_steps = max_steps
        if not isinstance(max_tool_calls, int) or max_tool_calls < 1:
            raise ValueError(f"max_tool_calls must be a whole number >= 1, got {max_tool_calls!r}")
        self.max_tool_calls = max_tool_calls
        self.timeout = timeout
        self.cache = cache_ttl(cache)
        # max_retries=0: a failed call fails the run, and the engine's backoff and attempt
        # count do the retrying, visibly, instead of a hidden loop inside one run.
        self.client = client or anthropic.Anthropic(
            api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout
        )
        self.refunds = refund_backend(setup)
        offered = [n for n in TOOL_SPECS if n != GATEWAY_TOOL or setup.gateway is not None]
        self.tool_specs = [self._spec(name) for name in offered]
        table = prices() if price_table is None else dict(price_table)
        self.caller = ModelCaller(
            self.client,
            model,
            max_tokens,
            timeout,
            SYSTEM_PROMPT,
            self.tool_specs,
            price_of(table, model),
            budget,
        )
        if self.caller.price is None:
            log.warning("claude: no price for model %s; its cost is counted as unknown", model)
        # A denied tool is not offered to the engine either: an approval asked before the
        # policy became `deny` and answered yes after runs nothing.
        refund = Tool(REFUND_TOOL, self._refund_tool, TOOL_SPECS[REFUND_TOOL]["description"])
        self.tools = [refund] if self.policies[REFUND_TOOL] != "deny" else []

    def close(self) -> None:
        self.client.close()

    def _spec(self, name: str) -> dict[str, Any]:
        spec = {"name": name, **copy.deepcopy(TOOL_SPECS[name])}
        if name == "set_digest":  # the period's floor is a setting (WAKEFUL_MIN_DIGEST_PERIOD)
            every = spec["input_schema"]["properties"]["every_seconds"]
            every["minimum"] = self.setup.settings.min_digest_period
        if self.policies[name] == "deny":
            spec["description"] += " Disabled here: a call is refused and nothing runs."
        return spec

    # -- the run ----------------------------------------------------------------------------

    def run(self, run: Run) -> None:
        feedback = [e for e in run.events if isinstance(e, Feedback)]
        for e in run.events:  # Stripe confirming a refund: said where it was asked, no model
            said = (
                confirmation(run.query, self.setup.steps, e)
                if isinstance(e, WebhookDelivery)
                else None
            )
            if said is not None:
                run.reply(said[1], to=said[0], urgent=False)
        if not any(isinstance(e, MODEL_EVENTS) for e in run.events):
            if feedback:  # counted for the digest, told to the model with the next turn
                state = load_session(run.session, run.now)
                note_feedback(state, feedback)
                run.save(state)
            return  # only surface events: nothing for the model
        ctx = RunContext(run, load_session(run.session, run.now), now=run.now)
        note_feedback(ctx.state, feedback)
        self._route(ctx)
        ctx.history_end = len(ctx.state["messages"]) - 1
        ctx.live = live_reply(run) if self.stream_replies else None
        pending = pending_turn(ctx, self._user_turn, self._redo)
        ctx.ttl = self._ttl(ctx)
        try:
            self._loop(ctx, pending)
        except Interrupted:  # the person wrote again: the next run starts from here
            keep_carry(run, ctx.state["messages"], ctx.history_end)
            raise
        ctx.state["messages"] = trim_history(
            strip_old_thinking(ctx.state["messages"]), self.token_budget, self.trim_to
        )
        if ctx.digest_fired:
            ctx.state["stats"], ctx.state["since"] = fresh_stats(), ctx.now
        run.save(ctx.state)
        log_usage(run)

    def _ttl(self, ctx: RunContext) -> str:
        """The run's cache TTL: the setting's, or `1h` for a digest that fires again within
        the hour (it reads what this one writes)."""
        if self.cache == "off":
            return "off"
        every = (ctx.state.get("digest") or {}).get("every")
        if ctx.digest_fired and isinstance(every, int) and every <= DIGEST_LONG_TTL:
            return "1h"
        return self.cache

    def _route(self, ctx: RunContext) -> None:
        """Where the reply goes and how urgent it is: the latest person's message wins; else
        the conversation the approval or timer belongs to; else the last one used."""
        state, urgent = ctx.state, False
        for e in ctx.run.events:
            if isinstance(e, Message | Command):
                where = e.reply_to
                ctx.channel, ctx.thread_ts = where.channel, where.thread_ts
                ctx.user = e.user or ctx.user
                state["home"] = {"channel": ctx.channel, "thread_ts": ctx.thread_ts}
                urgent = True
            elif isinstance(e, ApprovalAnswer):
                note = state["pending"].get(e.request_id) or {}
                if ctx.channel is None:
                    if e.channel:
                        ctx.channel, ctx.thread_ts = e.channel, e.thread_ts
                    elif note:
                        ctx.channel, ctx.thread_ts = note.get("channel"), note.get("thread_ts")
                urgent = True  # it answers a person's click
            elif isinstance(e, TimerTick):
                data = e.data if isinstance(e.data, dict) else {}
                if ctx.channel is None and e.channel:
                    ctx.channel, ctx.thread_ts = e.channel, e.thread_ts
                urgent = urgent or data.get("kind") == "reminder"  # late is useless
            elif isinstance(e, WebhookDelivery) and ctx.channel is None:
                # The conversation the source reports to; normal priority, so a burst of
                # deliveries is paced like a digest.
                ctx.channel, ctx.thread_ts = e.channel, None
        home = state.get("home") or {}
        if ctx.channel is None and home.get("channel"):
            ctx.channel, ctx.thread_ts = home["channel"], home.get("thread_ts")
        if not ctx.user:
            ctx.user = ctx.run.inbox.user or ""  # a conversation's inbox has no person
        ctx.urgent = urgent

    def _user_turn(self, ctx: RunContext, events: Sequence[Event]) -> list[Block]:
        """The batch as one user turn: tool results that complete a saved tool call first (the
        API requires them right after their tool_use), then one labelled block per event."""
        run, state = ctx.run, ctx.state
        open_call = state.pop("open", None) or {}
        awaiting: dict[str, str] = dict(open_call.get("awaiting") or {})
        lead: list[Block] = list(open_call.get("results") or [])
        said = any(isinstance(e, Message | Command) for e in events)
        zone = self.setup.time_zone(ctx.user) if said else None
        tz = zone.name if zone is not None and zone.known else None  # UTC standing in: not said
        body: list[Block] = [
            text_block(f"<wakeful_run{label_attrs(now=utc(run.now), user_tz=tz)} />"),
        ]
        if notes := state.get("feedback"):
            body.append(text_block("\n".join(feedback_note(n) for n in notes)))
            state["feedback"] = []
        for e in events:
            if isinstance(e, Message | Command):
                state["stats"]["messages"] += 1
                body.append(text_block(slack_block(e)))
            elif isinstance(e, ApprovalAnswer):
                note = state["pending"].get(e.request_id) or {}
                outcome, ok = self._answered(ctx, e)
                tool_use_id = note.get("tool_use_id")
                if tool_use_id and awaiting.pop(tool_use_id, None) == e.request_id:
                    lead.append(tool_result(tool_use_id, outcome, error=not ok))
                else:
                    attrs = label_attrs(request=e.request_id, tool=e.tool, answer=e.answer)
                    body.append(
                        text_block(f"<wakeful_approval{attrs}>{outcome}</wakeful_approval>")
                    )
            elif isinstance(e, TimerTick):
                body.append(text_block(self._timer_block(ctx, e)))
            elif isinstance(e, WebhookDelivery | Unknown):
                # A webhook's body alone, trimmed of noise: its source, id and type sit in the
                # label, where the cut of a long body cannot take them away.
                if isinstance(e, WebhookDelivery):
                    view = webhook_view(e.source, e.body)
                    payload, kind = json.dumps(view, ensure_ascii=False), e.type
                else:
                    payload = json.dumps(e.payload, ensure_ascii=False, sort_keys=True)
                    kind = None
                attrs = label_attrs(source=e.source, id=e.key, type=kind)
                body.append(
                    text_block(
                        f"<untrusted_webhook_payload{attrs}>\n{neutralise(payload)}\n"
                        "</untrusted_webhook_payload>"
                    )
                )
        for tool_use_id, request_id in awaiting.items():
            # Other events came before the answer: the call cannot stay open (the API needs
            # its result now), so it says so, and the answer will arrive later as a note.
            lead.append(
                tool_result(
                    tool_use_id,
                    f"Waiting for approval (request {request_id}); the answer will arrive "
                    "later as a wakeful_approval note.",
                )
            )
        return lead + body

    def _timer_block(self, ctx: RunContext, e: TimerTick) -> str:
        data = e.data if isinstance(e.data, dict) else {}
        kind = data.get("kind") or "timer"
        attrs = label_attrs(
            kind=kind,
            name=e.name,
            scheduled_for=utc(e.scheduled_for or ctx.run.now),
            late_by=f"{e.late_by}s",
        )
        if kind == "reminder":
            text = neutralise(str(data.get("text") or ""))
            inner = (
                "A reminder you set is due: remind the person now. Its text, quoted from their "
                f"earlier request:\n<untrusted_reminder_text>{text}</untrusted_reminder_text>"
            )
        elif kind == DIGEST:
            ctx.digest_fired = True
            inner = (
                "Time for the digest: summarise these facts for the person in a few lines.\n"
                + self._digest_facts(ctx, e.skipped, e.channel)
            )
        else:
            inner = "A timer fired."
        return f"<wakeful_timer{attrs}>\n{inner}\n</wakeful_timer>"

    def _loop(self, ctx: RunContext, pending: Turn) -> None:
        """Call the model until it answers, runs out of steps, or needs a person's yes. Each
        call is a durable step: a retried run replays the answers (and the tool results sent
        with them) it already has, and calls only for the rest."""
        turns: list[Turn] = ctx.state["messages"]
        for step in range(self.max_steps):
            if step:
                ctx.run.heartbeat()  # a long tool loop keeps its lease, or learns it lost it
            turns.append(pending)
            before = len(turns)
            turns = cut_or_note(turns, step, ctx.history_end, self.token_budget, self.trim_to)
            ctx.history_end -= before - len(turns)
            ctx.state["messages"] = turns
            if ctx.run.stopped_by_user:  # the person pressed stop: no more calls
                return stopped(ctx)
            try:
                answer = self.caller.call(
                    ctx.run, step, turns, ctx.history_end, ctx.ttl, ctx.now, ctx.live, ctx.listing
                )
            except BudgetSpent as spent:  # no call, and one line for the whole run
                return self._say_instead(ctx, over_budget_line(spent.over, ctx.run.events))
            except StoppedByUser:
                return stopped(ctx)
            turns[-1] = answer.sent  # what the recorded answer followed
            ctx.run.checkpoint()  # an answer to words the person has since added to is dropped
            ctx.now = answer.now  # a replayed run acts at the time its calls were made
            ctx.calls += 1
            response = answer.message
            content = assistant_content(response.content)
            stop = response.stop_reason
            if stop == "refusal":
                return self._say_instead(ctx, REFUSED_LINE)
            if stop in ("max_tokens", "model_context_window_exceeded"):
                return self._say_instead(ctx, CUT_OFF_LINE)
            uses = [b for b in content if b["type"] == "tool_use"]
            if not any(b["type"] in ("text", "tool_use") for b in content):
                content.append(text_block(NO_REPLY))
            turns.append({"role": "assistant", "content": content})
            if not uses:
                return self._reply(ctx, final_text(content))
            results, asked = self._use_tools(ctx, uses)
            if ctx.interrupted:  # the tools that ran keep their results, in the carry
                turns.append({"role": "user", "content": results})
                raise Interrupted(f"{ctx.run.inbox}: the person wrote again")
            if asked is not None:
                ctx.state["open"] = {"results": results, "awaiting": asked}
                return self._reply(ctx, final_text(content))
            pending = {"role": "user", "content": results}
        ctx.state["messages"].append(pending)  # every tool_use keeps its result
        self._say_instead(ctx, TOO_MANY_STEPS_LINE)

    def _say_instead(self, ctx: RunContext, line: str) -> None:
        """Tell the person in one line (the history records it, not a cut-off tool call); under
        a streamed reply, a note below what the model wrote, never part of it."""
        ctx.state["messages"].append({"role": "assistant", "content": [text_block(line)]})
        if ctx.live is not None and ctx.live.shown:
            ctx.live.close(note=line)
            return
        self._reply(ctx, line)

    def _reply(self, ctx: RunContext, text: str) -> None:
        if ctx.live is not None and ctx.live.shown:  # it is shown already, as it was written
            ctx.live.close()
            return
        text = text.strip()
        if not text or text == NO_REPLY:
            return
        if ctx.channel is None:
            log.warning("claude: %s has no conversation to answer in; reply dropped", ctx.run.inbox)
            return
        where = Conversation(ctx.channel, ctx.thread_ts)
        shown = inert(text)
        ctx.run.reply(shown, to=where, urgent=ctx.urgent, blocks=feedback_blocks(shown))

    def _digest_facts(self, ctx: RunContext, skipped: int, channel: str | None) -> str:
        unit = "day" if (ctx.state.get("digest") or {}).get("daily") else "period"
        note = outage_note(skipped, unit)
        since = int(ctx.state.get("since") or ctx.run.now)
        query = self.setup.query
        facts = digest_facts(query, ctx.run.inbox, ctx.state["stats"], channel, since)
        return "\n".join([f"since: {utc(since)}", *([note] if note else []), *facts])


def factory(setup: Setup) -> ClaudeAgent:
    """WAKEFUL_AGENT=claude: the key from ANTHROPIC_API_KEY, the model from WAKEFUL_MODEL (the
    SDK reads ANTHROPIC_BASE_URL itself), the prompt cache's TTL from WAKEFUL_CLAUDE_CACHE_TTL
    and the price table's changes from WAKEFUL_CLAUDE_PRICES; a model call must end well inside
    the lease; WAKEFUL_CLAUDE_MAX_TOOL_CALLS_PER_TURN and _BUDGET_PER_* bound a turn and a day."""
    api_key = setup.env.get("ANTHROPIC_API_KEY", "").strip()
    if not api_key:
        raise InvalidInput("ANTHROPIC_API_KEY is not set (required by WAKEFUL_AGENT=claude)")
    return ClaudeAgent(
        setup,
        api_key=api_key,
        model=setup.env.get("WAKEFUL_MODEL", "").strip() or DEFAULT_MODEL,
        timeout=float(min(600, max(10, setup.settings.lease_ttl * 3 // 4))),
        cache=setup.env.get("WAKEFUL_CLAUDE_CACHE_TTL", ""),
        price_table=prices(setup.env.get("WAKEFUL_CLAUDE_PRICES", "")),
        max_tool_calls=max_tool_calls(setup.env.get("WAKEFUL_CLAUDE_MAX_TOOL_CALLS_PER_TURN", "")),
        budget=spend_budget(setup.env),
    )


__all__ = [
    "CUT_OFF_LINE",
    "REFUSED_LINE",
    "SYSTEM_PROMPT",
    "TOO_MANY_STEPS_LINE",
    "ClaudeAgent",
    "ModelUnavailable",
    "factory",
]
