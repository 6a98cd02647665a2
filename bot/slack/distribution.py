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
from pathlib import Path

from slack_bolt.oauth.oauth_settings import OAuthSettings
from slack_sdk import WebClient

from wakeful.bot.process.config import Config, ConfigError
from wakeful.bot.slack.installations import (
    STATE_SECONDS,
    StoreInstallations,
    StoreStates,
    TokenCipher,
)
from wakeful.bot.slack.scopes import find_manifest, manifest_scopes
from wakeful.bot.slack.workspaces import QUIET, InstallationAuthorize, Workspaces
from wakeful.core.store import Store

log = logging.getLogger("wakeful")
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

    def oauth_settings(self, manifest: str | None = None) -> OAuthSettings:
        """Bolt's OAuth flow on wakeful's stores: the scopes the manifest asks for (`manifest`,
        `serve --manifest`), state values good once for 10 minutes, the "Add to Slack" page at
        /slack/install."""
        scopes = install_scopes(manifest)
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


def install_scopes(manifest: str | None = None) -> list[str]:
    """The bot scopes an install asks for: those of `manifest` when given, else of
    ./manifest.yml, else of the manifest beside a checkout's source. An installed wheel ships
    none, so without one of those start-up stops with one line saying how to name it."""
    if manifest and not Path(manifest).is_file():
        raise ConfigError(f"--manifest: no such file {manifest!r}")
    path = find_manifest(manifest)
    if path is None:
        raise ConfigError(
            "distribution mode asks Slack for the bot scopes of your app's manifest.yml, and "
            "there is none in the current folder (an installed wakeful ships none): run from the "
            "folder holding it, or name it with --manifest"
        )
    try:
        scopes = manifest_scopes(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"the manifest {str(path)!r} cannot be read: {exc}") from None
    if not scopes:
        raise ConfigError(f"{str(path)!r} lists no bot scopes (oauth_config.scopes.bot)")
    log.info("distribution: installs ask for the %d bot scopes of %s", len(scopes), path)
    return scopes
