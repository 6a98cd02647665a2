"""Who the bot is in a request's workspace, as the listeners' Bolt app asks it: one workspace
known at start (SLACK_BOT_TOKEN), or distribution mode's installations."""

from __future__ import annotations

from typing import Any, Protocol

from slack_bolt import BoltContext
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.authorization.authorize import Authorize


class InstallationsAuthorize(Protocol):
    """Distribution mode's authorize (bot/slack/workspaces.py `InstallationAuthorize`): the
    listeners need both halves, so both are the contract rather than one probed for."""

    def __call__(
        self,
        *,
        context: BoltContext,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None,
        **kwargs: Any,
    ) -> AuthorizeResult | None:
        """The installation of the request's workspace; None when it has none."""

    def note_org_team(self, body: dict[str, Any], context: BoltContext, next: Any) -> Any:
        """Bolt middleware run after the authorize: an org-wide install's request records the
        workspace it came from (its rows then go out with the org's token)."""


class OneWorkspace(Authorize):
    """Single-workspace mode: every request is the one bot's, known from auth.test at start.
    No token here: listeners only write to the store; the dispatcher holds it."""

    def __init__(self, bot_user_id: str, bot_id: str) -> None:
        self.bot_user_id = bot_user_id or None
        self.bot_id = bot_id or None

    def __call__(
        self,
        *,
        context: BoltContext,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None,
        **_: Any,
    ) -> AuthorizeResult:
        return AuthorizeResult(
            enterprise_id=enterprise_id,
            team_id=team_id,
            bot_user_id=self.bot_user_id,
            bot_id=self.bot_id,
        )
