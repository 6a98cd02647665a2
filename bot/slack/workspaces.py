"""Distribution mode's view of the installations: whose token a Web API call carries, who the
bot is in a request's workspace, and the one refresher of a rotating token.

`Workspaces` answers, for the team an inbox names, the bot token of its installation (its own,
or its org-wide install's); a workspace whose installation is gone has none, and the row is
parked with that reason, never sent with another workspace's token. Answers are kept for
`ttl` seconds, so neither the dispatcher nor the front reads the store for every call, and
dropped at once when this process saves or ends an installation.

With token rotation on, a token due to expire within `token_refresh_before` is refreshed before it
is used, by one process at a time across hosts: the refresher holds the store's lease
`refresh:<workspace>` while it calls oauth.v2.access (a refresh token is single-use: two hosts
refreshing at once would break the installation), and writes the new tokens over the version
it read. Everyone else keeps using the current token while it is still good, or waits for the
new one; every process reads it from the store once its cached answer is older than `ttl`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slack_bolt import BoltContext
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.authorization.authorize import Authorize
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from wakeful.bot.slack.installations import (
    StoreInstallations,
    TokenCipher,
    UnreadableTokens,
    from_row,
)
from wakeful.core.errors import PermanentSendError, TransientSendError
from wakeful.core.store import Store
from wakeful.core.store.installations import InstallationRow

log = logging.getLogger("wakeful.workspaces")
QUIET = logging.getLogger("wakeful.oauth.client")
QUIET.setLevel(logging.INFO)
"""slack_sdk logs every request's body and answer at DEBUG: an OAuth exchange carries the
client secret, the code or refresh token, and the new tokens, so the clients that make one log
through this logger, which never writes DEBUG lines."""
TTL = 30.0
"""Seconds an installation read from the store is used before it is read again."""
REFRESH_BEFORE = 1800
"""Seconds before its expiry a rotating token is refreshed (Slack's last 12 hours)."""
REFRESH_WAIT = 10.0
"""Seconds a process waits for another's refresh of a token that has expired already."""
REFRESH_LEASE = "refresh:"
BOLT_NOT_FOUND = "the AuthorizeResult (returned value from authorize) for it was not found"
"""Bolt's ERROR for every request whose authorize found nothing: said once per workspace by
InstallationAuthorize instead."""


def _not_bolts_not_found(record: logging.LogRecord) -> bool:
    return BOLT_NOT_FOUND not in record.getMessage()


@dataclass(frozen=True, slots=True)
class Bound:
    """One workspace's installation as this process last read it."""

    row: InstallationRow
    token: str
    bot_user_id: str | None
    bot_id: str | None
    read_at: float
    unreadable: str = ""
    """Why its tokens could not be opened (WAKEFUL_TOKEN_KEY lost the key that sealed them)."""


class Workspaces:
    """Per-workspace tokens and identities from the installation store, cached."""

    def __init__(
        self,
        store: Store,
        installations: StoreInstallations,
        client_id: str,
        client_secret: str,
        api_url: str,
        *,
        clock: Callable[[], int] = lambda: int(time.time()),
        monotonic: Callable[[], float] = time.monotonic,
        ttl: float = TTL,
        token_refresh_before: int = REFRESH_BEFORE,
        refresh_wait: float = REFRESH_WAIT,
        webhook_team: str = "",
        holder: str = "",
    ) -> None:
        self.store = store
        self.installations = installations
        self.cipher: TokenCipher = installations.cipher
        self.client_id = client_id
        self.client_secret = client_secret
        self.api = WebClient(base_url=api_url, timeout=10, retry_handlers=[], logger=QUIET)
        self.clock = clock
        self.monotonic = monotonic
        self.ttl = ttl
        self.token_refresh_before = token_refresh_before
        self.refresh_wait = refresh_wait
        self.webhook_team = webhook_team
        """The workspace of rows whose inbox names none (webhook reports to a channel)."""
        self.holder = holder or f"refresher-{uuid.uuid4().hex[:8]}"
        self._lock = threading.Lock()
        self._bound: dict[str, Bound] = {}
        self._teams_noted: set[tuple[str, str]] = set()
        self._said: set[tuple[str, int]] = set()
        """Installations (and versions) whose unreadable tokens were said in the log."""
        self._unserved: set[str] = set()
        """Teams whose requests were said to be dropped (no active installation)."""
        self.refreshes = 0
        """oauth.v2.access refresh calls this process made (for tests and the doctor)."""

    # -- the cache ---------------------------------------------------------------------------

    def forget(self, workspace: str | None = None) -> None:
        """Read `workspace` (every one, when None) from the store again on its next use."""
        with self._lock:
            if workspace is None:
                self._bound.clear()
                self._unserved.clear()
            else:
                self._unserved = {t for t in self._unserved if t != workspace}
                self._bound = {
                    team: b
                    for team, b in self._bound.items()
                    if team != workspace and b.row.workspace != workspace
                }

    def _bind(self, team: str) -> Bound | None:
        now = self.monotonic()
        with self._lock:
            bound = self._bound.get(team)
        if bound is not None and now - bound.read_at < self.ttl:
            return bound
        row = self.store.installation_for_team(team)
        if row is None or row.status != "active":
            with self._lock:
                self._bound.pop(team, None)
            return None
        return self._keep(team, row)

    def _keep(self, team: str, row: InstallationRow) -> Bound:
        try:
            installation = from_row(row, self.cipher)
            bound = Bound(
                row,
                installation.bot_token or "",
                installation.bot_user_id,
                installation.bot_id,
                self.monotonic(),
            )
        except UnreadableTokens as exc:
            bound = self._unreadable(row, exc)
        with self._lock:
            self._bound[team] = bound
        return bound

    def _unreadable(self, row: InstallationRow, exc: UnreadableTokens) -> Bound:
        """An installation whose tokens this process cannot open: who the bot is there is not
        secret (its ids are in the profile), so its events are still stored; its sends wait
        (a retry, not a park) until the key that sealed the tokens is back. Said once per
        installation and version, not once per call."""
        with self._lock:
            first = (row.workspace, row.version) not in self._said
            self._said.add((row.workspace, row.version))
        if first:
            log.error(
                "%s: its posts wait until WAKEFUL_TOKEN_KEY opens them again (add the key that "
                "sealed them after a comma, then restart)",
                exc,
            )
        profile: dict[str, Any] = json.loads(row.profile)
        return Bound(
            row, "", profile.get("bot_user_id"), profile.get("bot_id"), self.monotonic(), str(exc)
        )

    # -- tokens for Web API calls -------------------------------------------------------------

    def token(self, team: str | None) -> str:
        """The bot token of the installation `team` belongs to, fresh. PermanentSendError
        (the row is parked with it) when it has none; TransientSendError while another
        process refreshes a token that has expired already."""
        team = team or self.webhook_team
        if not team:
            raise PermanentSendError(
                "no workspace to send with: this row's inbox names no team (set "
                "WAKEFUL_WEBHOOK_TEAM for webhook reports in distribution mode)"
            )
        bound = self._bind(team)
        if bound is None:
            raise PermanentSendError(self._gone(team))
        expires = bound.row.expires_at
        due = expires is not None and expires - self.clock() < self.token_refresh_before
        if due and not bound.unreadable:
            bound = self._refreshed(team, bound)  # may read a version sealed with another key
        if bound.unreadable:
            raise TransientSendError(f"{bound.unreadable}: waiting for the key", retry_after=60)
        if not bound.token:
            raise PermanentSendError(
                f"workspace {bound.row.workspace}'s installation has no bot token"
            )
        return bound.token

    def _gone(self, team: str) -> str:
        row = self.store.installation_for_team(team)
        if row is None:
            return f"workspace {team} has no installation of the app (never installed here)"
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(row.updated_at))
        return f"workspace {row.workspace}: {row.reason or row.status} ({row.status} {when})"

    def who(self, team: str | None) -> tuple[str | None, str | None]:
        """(bot user id, bot id) in `team`'s workspace; (None, None) if not installed."""
        bound = self._bind(team) if team else None
        return (None, None) if bound is None else (bound.bot_user_id, bound.bot_id)

    def unserved(self, team: str) -> None:
        """A request from `team`, which has no active installation: said once per team and
        process (again after the workspace installs and leaves anew), not once per request."""
        with self._lock:
            if team in self._unserved:
                return
            self._unserved.add(team)
        log.warning(
            "%s; its requests are acknowledged and not stored (said once per workspace)",
            self._gone(team),
        )

    def note_team(self, team: str, workspace: str) -> None:
        """A team seen under an org-wide install (recorded once per process)."""
        key = (team, workspace)
        if team == workspace or key in self._teams_noted:
            return
        self.store.note_team(team, workspace)
        self._teams_noted.add(key)

    # -- rotation ------------------------------------------------------------------------------

    def _refreshed(self, team: str, bound: Bound) -> Bound:
        """`bound` with a token good for longer than `token_refresh_before`: refreshed by this
        process under the workspace's refresh lease, or by another (read back)."""
        workspace = bound.row.workspace
        lease = REFRESH_LEASE + workspace
        deadline = self.monotonic() + self.refresh_wait
        while True:
            now = self.clock()
            row = self.store.installation(workspace)
            if row is None or row.status != "active":
                self.forget(workspace)
                raise PermanentSendError(self._gone(team))
            if row.version != bound.row.version:
                bound = self._keep(team, row)  # another process refreshed (or re-installed)
            if (
                bound.unreadable
                or bound.row.expires_at is None
                or bound.row.expires_at - now >= self.token_refresh_before
            ):
                return bound
            gen = self.store.acquire(lease, self.holder, now)
            if gen is not None:
                try:
                    return self._refresh(team, lease, gen)
                finally:
                    self.store.release(lease, self.holder, gen, self.clock())
            if bound.row.expires_at > now:
                return bound  # still good: another process is refreshing it
            if self.monotonic() > deadline:
                raise TransientSendError(
                    f"workspace {workspace}: its token expired and another process is "
                    "refreshing it",
                    retry_after=2,
                )
            time.sleep(0.1)

    def _refresh(self, team: str, lease: str, gen: int) -> Bound:
        """Holding the lease: read the row again (a refresh may just have landed), then
        oauth.v2.access with the refresh token, and the new tokens written over that version."""
        row = self.store.installation(lease.removeprefix(REFRESH_LEASE))
        assert row is not None
        if row.expires_at is None or row.expires_at - self.clock() >= self.token_refresh_before:
            return self._keep(team, row)
        try:
            installation = from_row(row, self.cipher)
        except UnreadableTokens:
            return self._keep(team, row)  # unreadable here: its sends wait for the key
        try:
            answer = self.api.oauth_v2_access(
                client_id=self.client_id,
                client_secret=self.client_secret,
                grant_type="refresh_token",
                refresh_token=installation.bot_refresh_token,
            )
        except SlackApiError as exc:
            error = str(exc.response.get("error") or "error")
            log.error("workspace %s: the token refresh was refused (%s)", row.workspace, error)
            raise PermanentSendError(
                f"workspace {row.workspace}: token refresh refused ({error})"
            ) from exc
        except OSError as exc:
            raise TransientSendError(f"token refresh: {exc}", retry_after=5) from exc
        self.refreshes += 1
        now = self.clock()
        fresh = {
            "bot_token": str(answer.get("access_token") or ""),
            "bot_refresh_token": str(answer.get("refresh_token") or ""),
            "user_token": installation.user_token,
            "user_refresh_token": installation.user_refresh_token,
            "incoming_webhook_url": installation.incoming_webhook_url,
        }
        expires_at = now + int(answer.get("expires_in") or 0)
        profile: dict[str, Any] = json.loads(row.profile)
        if answer.get("scope"):
            profile["bot_scopes"] = str(answer["scope"]).split(",")
        if not self.store.renew(lease, self.holder, gen, now):
            log.warning("workspace %s: refresh lease lost before the save", row.workspace)
        saved = self.store.refresh_secrets(
            row.workspace,
            row.version,
            self.cipher.seal(fresh),
            json.dumps(profile),
            expires_at,
            now,
        )
        if saved is None:  # cannot happen while the lease held; read what was written instead
            log.error(
                "workspace %s: a refreshed token was not saved (another save came first)",
                row.workspace,
            )
        log.info("workspace %s: token refreshed, good until %s", row.workspace, expires_at)
        latest = self.store.installation(row.workspace)
        assert latest is not None
        return self._keep(team, latest)


class InstallationAuthorize(Authorize):
    """Bolt's authorize for distribution mode: who the bot is in the request's workspace, from
    the installation store, kept for `Workspaces.ttl`; never an auth.test per request (Bolt's
    InstallationStoreAuthorize calls auth.test once per token and refreshes tokens in the
    request path, on every host at once). A workspace with no active installation gets no
    result: Bolt answers it as not installed (an event 200, a command or a click its "please
    reinstall this app" message), and nothing is stored; the log says so once per workspace,
    in place of Bolt's ERROR per request."""

    def __init__(self, workspaces: Workspaces) -> None:
        self.workspaces = workspaces
        quiet = logging.getLogger("slack_bolt.MultiTeamsAuthorization")
        if _not_bolts_not_found not in quiet.filters:
            quiet.addFilter(_not_bolts_not_found)

    def __call__(
        self,
        *,
        context: BoltContext,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None,
        **_: Any,
    ) -> AuthorizeResult | None:
        org_wide = bool(context.is_enterprise_install)
        workspace = enterprise_id if org_wide or not team_id else team_id
        if not workspace:
            return None
        bound = self.workspaces._bind(workspace)
        if bound is None:
            self.workspaces.unserved(workspace)
            return None
        return AuthorizeResult(
            enterprise_id=enterprise_id,
            team_id=team_id,
            bot_user_id=bound.bot_user_id,
            bot_id=bound.bot_id,
            bot_token=bound.token or None,
            bot_scopes=json.loads(bound.row.profile).get("bot_scopes"),
        )

    def note_org_team(self, body: dict[str, Any], context: BoltContext, next: Any) -> Any:
        """Bolt middleware, after this authorize: a request of an org-wide install records the
        workspace it came from under the install, so that workspace's rows go out with the
        org's token. An event names that workspace only in its envelope's `team_id` (Slack's
        `authorizations` carry `"team_id": null` for an org-wide install, so Bolt's context has
        none); a click, a command, in the context. A Slack Connect channel's event may come
        from another org's workspace: it records nothing."""
        enterprise = context.enterprise_id
        if context.is_enterprise_install and enterprise and not body.get("is_ext_shared_channel"):
            team = context.team_id or body.get("team_id")
            if isinstance(team, str) and team and team != enterprise:
                self.workspaces.note_team(team, enterprise)
        return next()
