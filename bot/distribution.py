"""Distribution mode assembled: the installation and state stores on wakeful's store, the
per-workspace tokens, and Bolt's OAuthSettings for /slack/install and /slack/oauth_redirect.

On when SLACK_CLIENT_ID and SLACK_CLIENT_SECRET are set and SLACK_BOT_TOKEN is not (see
docs/distributing.md); with SLACK_BOT_TOKEN nothing here runs and the app serves its one
workspace exactly as before.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from slack_bolt.oauth.oauth_settings import OAuthSettings
from slack_sdk import WebClient

from wakeful.bot.config import Config, ConfigError
from wakeful.bot.installations import STATE_SECONDS, StoreInstallations, StoreStates, TokenCipher
from wakeful.bot.scopes import required_scopes
from wakeful.bot.workspaces import QUIET, InstallationAuthorize, Workspaces
from wakeful.core.store import Store

ALL = "all"
"""The workspace label of per-workspace metrics past WAKEFUL_WORKSPACE_LABELS installations."""


@dataclass
class Distribution:
    """Everything distribution mode adds to a process, built once from its settings."""

    config: Config
    store: Store
    installations: StoreInstallations
    workspaces: Workspaces
    clock: Callable[[], int]

    def __post_init__(self) -> None:
        self._count: tuple[float, int] | None = None
        self._count_lock = threading.Lock()

    @classmethod
    def build(
        cls, config: Config, store: Store, clock: Callable[[], int] = lambda: int(time.time())
    ) -> Distribution:
        cipher = TokenCipher(config.token_key)
        workspaces: Workspaces | None = None

        def changed(workspace: str) -> None:
            if workspaces is not None:
                workspaces.forget(workspace)

        installations = StoreInstallations(store, cipher, clock, on_change=changed)
        workspaces = Workspaces(
            store,
            installations,
            config.client_id,
            config.client_secret,
            config.api_url,
            clock=clock,
            webhook_team=config.webhook_team,
            token_refresh_before=config.token_refresh_before,
        )
        return cls(config, store, installations, workspaces, clock)

    def oauth_settings(self) -> OAuthSettings:
        """Bolt's OAuth flow on wakeful's stores: the scopes manifest.yml asks for, state
        values good once for 10 minutes, the "Add to Slack" page at /slack/install."""
        scopes = required_scopes()
        if not scopes:
            raise ConfigError(
                "distribution mode asks Slack for the bot scopes of manifest.yml, and none was "
                "found (run from the folder holding it)"
            )
        return OAuthSettings(
            client_id=self.config.client_id,
            client_secret=self.config.client_secret,
            scopes=scopes,
            redirect_uri=self.config.redirect_uri or None,
            install_path="/slack/install",
            redirect_uri_path="/slack/oauth_redirect",
            installation_store=self.installations,
            state_store=StoreStates(self.store, STATE_SECONDS, self.clock),
            state_expiration_seconds=STATE_SECONDS,
            authorization_url=self.config.authorize_url,
            logger=logging.getLogger("wakeful.oauth"),
        )

    def oauth_client(self) -> WebClient:
        """The client Bolt's OAuth flow exchanges a code with (oauth.v2.access, auth.test)."""
        return WebClient(base_url=self.config.api_url, timeout=10, retry_handlers=[], logger=QUIET)

    def authorize(self) -> InstallationAuthorize:
        return InstallationAuthorize(self.workspaces)

    def workspace_label(self, team: str) -> str:
        """`team` as a metric label while installations number at most
        WAKEFUL_WORKSPACE_LABELS, else `all`: label values stay bounded however many
        workspaces install the app (the count is read at most once a minute)."""
        now = time.monotonic()
        with self._count_lock:
            if self._count is None or now - self._count[0] > 60:
                self._count = (now, self.store.active_installations())
            count = self._count[1]
        return team if team and count <= self.config.workspace_labels else ALL
