"""The class an agent subclasses: `run` is required; the rest has defaults that work."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

if TYPE_CHECKING:
    from wakeful.bot.slack.home import HomeView
    from wakeful.core.run import Run
    from wakeful.core.services import Tool

Block = dict[str, Any]
"""One Block Kit block (https://docs.slack.dev/reference/block-kit/blocks), as a dict."""

GREETING = "Hi! Ask me anything here; I answer in this thread."


class Agent:
    """An agent: `run(run)` is called with each claimed batch of one inbox's events and asks
    for what should happen through `run` (replies, approvals, timers, saved state). It never
    sends anything itself: wakeful writes what the run asked for in one fenced transaction,
    then posts it, paced.

    Override the class attributes and methods below to change what people see around the
    conversation; the defaults work for any agent."""

    tools: Sequence[Tool] = ()
    """The tools this agent may ask a person to approve (`run.ask`); on yes wakeful runs the
    tool once, as a durable step keyed by the request id."""

    greeting: ClassVar[str] = GREETING
    """Posted once when a person first opens the app's Messages tab (Slack's Agent messaging
    experience), or in each new assistant thread (the older assistant view)."""

    suggested_prompts: ClassVar[Sequence[tuple[str, str]]] = ()
    """(title, message) pairs pinned to the Messages tab (or shown under an assistant
    thread's greeting): at most 4; Slack shows them as buttons that send the message."""

    thinking_status: ClassVar[bool] = False
    """Show "is thinking…" (Slack's status) in every conversation a run answers (a DM, a
    mention, a thread) until its reply, for an agent whose answers take seconds (a model's).
    False: only in assistant threads (the older assistant view)."""

    loading_messages: ClassVar[Sequence[str]] = ()
    """Lines Slack rotates through under "is thinking…" (at most 10 are sent); empty: the
    status alone."""

    on_new_message: ClassVar[Literal["enqueue", "interrupt"]] = "enqueue"
    """What a message the person sends while their run works does: `enqueue` (it waits, and
    is answered by the next run) or `interrupt` (the run stops at its next step boundary, what
    it was going to post is not posted, a reply it streamed is taken back, and one new run
    answers the earlier and the newer words together; steps done stay done)."""

    shared_memory: ClassVar[Literal["read", "write"]] = "read"
    """The workspace's shared memory (`run.memory.shared`): `read` (runs read it, none writes)
    or `write` (a run's writes to it go with its finish, as its own memory's do)."""

    failure_text: ClassVar[str | None] = None
    """Told once to the person whose message could not be handled (its attempts ran out);
    None: the WAKEFUL_FAILURE_TEXT setting, or wakeful's own line."""

    def run(self, run: Run) -> None:
        """Handle one batch. Raising fails every event of the batch: each is retried with
        backoff, and set aside (dead) after WAKEFUL_MAX_ATTEMPTS."""
        raise NotImplementedError(f"{type(self).__name__} must define run(self, run)")

    def home(self, view: HomeView) -> list[Block] | None:
        """The person's App Home tab, refreshed after each of their runs once they opened it.
        The default lists their pending approvals (with working buttons), their next timers
        and, for approvers, every approval they may answer and what needs an operator."""
        from wakeful.bot.slack.home import default_home

        return default_home(view)
