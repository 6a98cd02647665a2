"""The App Home tab: the agent's `home(view)` method draws it, wakeful publishes it.

After each run of the inbox of a person who opened their Home tab, the hook here builds a
`HomeView` (what the person has going, as the run being finished leaves it: its approvals and
timers are not in the store before the finish commits), asks the agent for the blocks, and adds
the view to the run's effects (an outbox row of kind `home`; only the latest per person is
published, so nothing holds a lock across the Slack call). People who never opened it cost
nothing. `default_home` is what an agent that does not override `home` shows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from wakeful.bot.front.payloads import REQUEUE
from wakeful.bot.slack import blocks
from wakeful.bot.slack.blocks import Block
from wakeful.bot.slack.events import HomeOpened
from wakeful.bot.slack.text import inert
from wakeful.core.effects import Effects, Post
from wakeful.core.events import Event
from wakeful.core.inbox_id import InboxId
from wakeful.core.query import Query
from wakeful.core.records import ApprovalState, DeadLetters
from wakeful.core.rules.approvals import EXPIRY_PREFIX
from wakeful.core.rules.schedule import first_occurrence
from wakeful.core.run import Run
from wakeful.core.store import Store
from wakeful.core.tenancy import Workspace, is_approver

MEMORY_LINE = "`/wakeful memory` shows what I remember about you; `/wakeful forget` erases it."
"""How a person sees and erases what is kept about them (core/privacy.py): the last line of
every agent's Home tab, whatever the agent draws (the engine answers both for every agent)."""
SHOWN = 5
"""Rows shown per list: the Home tab is a glance, `wakeful inspect` has the rest."""
MAX_BLOCKS = 50


@dataclass(frozen=True, slots=True)
class Pending:
    """An open approval as the Home tab shows it."""

    id: str
    tool: str
    summary: str
    requester: str
    deadline: int
    inbox: str


@dataclass(frozen=True, slots=True)
class NextTimer:
    """One of the person's timers and when it fires next."""

    name: str
    at: int
    data: Any


@dataclass(frozen=True)
class HomeView:
    """What a person's Home tab can show, as the run being finished leaves it."""

    user: str
    inbox: InboxId
    now: int
    is_approver: bool
    approvals: list[Pending]
    """The person's own open approvals (with this run's new ones), oldest first."""
    to_answer: list[Pending]
    """For approvers: open approvals of other people of this workspace they may answer."""
    timers: list[NextTimer]
    """The person's timers (approval expiries left out), soonest first."""
    session: Any
    """The agent's saved state, as this run leaves it."""
    dead_letters: DeadLetters | None
    """For approvers: this workspace's dead events and parked posts (each with Requeue)."""
    query: Query
    self_approval: bool = True
    """WAKEFUL_SELF_APPROVAL: off, a prompt says only another approver can answer it."""

    def approval_blocks(self, pending: Sequence[Pending] | None = None) -> list[Block]:
        """Each approval with working Approve / Deny buttons (the prompt's own blocks)."""
        out: list[Block] = []
        for a in (self.approvals if pending is None else pending)[-SHOWN:]:
            out.extend(
                blocks.approval_prompt(
                    a.id, inert(a.summary), a.requester, a.deadline, self.self_approval
                )
            )
        return out

    def operator_blocks(self) -> list[Block]:
        """Dead events and parked posts, each with a Requeue button (approvers only)."""
        dead = self.dead_letters
        if dead is None:
            return []
        out: list[Block] = [header("Dead letters (approvers only)")]
        for e in dead.events:
            error = (e.error or "")[:200]
            out.append(_requeue(inert(f"event {e.id} in {e.inbox}: {error}"), f"event:{e.id}"))
        for r in dead.outbox:
            error = (r.error or "")[:200]
            text = inert(f"outbox row {r.id} to {r.channel}: {error}")
            out.append(_requeue(text, f"outbox:{r.id}"))
        if not dead.events and not dead.outbox:
            out.append(section("No dead events, no parked posts."))
        return out


def default_home(view: HomeView) -> list[Block]:
    """The Home tab of an agent that draws none of its own: the person's pending approvals,
    for approvers those of everyone in the workspace they may answer, the next timers, and for
    approvers what needs an operator there."""
    out: list[Block] = [header("Pending approvals")]
    out.extend(view.approval_blocks() or [section("Nothing waits for an answer.")])
    if view.is_approver:
        out.append(header("Waiting for your answer"))
        out.extend(
            view.approval_blocks(view.to_answer) or [section("No one waits for your answer.")]
        )
    out.append(header("Next timers"))
    lines = [f"{blocks.when(t.at)}: {inert(timer_label(t))}" for t in view.timers[:SHOWN]]
    out.append(section("\n".join(lines) or "No timers."))
    out.extend(view.operator_blocks())
    return out


def timer_label(timer: NextTimer) -> str:
    """A timer's text when its data has one, else its name."""
    data = timer.data
    if isinstance(data, dict) and isinstance(data.get("text"), str):
        return str(data["text"])
    return timer.name


def memory_line() -> Block:
    """The Home tab's last line: `/wakeful memory` and `/wakeful forget`."""
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": MEMORY_LINE}]}


def header(text: str) -> Block:
    """A Home tab heading (plain text, cut at Slack's 150 characters)."""
    return {"type": "header", "text": {"type": "plain_text", "text": text[:150]}}


def section(text: str) -> Block:
    """A mrkdwn section (cut at Slack's 3,000 characters). Escape what you did not write."""
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}


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


def build_view(
    store: Store,
    inbox: str,
    approvers: Sequence[str],
    now: int,
    effects: Effects,
    unowned: bool = False,
) -> HomeView | None:
    """The Home view of a person's inbox after a run that asked for `effects`; None for a
    conversation's inbox. An approver's lists are of the workspace the tab is open in, and of
    nowhere else (`unowned`: with the inboxes of no workspace, single-workspace mode)."""
    key = InboxId(inbox)
    if key.user is None or key.team is None:
        return None
    user = key.user
    here = Workspace(key.team, (key.team,), unowned)
    approver = is_approver(approvers, user, key.team)
    own = [_pending(a) for a in store.approvals(inbox) if a.answer is None]
    own += [
        Pending(a.id, a.tool, a.summary or a.tool, a.requester, a.deadline, inbox)
        for a in effects.approvals
    ]
    others = [
        _pending(a)
        for a in (store.open_approvals_for(user, True, SHOWN * 4, here) if approver else [])
        if a.inbox != inbox
    ]
    cancelled = set(effects.cancel_timers)
    timers = {
        t.id.split("/", 1)[-1]: NextTimer(t.id.split("/", 1)[-1], t.next_at, _data(t.payload))
        for t in store.timers(inbox)
        if not t.id.split("/", 1)[-1].startswith(EXPIRY_PREFIX)
    }
    for t in effects.timers:
        at = first_occurrence(t.kind, now, t.first_at, t.daily_at, t.tz)
        timers[t.name] = NextTimer(t.name, at, _data(t.payload))
    session = effects.session if effects.save_session else store.session(inbox)
    return HomeView(
        user=user,
        inbox=key,
        now=now,
        is_approver=approver,
        approvals=own,
        to_answer=others,
        timers=sorted(
            (t for name, t in timers.items() if name not in cancelled), key=lambda t: t.at
        ),
        session=session,
        dead_letters=store.dead_letters(limit=SHOWN, scope=here) if approver else None,
        query=Query(store, tuple(approvers)),
        self_approval=store.settings.self_approval,
    )


@dataclass
class HomeHook:
    """Refreshes the Home tab of a person who opened it, after each run of their inbox."""

    store: Store
    agent: Any
    approvers: tuple[str, ...] = ()
    unowned: bool = False
    """Single-workspace mode: approvers also see the rows of inboxes of no workspace."""

    def before(self, run: Run) -> None:
        return None

    def failed(self, run: Run, effects: Effects) -> None:
        return None  # a failed run changed nothing the tab shows

    def after(self, run: Run, effects: Effects) -> None:
        if run.inbox.user is None or not self.store.has_opened_home(run.inbox):
            return
        view = build_view(
            self.store, run.inbox, self.approvers, run.now, effects, unowned=self.unowned
        )
        if view is None:
            return
        drawn = self.agent.home(view) if hasattr(self.agent, "home") else default_home(view)
        if drawn is None:
            return
        shown = [*list(drawn)[: MAX_BLOCKS - 1], memory_line()]
        effects.messages.append(
            Post(
                view.user,
                "Home",
                blocks=shown,
                kind="home",
                user=view.user,
                priority="urgent",
            )
        )


def failed_home(event: Event, text: str) -> list[Post]:
    """What a person whose Home tab event ran out of attempts sees: the tab redrawn with the
    notice (it names no conversation to answer in)."""
    if not isinstance(event, HomeOpened):
        return []
    drawn = [header("Home"), section(text), section("Open the tab again later to refresh it.")]
    return [Post(event.user, "Home", blocks=drawn, kind="home", user=event.user, priority="urgent")]


def _pending(a: ApprovalState) -> Pending:
    summary = a.summary or legacy_summary(a.tool, a.args)
    return Pending(a.id, a.tool, summary, a.requester, a.deadline, a.inbox)


def legacy_summary(tool: str, args: Any) -> str:
    """What an approval asked before summaries were stored said: its tool and order."""
    order = args.get("order_id") if isinstance(args, dict) else None
    return f"{tool.replace('_', ' ')} {order}" if order else tool


def _data(payload: Any) -> Any:
    """A timer's own data (stored beside its conversation since the wire version)."""
    if isinstance(payload, dict) and payload.get("v") == 2 and "data" in payload:
        return payload["data"]
    return payload


def _requeue(text: str, value: str) -> Block:
    button = {
        "type": "button",
        "action_id": REQUEUE,
        "text": {"type": "plain_text", "text": "Requeue"},
        "value": value,
    }
    return {**section(text), "accessory": button}
