"""The Slack surfaces around an agent's runs: how an approval is shown (Block Kit with Approve /
Deny buttons) and rewritten once answered, the greeting and suggested prompts of the Messages
tab (or of an assistant thread), the "is thinking…" status, and the Home tab (bot/slack/home.py).

The engine asks for none of these by name: it shows approvals through the `ApprovalView` it is
given and runs the hooks it is given around each run. Everything here goes through the run's
effects, so the fenced finish writes it with the rest and the dispatcher sends it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from wakeful.agents.base import GREETING
from wakeful.bot.process.config import Config
from wakeful.bot.slack import blocks
from wakeful.bot.slack.events import AssistantThreadStarted, MessagesTabOpened
from wakeful.bot.slack.home import HomeHook, legacy_summary
from wakeful.bot.slack.text import inert
from wakeful.core.effects import ApprovalRequest, Effects, Post
from wakeful.core.events import ApprovalAnswer, Conversation, Message
from wakeful.core.run import Run
from wakeful.core.runner import RunHook, declared
from wakeful.core.store import Store

THINKING = "is thinking…"
PROMPTS_TITLE = "Try one of these"
MAX_PROMPTS = 4
MAX_LOADING = 10
"""Loading messages Slack takes with one status."""
GREETED = "greeted"
"""The durable mark (a step) of a person greeted on the Messages tab."""


@dataclass(frozen=True)
class SlackApprovals:
    """Approvals as Block Kit: the question with Approve / Deny buttons (their `value` is the
    request id, the contract the click handler reads), rewritten with the answer that
    stands. `self_approval` off (WAKEFUL_SELF_APPROVAL=off): the prompt says who may answer."""

    self_approval: bool = True

    def prompt(self, request: ApprovalRequest, to: Conversation) -> Post:
        summary = inert(request.summary)
        text = f"Approval needed: {summary} for <@{request.requester}>"
        if not self.self_approval:
            text += f"; only {blocks.who_answers(request.requester, False)} can answer"
        shown = blocks.approval_prompt(
            request.id, summary, request.requester, request.deadline, self.self_approval
        )
        return Post(to.channel, text, thread_ts=to.thread_ts, blocks=shown, priority="urgent")

    def outcome(self, answer: ApprovalAnswer, note: str | None = None) -> Post | None:
        if not answer.channel:
            return None
        summary = inert(answer.summary or legacy_summary(answer.tool, answer.args))
        if note is None and answer.answer == "yes" and answer.error is not None:
            note = f"not done: {answer.error}"
        note = None if note is None else inert(note)
        line = blocks.outcome_line(answer.answer, answer.by, answer.answered_at, note)
        shown = blocks.approval_outcome(summary, answer.answer, answer.by, answer.answered_at, note)
        return Post(
            answer.channel,
            f"{summary}: {line}",
            thread_ts=answer.thread_ts,
            kind="update",
            ref=answer.request_id,
            blocks=shown,
        )


@dataclass(frozen=True)
class Surface:
    """What an agent shows around its conversations (the attributes wakeful.agents.Agent
    declares, with its defaults), read once where the agent is loaded, as Slack takes them."""

    greeting: str = GREETING
    suggested_prompts: tuple[tuple[str, str], ...] = ()
    """At most MAX_PROMPTS (title, message) pairs."""
    thinking_status: bool = False
    loading_messages: tuple[str, ...] = ()
    """At most MAX_LOADING lines, none empty."""

    @classmethod
    def of(cls, agent: object) -> Surface:
        found = declared(agent, cls)
        pairs = list(found.get("suggested_prompts") or ())[:MAX_PROMPTS]
        lines = [str(m) for m in found.get("loading_messages") or () if str(m)]
        return cls(
            greeting=str(found.get("greeting") or GREETING),
            suggested_prompts=tuple((str(title), str(message)) for title, message in pairs),
            thinking_status=bool(found.get("thinking_status", False)),
            loading_messages=tuple(lines[:MAX_LOADING]),
        )

    @property
    def prompts(self) -> list[dict[str, str]]:
        """The suggested prompts as Slack's blocks take them."""
        return [{"title": title, "message": message} for title, message in self.suggested_prompts]


@dataclass
class GreetingHook:
    """Where a conversation with the app starts, the agent's suggested prompts are shown and
    its greeting posted once. The Messages tab (Slack's Agent messaging experience): the
    prompts are pinned to the tab (no thread) each time it is opened, the greeting posted the
    first time only (a durable mark per person). An assistant thread (the older assistant
    view): greeting and prompts in the thread (its key refuses a retried event's second)."""

    surface: Surface
    store: Store | None = None

    def before(self, run: Run) -> None:
        return None

    def failed(self, run: Run, effects: Effects) -> None:
        return None

    def after(self, run: Run, effects: Effects) -> None:
        greeting = self.surface.greeting
        prompts = self.surface.prompts
        for e in run.events:
            if isinstance(e, MessagesTabOpened):
                if self._first_greeting(run, e):
                    effects.messages.append(Post(e.channel, greeting, priority="urgent"))
                if prompts:
                    effects.messages.append(
                        Post(e.channel, PROMPTS_TITLE, kind="prompts", blocks=prompts)
                    )
            elif isinstance(e, AssistantThreadStarted):
                effects.messages.append(
                    Post(e.channel, greeting, thread_ts=e.thread_ts, priority="urgent")
                )
                if prompts:
                    effects.messages.append(
                        Post(
                            e.channel,
                            PROMPTS_TITLE,
                            thread_ts=e.thread_ts,
                            kind="prompts",
                            blocks=prompts,
                        )
                    )

    def _first_greeting(self, run: Run, e: MessagesTabOpened) -> bool:
        """Whether this is the first time the person opened the Messages tab (marked now, so
        a second open, whenever, greets nobody)."""
        if self.store is None:
            return True
        key = f"greeted:{run.inbox}"
        mark = self.store.recorded_step(key)
        # The mark holds the event that greeted: its own retry greets again.
        by = (
            mark.result
            if mark is not None
            else self.store.record_step(key, run.inbox, GREETED, None, e.key, run.now)
        )
        return bool(by == e.key)


def thinking_threads(run: Run, everywhere: bool = True) -> list[tuple[str, str]]:
    """(channel, thread) of each conversation this run answers a person in, where "is
    thinking…" shows: a DM (its thread, or the message itself), a mention (the thread the
    reply starts or joins), a reply in a thread. Not `everywhere`: only assistant threads (a
    thread in the app's DM, the older assistant view)."""
    found: list[tuple[str, str]] = []
    for e in run.events:
        if not isinstance(e, Message):
            continue
        if not everywhere and (e.channel_type != "im" or e.mention or not e.thread_ts):
            continue
        thread = e.thread_ts or e.ts
        if thread and (e.channel, thread) not in found:
            found.append((e.channel, thread))
    return found


@dataclass
class StatusHook:
    """Shows "is thinking…" (with the agent's `loading_messages`) under each conversation its
    run answers while the run is in flight (for an agent with `thinking_status`; else in
    assistant threads only, as it always did): queued at once, urgent, so it skips the gap.
    Cleared behind the run's reply, and after a failed run (the retry shows it again). A
    workspace or app that may not set it answers with an error the sender logs once; Slack
    itself removes a status after 2 minutes without a message (a worker that died mid-run)."""

    store: Store
    surface: Surface = Surface()
    kick: Callable[[], None] | None = None
    """Wakes this process's dispatcher, so the status goes out while the run is in flight."""

    def _threads(self, run: Run) -> list[tuple[str, str]]:
        return thinking_threads(run, self.surface.thinking_status)

    def _loading(self) -> list[dict[str, Any]] | None:
        return [{"loading": line} for line in self.surface.loading_messages] or None

    def before(self, run: Run) -> None:
        loading = self._loading()
        rows = [
            Post(
                channel,
                THINKING,
                thread_ts=thread,
                kind="status",
                priority="urgent",
                blocks=loading,
            )
            for channel, thread in self._threads(run)
        ]
        if rows:
            self.store.post(run.inbox, rows, run.now)
            if self.kick is not None:
                self.kick()

    def after(self, run: Run, effects: Effects) -> None:
        for channel, thread in self._threads(run):
            effects.messages.append(
                Post(channel, "", thread_ts=thread, kind="status", priority="urgent")
            )

    def failed(self, run: Run, effects: Effects) -> None:
        self.after(run, effects)


def surface_hooks(
    store: Store,
    config: Config,
    agent: Any,
    surface: Surface,
    kick: Callable[[], None] | None = None,
) -> list[RunHook]:
    """The hooks every agent's runs get: the Home tab, the greeting, and (with
    WAKEFUL_ASSISTANT) the "is thinking…" status (`kick` wakes the dispatcher for it).
    `surface` is what the agent declared, read where it was loaded."""
    home = HomeHook(store, agent, config.approvers, unowned=not config.distribution)
    hooks: list[RunHook] = [home, GreetingHook(surface, store)]
    if config.assistant:
        hooks.append(StatusHook(store, surface, kick))
    return hooks


__all__: Sequence[str] = (
    "GreetingHook",
    "SlackApprovals",
    "StatusHook",
    "Surface",
    "legacy_summary",
    "surface_hooks",
)
