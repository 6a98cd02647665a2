"""The Slack surface events an agent can receive, registered with the engine's decoder.

The engine knows a person's message, a command, an approval's answer, a timer tick and a
webhook delivery (core/events.py); the surfaces Slack has around a conversation (the App Home
tab, the Messages tab, the assistant thread, the feedback buttons under a reply) are the Slack
edge's, so their types live here and the engine decodes them without naming them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from wakeful.core.events import Conversation, Event, register, register_legacy


@register
@dataclass(frozen=True, kw_only=True)
class HomeOpened(Event):
    """The person opened the app's Home tab: after this run wakeful refreshes it with the
    agent's `home` view. Nothing to answer."""

    TYPE: ClassVar[str] = "home_opened"

    user: str
    team: str

    @property
    def people(self) -> tuple[str, ...]:
        return (self.user,)


@register
@dataclass(frozen=True, kw_only=True)
class AssistantThreadStarted(Event):
    """The person opened a new assistant thread with the app (Agents & AI Apps): wakeful
    greets them there with the agent's `greeting` and `suggested_prompts`."""

    TYPE: ClassVar[str] = "assistant_thread_started"

    user: str
    team: str
    channel: str
    thread_ts: str

    @property
    def reply_to(self) -> Conversation:
        return Conversation(self.channel, self.thread_ts)

    @property
    def urgent(self) -> bool:
        return True

    @property
    def people(self) -> tuple[str, ...]:
        return (self.user,)

    @property
    def awaited(self) -> bool:
        return True  # the greeting answers it


@register
@dataclass(frozen=True, kw_only=True)
class MessagesTabOpened(Event):
    """The person opened the DM with the app (its Messages tab, Slack's Agent messaging
    experience): wakeful pins the agent's `suggested_prompts` there and, the first time,
    greets them with the agent's `greeting`."""

    TYPE: ClassVar[str] = "messages_tab_opened"

    user: str
    team: str
    channel: str

    @property
    def reply_to(self) -> Conversation:
        return Conversation(self.channel)

    @property
    def urgent(self) -> bool:
        return True

    @property
    def people(self) -> tuple[str, ...]:
        return (self.user,)


@register
@dataclass(frozen=True, kw_only=True)
class Feedback(Event):
    """A thumbs up or down on one of the agent's replies (Slack's feedback buttons)."""

    TYPE: ClassVar[str] = "feedback"

    value: Literal["positive", "negative"]
    user: str
    team: str
    channel: str
    message_ts: str
    thread_ts: str | None = None

    @property
    def reply_to(self) -> Conversation:
        return Conversation(self.channel, self.thread_ts or self.message_ts)

    @property
    def people(self) -> tuple[str, ...]:
        return (self.user,)


SURFACE_EVENTS: tuple[type[Event], ...] = (
    HomeOpened,
    MessagesTabOpened,
    AssistantThreadStarted,
    Feedback,
)


def _infer_slack(source: str, payload: Mapping[str, Any]) -> str | None:
    """Rows stored before the wire version: a Home tab opened (or refreshed by Requeue)."""
    if source == "slack" and payload.get("kind") == "home_opened":
        return HomeOpened.TYPE
    return None


register_legacy(_infer_slack)
