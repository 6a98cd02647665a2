"""Whose inbox: the one place an inbox key is built and read.

A person's inbox is `<team>:<user>` (one per person per workspace); the inbox of a Slack
conversation that webhook reports go to is `channel:<id>`, so the two can never meet. The
operators' reports (WAKEFUL_OPS_CHANNEL) are outbox rows of the reserved inbox `ops`, or
`ops:<team>` when they name their workspace: no event is ever stored under it. An `InboxId` is
a `str` (every store operation takes the key as text) that knows its parts.
"""

from __future__ import annotations

CONVERSATION_PREFIX = "channel"
OPS_PREFIX = "ops"


class InboxId(str):
    """An inbox key that knows its parts. Any text is a key (engine tests use `i1`); only
    the shapes above have a team and user, a channel, or are the operators'."""

    __slots__ = ()

    @classmethod
    def person(cls, team: str, user: str) -> InboxId:
        if not team or not user:
            raise ValueError("a person's inbox needs a team and a user")
        return cls(f"{team}:{user}")

    @classmethod
    def conversation(cls, channel: str) -> InboxId:
        if not channel:
            raise ValueError("a conversation's inbox needs its channel id")
        return cls(f"{CONVERSATION_PREFIX}:{channel}")

    @classmethod
    def ops(cls, team: str | None = None) -> InboxId:
        """The inbox of the operators' reports: `ops`, or `ops:<team>` in the workspace
        `team` (distribution mode, where the sender picks the token by the team)."""
        return cls(f"{OPS_PREFIX}:{team}" if team else OPS_PREFIX)

    @staticmethod
    def team_prefix(team: str) -> str:
        """What every person's inbox of `team` starts with (the store matches a workspace's
        inboxes by it)."""
        if not team:
            raise ValueError("a team's inboxes need the team")
        return f"{team}:"

    @property
    def channel(self) -> str | None:
        """The conversation of a `channel:<id>` inbox, else None."""
        head, sep, tail = self.partition(":")
        return tail if sep and head == CONVERSATION_PREFIX and tail else None

    @property
    def is_ops(self) -> bool:
        """The operators' reports (`ops`, `ops:<team>`): a refusal of one is never reported
        to the operators again, and never told to a person."""
        return self.partition(":")[0] == OPS_PREFIX

    @property
    def team(self) -> str | None:
        """The workspace of a person's inbox or of the operators' `ops:<team>`, else None."""
        head, sep, tail = self.partition(":")
        if head == OPS_PREFIX and sep:
            return tail or None
        return self._person()[0]

    @property
    def user(self) -> str | None:
        """The person of a person's inbox (a Slack user id), else None."""
        return self._person()[1]

    def _person(self) -> tuple[str | None, str | None]:
        team, sep, user = self.partition(":")
        if not sep or team == CONVERSATION_PREFIX or not team or not user.startswith(("U", "W")):
            return None, None
        return team, user
