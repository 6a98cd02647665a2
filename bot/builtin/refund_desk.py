"""`refund-desk`: the built-in deterministic agent (no network), for demos, tests and as the
reference for what an agent asks of its run. Written on the public agent API alone.

It answers each batch of chat with one reply, asks for approval before a refund, sets reminders
and paced digests, reports status, and streams its help (`help`) a line at a time: the
reference for `run.stream`, seen being written in `wakeful dev` and `wakeful demo`. Everything
it knows between runs lives in the state it saves with the run, so counts in a digest are exact
even across crashes.
"""

from __future__ import annotations

import re
from typing import Any

from wakeful.agents import (
    Agent,
    ApprovalAnswer,
    Block,
    Command,
    Conversation,
    HomeView,
    Message,
    Run,
    Setup,
    Timer,
    TimerTick,
    Tool,
    WebhookDelivery,
    digest,
    header,
    inert,
    section,
    slack_date,
    utc,
)
from wakeful.bot.builtin.common import (
    DIGEST,
    REFUND_TOOL,
    dead_letters_text,
    digest_lines,
    digest_too_often,
    fresh_stats,
    not_done_text,
    plural,
    refund_already,
    refund_backend,
    refund_once,
    status_text,
    unusable_session,
    zone_shown,
)
from wakeful.bot.builtin.stripe_confirm import confirmation, refunded_text
from wakeful.bot.builtin.webhook_report import report_line

REFUND = re.compile(r"refund\s+order\s+#?([A-Za-z0-9][A-Za-z0-9_-]{0,63})", re.IGNORECASE)
REMIND = re.compile(
    r"remind me in (\d{1,7}) (seconds?|minutes?|hours?) to (.+)", re.IGNORECASE | re.DOTALL
)
DIGEST_EVERY = re.compile(r"digest every (\d{1,7}) (seconds?|minutes?|hours?)", re.IGNORECASE)
DIGEST_DAILY = re.compile(r"digest daily at (\d{1,2}):(\d{2})\b", re.IGNORECASE)
DIGEST_OFF = re.compile(r"digest off\b", re.IGNORECASE)
MENTION = re.compile(r"<@[A-Z0-9]+>")
UNIT = {"second": 1, "minute": 60, "hour": 3600}
SHOWN = 5

DESK_GREETING = (
    "Hi, I'm wakeful. I answer once, ask before refunds and keep quiet unless there is news. "
    "Ask for `status`, set a `digest daily at 09:00`, or `remind me in 10 minutes to stretch`."
)
SLASH_USAGE = (
    "Try `/wakeful status`, `/wakeful digest every 1 hour` (or `daily at 09:00`, or `off`), "
    "`/wakeful remind me in 10 minutes to stretch`, or `/wakeful dead-letters` (approvers)."
)
ONLY_APPROVERS = "Only approvers (WAKEFUL_APPROVERS) may see the dead letters."
HELP_LINES = (
    "I'm the refund desk. Write to me here, or mention me in a channel:\n",
    "• `refund order 1234`: asks for approval first; a yes refunds it once\n",
    "• `remind me in 10 minutes to stretch`: a reminder, in this conversation\n",
    "• `digest every 1 hour`, `digest daily at 09:00`, `digest off`: news only, paced\n",
    "• `status`: pending and dead events, open approvals, the next digest\n",
    "My Home tab shows what waits for an answer, the next reminders and recent refunds.",
)
"""The help a message saying `help` gets, streamed line by line (each ends with its newline, so
a flush shows whole lines)."""
HELP_WORDS = ("help", "help?", "help!")


def _seconds(n: str, unit: str) -> int:
    return int(n) * UNIT[unit.lower().rstrip("s")]


def _load(session: Any, now: int) -> dict[str, Any]:
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
        raise unusable_session(problem)
    state: dict[str, Any] = dict(session)
    state.setdefault("stats", fresh_stats())
    state.setdefault("since", now)
    return state


class RefundDesk(Agent):
    """The default agent. The shortest digest period it sets is WAKEFUL_MIN_DIGEST_PERIOD
    (the demo lowers it to show digests in seconds)."""

    greeting = DESK_GREETING
    suggested_prompts = (
        ("Status", "status"),
        ("Daily digest", "digest daily at 09:00"),
        ("A reminder", "remind me in 10 minutes to stretch"),
    )

    def __init__(self, setup: Setup) -> None:
        self.setup = setup
        self.query = setup.query
        self.quiet_digests = setup.settings.quiet_digests
        self.min_digest = setup.settings.min_digest_period
        self.approvers = setup.approvers
        self.tools = [Tool(REFUND_TOOL, self._refund, "Refund an order (needs approval).")]
        self.stripe = refund_backend(setup)

    def _refund(self, args: Any, key: str) -> dict[str, Any]:
        """The refund, once per order whoever asks (bot/builtin/common.py): through Stripe with
        WAKEFUL_REFUNDS=stripe, else the local ledger; run by wakeful after a yes, as a
        durable step keyed by the request id (Stripe's Idempotency-Key)."""
        order = str(args.get("order_id", "")) if isinstance(args, dict) else ""
        return refund_once(self.setup.steps, self.query, order, key, self.stripe)

    # -- the run --------------------------------------------------------------------------

    def run(self, run: Run) -> None:
        state = _load(run.session, run.now)
        chats = [e for e in run.events if isinstance(e, Message)]
        if chats:
            self._chat(run, chats, state)
        for event in run.events:
            if isinstance(event, Command):
                self._slash(run, event, state)
            elif isinstance(event, ApprovalAnswer):
                self._answered(run, event, state)
            elif isinstance(event, TimerTick):
                self._timer(run, event, state)
            elif isinstance(event, WebhookDelivery):
                # One normal line per delivery: the outbox merges a burst into one post per gap.
                run.reply(report_line(event), to=event)
                if said := confirmation(self.query, self.setup.steps, event):
                    # Where the refund was asked; merged with the refund's reply when both wait.
                    run.reply(said[1], to=said[0], urgent=False)
        run.save(state)

    def _chat(self, run: Run, chats: list[Message], state: dict[str, Any]) -> None:
        by_conversation: dict[Conversation, list[Message]] = {}
        for e in chats:
            by_conversation.setdefault(e.reply_to, []).append(e)
        state["stats"]["messages"] += len(chats)
        for where, events in by_conversation.items():
            state["home"] = {"channel": where.channel, "thread_ts": where.thread_ts}
            lines = [f"Handled {plural(len(events), 'message')}."]
            answered = 0  # messages answered by their own post: a prompt, the help
            for e in events:
                if MENTION.sub("", e.text).strip().lower() in HELP_WORDS:
                    _help(run, e)
                    answered += 1
                    continue
                said, asked = self._commands(run, e, where, state)
                lines.extend(said)
                answered += bool(asked and not said)
            # A message that only asked for approval is answered by its prompt (one post per
            # ask, not a reply saying so and then the prompt); one asking for help by the help.
            if answered < len(events):
                run.reply("\n".join(lines), to=where, urgent=True)

    def _slash(self, run: Run, e: Command, state: dict[str, Any]) -> None:
        """`/wakeful …`: the same commands as a message, answered to the caller alone (an
        ask is answered by its prompt in the channel)."""
        text = e.text.strip()
        if text.lower() in ("dead-letters", "dead letters"):
            allowed = self.query.is_approver(e.user, e.team)
            lines = [dead_letters_text(self.query) if allowed else ONLY_APPROVERS]
        else:
            lines, asked = self._commands(run, e, Conversation(e.channel), state)
            if asked and not lines:
                return
            lines = lines or [SLASH_USAGE]
        run.reply("\n".join(lines), to=e)

    def _commands(
        self, run: Run, e: Message | Command, where: Conversation, state: dict[str, Any]
    ) -> tuple[list[str], int]:
        """What one message or command says back, and how many approvals it asked for (each
        shown by its own prompt, so not said again)."""
        text = MENTION.sub("", e.text).strip()
        lines: list[str] = []
        asking: list[tuple[str, Any]] = []
        not_asked = 0
        for match in REFUND.finditer(text):
            order = match.group(1)
            # The pattern admits no <, > or &: the id is shown through inert all the same.
            shown = inert(order)
            if already := refund_already(self.query, order, asking, run.now):
                lines.append(already)
                continue
            args = {"order_id": order, "reason": text[:500]}
            summary = f"refund order {shown}"
            asked = run.ask(REFUND_TOOL, args, summary=summary, to=where, requester=e.user)
            if asked is None:
                not_asked += 1  # over a cap: counted, and said once below
                continue
            asking.append((asked, args))
        if not_asked and (note := run.not_asked_note()):
            lines.append(note)
        if m := REMIND.search(text):
            delay = _seconds(m.group(1), m.group(2))
            what = m.group(3).strip()
            data = {"kind": "reminder", "text": what}
            reminder = Timer.once(f"remind-{e.id}", run.now + delay, data)
            # Over WAKEFUL_MAX_TIMERS_PER_INBOX it is not set: wakeful adds one line saying
            # how many were not set and why, in the same post as this reply.
            if run.set_timer(reminder, to=where):
                lines.append(f"I'll remind you in {m.group(1)} {m.group(2)}: {inert(what)}")
        if m := DIGEST_EVERY.search(text):
            every = _seconds(m.group(1), m.group(2))
            if too_often := digest_too_often(every, self.min_digest):
                lines.append(too_often)
            else:
                timer = Timer.every(DIGEST, every, run.now + every, {"kind": DIGEST})
                if run.set_timer(timer, to=where):  # else over the timer cap, said as above
                    state["digest"] = {"every": every}
                    lines.append(f"Digest set: every {m.group(1)} {m.group(2)}.")
        elif m := DIGEST_DAILY.search(text):
            hh, mm = int(m.group(1)), int(m.group(2))
            if hh > 23 or mm > 59:
                lines.append(f"{m.group(1)}:{m.group(2)} is not a time of day; use HH:MM.")
            else:
                at = f"{hh:02d}:{mm:02d}"
                zone = self.setup.time_zone(e.user)
                shown_zone = zone_shown(zone, f"say `digest daily at {at}` again later")
                timer = Timer.daily(DIGEST, at, zone.name, {"kind": DIGEST})
                if run.set_timer(timer, to=where):
                    state["digest"] = {"daily": at, "tz": zone.name}
                    lines.append(f"Digest set: daily at {at} ({shown_zone}).")
        elif DIGEST_OFF.search(text):
            run.cancel_timer(DIGEST)
            state["digest"] = None
            lines.append("Digest off.")
        if text.lower() == "status":
            lines.append(status_text(self.query, run.inbox))
        return lines, len(asking)

    def _answered(self, run: Run, e: ApprovalAnswer, state: dict[str, Any]) -> None:
        args = e.args if isinstance(e.args, dict) else {}
        order = inert(str(args.get("order_id", "?")))
        if e.answer == "yes":
            result = e.result if isinstance(e.result, dict) else {}
            state["stats"]["approved"] += 1
            if e.error is not None:
                text = not_done_text(order, e.error)
            elif result.get("refunded") is False and result.get("already"):
                text = f"{result.get('already')} Not refunded again."
            elif result.get("refunded") is False:
                text = str(result.get("why") or f"Order {order} was not refunded.")
            elif result.get("via") == "stripe":
                state["stats"]["refunds"] += 1
                text = refunded_text(str(args.get("order_id", "?")), result)
            else:
                state["stats"]["refunds"] += 1
                text = f"Refunded order {order}."
        elif e.answer == "no":
            state["stats"]["denied"] += 1
            text = f"Refund for order {order} denied; nothing was done."
        else:
            state["stats"]["expired"] += 1
            text = f"Refund request for order {order} expired; nothing was done."
        where = e.reply_to or _legacy_call(state, e.request_id)
        if where is not None:
            run.reply(text, to=where, urgent=True)

    def _timer(self, run: Run, e: TimerTick, state: dict[str, Any]) -> None:
        data = e.data if isinstance(e.data, dict) else {}
        if e.reply_to is None:
            return
        if data.get("kind") == "reminder":
            run.reply(f"Reminder: {inert(str(data.get('text', '')))}", to=e, urgent=True)
        elif data.get("kind") == DIGEST:
            facts = self._digest(run, e, state)
            if self.quiet_digests and digest.quiet(facts):
                # Start quiet and earn attention: nothing new, nothing said. The next digest
                # that has news covers this period too.
                state["quiet"] = int(facts["periods"])  # those held quiet before, with this one
                return
            run.digest(facts, to=e)
            state["stats"] = fresh_stats()
            state["since"] = run.now
            state["quiet"] = 0
            state["reported_dead"] = [d.id for d in self.query.dead_events(run.inbox)]

    def _digest(self, run: Run, tick: TimerTick, state: dict[str, Any]) -> digest.Facts:
        """The digest's facts: held digests merge by them."""
        unit = "day" if (state.get("digest") or {}).get("daily") else "period"
        since = int(state.get("since") or run.now)
        reported = state.get("reported_dead") or ()
        lines = digest_lines(self.query, run.inbox, state["stats"], tick.channel, since, reported)
        facts = digest.facts(since, lines, tick.skipped, unit)
        facts["periods"] += int(state.get("quiet") or 0)
        return facts

    # -- the Home tab ---------------------------------------------------------------------

    def home(self, view: HomeView) -> list[Block]:
        """Pending approvals, next reminders, the digest, recent refunds; for approvers what
        waits for their answer elsewhere and what needs an operator."""
        out: list[Block] = [header("Pending approvals")]
        out.extend(view.approval_blocks() or [section("Nothing waits for an answer.")])
        if view.to_answer:
            out.append(header("Waiting for your answer"))
            out.extend(view.approval_blocks(view.to_answer))
        reminders = [t for t in view.timers if t.name.startswith("remind-")][:SHOWN]
        lines = [f"{slack_date(t.at)}: {inert(str(_text(t.data)))}" for t in reminders]
        out += [header("Next reminders"), section("\n".join(lines) or "No reminders.")]
        out += [header("Digest"), section(_digest_line(view))]
        refunds = [
            s
            for s in view.query.steps(view.inbox, name=REFUND_TOOL, limit=SHOWN * 2)
            if not (isinstance(s.result, dict) and s.result.get("refunded") is False)
        ][:SHOWN]
        shown = [f"order {inert(_order(s.args))} at {utc(s.created_at)}" for s in refunds]
        out += [header("Recent refunds"), section("\n".join(shown) or "None.")]
        out.extend(view.operator_blocks())
        return out


def _help(run: Run, message: Message) -> None:
    """The help, written a line at a time as a model's answer would be: under the person's
    message in Slack it shows as it is written and ends as one message (core/streams.py)."""
    with run.stream(to=message) as reply:
        for line in HELP_LINES:
            if reply.stopped:  # the person pressed stop: what showed stays
                break
            reply.write(line)


def _digest_line(view: HomeView) -> str:
    """The digest setting and its next time, as this run leaves them."""
    found = next((t for t in view.timers if t.name == DIGEST), None)
    if found is None:
        return "Off."
    saved = view.session.get("digest") if isinstance(view.session, dict) else None
    setting = ""
    if isinstance(saved, dict) and saved.get("every"):
        setting = f"Every {saved['every']} s. "
    elif isinstance(saved, dict) and saved.get("daily"):
        setting = f"Daily at {saved['daily']} ({saved.get('tz') or 'UTC'}). "
    return f"{setting}Next digest {slack_date(found.at)}."


def _legacy_call(state: dict[str, Any], request_id: str) -> Conversation | None:
    """Where an approval asked before its conversation was stored was asked (the calls the
    state kept then)."""
    call = (state.get("calls") or {}).pop(request_id, None)
    if isinstance(call, dict) and isinstance(call.get("channel"), str):
        return Conversation(call["channel"], call.get("thread_ts"))
    home = state.get("home") or {}
    return Conversation(home["channel"]) if isinstance(home.get("channel"), str) else None


def _text(data: Any) -> Any:
    return data.get("text", "") if isinstance(data, dict) else ""


def _order(args: Any) -> str:
    return str(args.get("order_id", "?")) if isinstance(args, dict) else "?"


def factory(setup: Setup) -> RefundDesk:
    """WAKEFUL_AGENT=refund-desk (the default)."""
    return RefundDesk(setup)
