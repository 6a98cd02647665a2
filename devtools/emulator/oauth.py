"""Slack's OAuth v2 and its workspaces: the "Add to Slack" page, oauth.v2.access (code and
refresh grants, token rotation), auth.revoke, and one bot token per installed workspace.

As Slack documents it (https://api.slack.com/authentication/oauth-v2 and token rotation):
a code is good once for 10 minutes and only with the redirect_uri it was issued for; the
client id and secret come as HTTP Basic auth (slack_sdk's way) or as form fields; with
rotation on, a bot token starts `xoxe.xoxb-` and expires after `token_ttl` seconds (12 hours),
and its refresh token is single-use: the second use answers `invalid_refresh_token`. A token
refreshed away stays good until its own expiry. What the emulator cannot know, it does not
invent: a workspace installs only when a test sends a browser to the authorize page for it.
"""

from __future__ import annotations

import base64
import itertools
import secrets
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from wakeful.devtools.emulator.common import JsonDict, _SlackError

CODE_SECONDS = 600


@dataclass
class Workspace:
    """One workspace (or an Enterprise Grid org, for an org-wide install) and its bot."""

    team_id: str
    bot_user_id: str
    bot_id: str
    name: str = ""
    enterprise_id: str | None = None
    org_wide: bool = False
    installed: bool = False
    installer: str = "UINSTALLER"

    @property
    def key(self) -> str:
        return str(self.enterprise_id) if self.org_wide else self.team_id


@dataclass
class Grant:
    """A token the emulator handed out."""

    workspace: Workspace
    kind: str  # bot | refresh
    expires_at: float | None = None
    revoked: bool = False
    used: bool = False  # a refresh token, once


@dataclass
class OAuthState:
    codes: dict[str, tuple[Workspace, str | None, float]] = field(default_factory=dict)
    grants: dict[str, Grant] = field(default_factory=dict)


class OAuthApi:
    """The OAuth half of the emulator (mixed into SlackEmulator; state behind its lock)."""

    _cond: threading.Condition
    _clock: Callable[[], float]
    client_id: str
    client_secret: str
    rotation: bool
    token_ttl: int
    scopes: list[str]
    _workspaces: dict[str, Workspace]
    _oauth: OAuthState
    _serial: itertools.count[int]
    redirect_uri: str = ""
    """The app's redirect URL, as its settings (manifest `oauth_config.redirect_urls`) name
    it: used when the authorize request names none."""

    # -- scripting -------------------------------------------------------------------------

    def add_workspace(
        self,
        team_id: str,
        *,
        bot_user_id: str | None = None,
        bot_id: str | None = None,
        name: str = "",
        enterprise_id: str | None = None,
        org_wide: bool = False,
        installer: str = "UINSTALLER",
    ) -> Workspace:
        """A workspace the app can be installed in (through the authorize page)."""
        suffix = team_id.removeprefix("T").removeprefix("E")
        ws = Workspace(
            team_id=team_id,
            bot_user_id=bot_user_id or f"UB{suffix}",
            bot_id=bot_id or f"BB{suffix}",
            name=name or f"Workspace {team_id}",
            enterprise_id=enterprise_id,
            org_wide=org_wide,
            installer=installer,
        )
        with self._cond:
            self._workspaces[ws.key] = ws
        return ws

    def add_org(self, enterprise_id: str, *, name: str = "", installer: str = "") -> Workspace:
        """An Enterprise Grid org the app can be installed in org-wide (one install, one bot
        token for every workspace of the org; their people's requests come from an
        EventSender with `enterprise_id` and `org_install`): the authorize page takes
        `team=<enterprise_id>`."""
        return self.add_workspace(
            enterprise_id,
            name=name or f"Org {enterprise_id}",
            enterprise_id=enterprise_id,
            org_wide=True,
            installer=installer or f"W{enterprise_id.removeprefix('E')}ADMIN",
        )

    def tokens_of(self, team_id: str, kind: str = "bot") -> list[str]:
        """Every token of `kind` handed out for the workspace, oldest first."""
        with self._cond:
            return [
                t
                for t, g in self._oauth.grants.items()
                if g.workspace.key == team_id and g.kind == kind
            ]

    def team_of(self, token: str | None) -> str | None:
        """The workspace a token belongs to (None: not one of the emulator's)."""
        with self._cond:
            grant = self._oauth.grants.get(token or "")
            return None if grant is None else grant.workspace.key

    def uninstall(self, team_id: str) -> None:
        """The workspace removed the app: every token of it stops working at once."""
        with self._cond:
            for grant in self._oauth.grants.values():
                if grant.workspace.key == team_id:
                    grant.revoked = True
            ws = self._workspaces.get(team_id)
            if ws is not None:
                ws.installed = False

    def expire_tokens(self, team_id: str, in_seconds: float = 0) -> None:
        """Make the workspace's bot tokens expire `in_seconds` from now (rotation tests)."""
        with self._cond:
            at = self._clock() + in_seconds
            for grant in self._oauth.grants.values():
                if grant.workspace.key == team_id and grant.kind == "bot":
                    grant.expires_at = at

    # -- the browser's side ------------------------------------------------------------------

    def authorize_page(self, query: JsonDict) -> tuple[int, str, dict[str, str]]:
        """GET /oauth/v2/authorize: the person approves at once, in `team` (a query field the
        test adds to pick the workspace; Slack asks the person instead). A 302 back to the
        redirect URI with a code and the state, as Slack sends it."""
        if query.get("client_id") != self.client_id:
            return 400, "invalid client_id", {}
        redirect = str(query.get("redirect_uri") or self.redirect_uri)
        if not redirect:
            return 400, "no redirect_uri, and none set as the app's (redirect_uri)", {}
        team = str(query.get("team") or "")
        with self._cond:
            ws = self._workspaces.get(team)
            if ws is None:
                return 400, f"no workspace {team!r} (add_workspace first)", {}
            code = f"{self._clock():.0f}.{secrets.token_hex(8)}"
            self._oauth.codes[code] = (ws, redirect, self._clock() + CODE_SECONDS)
        back = {"code": code, "state": str(query.get("state") or "")}
        sep = "&" if "?" in redirect else "?"
        return 302, "", {"Location": redirect + sep + urllib.parse.urlencode(back)}

    # -- Web API methods ---------------------------------------------------------------------

    def _client_ok(self, params: JsonDict, auth: str | None) -> bool:
        client_id, secret = params.get("client_id"), params.get("client_secret")
        if auth and auth.startswith("Basic "):
            try:
                raw = base64.b64decode(auth.removeprefix("Basic ").strip()).decode()
            except ValueError:
                return False
            client_id, _, secret = raw.partition(":")
        return client_id == self.client_id and secret == self.client_secret

    def _oauth_v2_access(self, params: JsonDict, auth: str | None) -> JsonDict:
        if not self._client_ok(params, auth):
            raise _SlackError(
                "invalid_client_id" if not params.get("client_id") else "bad_client_secret"
            )
        now = self._clock()
        if params.get("grant_type") == "refresh_token":
            grant = self._oauth.grants.get(str(params.get("refresh_token") or ""))
            if grant is None or grant.kind != "refresh" or grant.used or grant.revoked:
                raise _SlackError("invalid_refresh_token")
            grant.used = True
            ws = grant.workspace
            return {**self._mint(ws, now), "token_type": "bot"}
        code = str(params.get("code") or "")
        found = self._oauth.codes.pop(code, None)
        if found is None or found[2] < now:
            raise _SlackError("invalid_code")
        ws, redirect, _ = found
        if params.get("redirect_uri") and params.get("redirect_uri") != redirect:
            raise _SlackError("bad_redirect_uri")
        ws.installed = True
        answer: JsonDict = {
            **self._mint(ws, now),
            "token_type": "bot",
            "scope": ",".join(self.scopes),
            "bot_user_id": ws.bot_user_id,
            "app_id": "AEMULATOR",
            # An org-wide install (Slack's org app reference): "team": null, the org in
            # "enterprise", "is_enterprise_install": true.
            "team": None if ws.org_wide else {"name": ws.name, "id": ws.team_id},
            "enterprise": (
                None if ws.enterprise_id is None else {"name": ws.name, "id": ws.enterprise_id}
            ),
            "authed_user": {"id": ws.installer},
            "is_enterprise_install": ws.org_wide,
        }
        return answer

    def _mint(self, ws: Workspace, now: float) -> JsonDict:
        """A new bot token for `ws` (and, with rotation, its single-use refresh token)."""
        n = next(self._serial)
        if not self.rotation:
            token = f"xoxb-{ws.key}-{n}-{secrets.token_hex(6)}"
            self._oauth.grants[token] = Grant(ws, "bot")
            return {"access_token": token}
        token = f"xoxe.xoxb-1-{ws.key}-{n}-{secrets.token_hex(6)}"
        refresh = f"xoxe-1-{ws.key}-{n}-{secrets.token_hex(8)}"
        self._oauth.grants[token] = Grant(ws, "bot", expires_at=now + self.token_ttl)
        self._oauth.grants[refresh] = Grant(ws, "refresh")
        return {"access_token": token, "refresh_token": refresh, "expires_in": self.token_ttl}

    def _caller(self, token: str) -> Workspace | str:
        """The workspace a Web API token speaks for, or Slack's error code for it."""
        grant = self._oauth.grants.get(token)
        if grant is None or grant.kind != "bot":
            return "invalid_auth"
        if grant.revoked:
            return "token_revoked"
        if grant.expires_at is not None and grant.expires_at <= self._clock():
            return "token_expired"
        return grant.workspace

    def _auth_revoke(self, params: JsonDict, token: str) -> JsonDict:
        """The calling token revoked; `test=1` only says what would happen (Slack's testing
        mode: the token stays good, and the answer says it was not revoked)."""
        if str(params.get("test", "")).lower() in ("1", "true"):
            return {"revoked": False}
        grant = self._oauth.grants.get(token)
        if grant is not None:
            grant.revoked = True
        return {"revoked": True}

    @staticmethod
    def no_token_methods() -> frozenset[str]:
        return frozenset({"oauth.v2.access"})

    def _oauth_answer(self, method: str, params: JsonDict, auth: str | None) -> Any:
        return self._oauth_v2_access(params, auth)
