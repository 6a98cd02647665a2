"""Bolt's installation store and OAuth state store, implemented on wakeful's store.

Bolt's OAuth flow (`OAuthSettings`) saves each workspace's installation through
`StoreInstallations` and hands out and checks its `state` values through `StoreStates`; with no
store configured it would fall back to local files, which other hosts cannot read. Tokens are
sealed with WAKEFUL_TOKEN_KEY (`cryptography`'s Fernet) before they reach the store: the store,
a backup, `inspect` and every log see ciphertext only.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any

from slack_sdk.oauth.installation_store import Bot, Installation, InstallationStore
from slack_sdk.oauth.state_store import OAuthStateStore

from wakeful.bot.process.env_values import ConfigError
from wakeful.core.errors import WakefulError
from wakeful.core.store import Store
from wakeful.core.store.installations import InstallationRow, SetAside, Status, workspace_key

log = logging.getLogger("wakeful.installations")
SECRET_FIELDS = (
    "bot_token",
    "bot_refresh_token",
    "user_token",
    "user_refresh_token",
    "incoming_webhook_url",
)
"""What an installation holds that grants access: sealed, never in the profile."""
PROFILE_FIELDS = (
    "app_id",
    "enterprise_id",
    "enterprise_name",
    "enterprise_url",
    "team_id",
    "team_name",
    "bot_id",
    "bot_user_id",
    "bot_scopes",
    "user_id",
    "user_scopes",
    "user_token_expires_at",
    "incoming_webhook_channel",
    "incoming_webhook_channel_id",
    "incoming_webhook_configuration_url",
    "is_enterprise_install",
    "token_type",
    "installed_at",
)
STATE_SECONDS = 600
"""An OAuth state value is good for 10 minutes, once."""
KEY_HINT = (
    'make one with: python -c "from cryptography.fernet import Fernet; '
    'print(Fernet.generate_key().decode())"'
)


class UnreadableTokens(WakefulError):
    """An installation's tokens cannot be opened with WAKEFUL_TOKEN_KEY (another key sealed
    them, or the stored text was altered)."""


class TokenCipher:
    """WAKEFUL_TOKEN_KEY: one Fernet key, or several separated by commas (the first seals,
    every one opens: a new key goes first, the old one stays until every row was saved
    again)."""

    def __init__(self, keys: str) -> None:
        try:
            from cryptography.fernet import Fernet, MultiFernet
        except ImportError:
            raise ConfigError(
                "distribution mode needs the cryptography package: "
                "pip install 'wakeful[distribution]'"
            ) from None
        parts = [k.strip() for k in keys.split(",") if k.strip()]
        if not parts:
            raise ConfigError(
                "WAKEFUL_TOKEN_KEY is not set (distribution mode stores every workspace's "
                f"tokens encrypted with it; {KEY_HINT})"
            )
        fernets = []
        for i, key in enumerate(parts, 1):
            try:
                fernets.append(Fernet(key.encode()))
            except (ValueError, TypeError):
                raise ConfigError(
                    f"WAKEFUL_TOKEN_KEY key {i} is not a Fernet key (32 url-safe base64-encoded "
                    f"bytes; {KEY_HINT})"
                ) from None
        self._fernet = MultiFernet(fernets)

    def seal(self, values: Mapping[str, str | None]) -> str:
        present = {k: v for k, v in values.items() if v}
        return self._fernet.encrypt(json.dumps(present).encode()).decode("ascii")

    def open(self, sealed: str, workspace: str = "") -> dict[str, str]:
        from cryptography.fernet import InvalidToken

        try:
            opened: dict[str, str] = json.loads(self._fernet.decrypt(sealed.encode("ascii")))
        except (InvalidToken, ValueError, UnicodeError):
            raise UnreadableTokens(
                f"the tokens of workspace {workspace or '?'} cannot be opened with "
                "WAKEFUL_TOKEN_KEY (sealed with another key?)"
            ) from None
        return opened


def to_row(installation: Installation, cipher: TokenCipher) -> InstallationRow:
    """An installation as the store keeps it: the profile in clear, the tokens sealed."""
    org_wide = bool(installation.is_enterprise_install)
    values = vars(installation)
    profile = {k: values.get(k) for k in PROFILE_FIELDS}
    return InstallationRow(
        workspace=workspace_key(installation.enterprise_id, installation.team_id, org_wide),
        enterprise_id=installation.enterprise_id,
        team_id=installation.team_id,
        org_wide=org_wide,
        profile=json.dumps(profile),
        secrets=cipher.seal({k: values.get(k) for k in SECRET_FIELDS}),
        expires_at=installation.bot_token_expires_at,
    )


def from_row(row: InstallationRow, cipher: TokenCipher) -> Installation:
    """The installation back, tokens opened (only in memory, only when a call needs them)."""
    profile: dict[str, Any] = json.loads(row.profile)
    tokens = cipher.open(row.secrets, row.workspace)
    fields = {**profile, **tokens, "bot_token_expires_at": row.expires_at}
    fields["user_id"] = fields.get("user_id") or ""
    return Installation(**fields)


class StoreInstallations(InstallationStore):
    """slack_sdk's InstallationStore on wakeful's store: one installation per workspace (the
    latest), any host reads what another saved. `on_change` is told the workspace whenever
    an installation is saved or ends, so caches of this process forget it at once."""

    def __init__(
        self,
        store: Store,
        cipher: TokenCipher,
        clock: Callable[[], int] = lambda: int(time.time()),
        on_change: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.cipher = cipher
        self.clock = clock
        self.on_change = on_change

    @property
    def logger(self) -> logging.Logger:
        return log

    def save(self, installation: Installation) -> None:
        row = to_row(installation, self.cipher)
        self.store.save_installation(row, self.clock())
        log.info("installed in workspace %s (%s)", row.workspace, installation.team_name or "")
        self._changed(row.workspace)

    def save_bot(self, bot: Bot) -> None:
        """A bot's tokens (Bolt's bot-only path): kept with the workspace's installation."""
        found = self.find_installation(
            enterprise_id=bot.enterprise_id,
            team_id=bot.team_id,
            is_enterprise_install=bot.is_enterprise_install,
        )
        base = found.to_dict_for_copying() if found is not None else {"user_id": ""}
        base.update(
            {
                k: getattr(bot, k)
                for k in (
                    "app_id",
                    "enterprise_id",
                    "team_id",
                    "bot_token",
                    "bot_id",
                    "bot_user_id",
                    "bot_scopes",
                    "bot_refresh_token",
                    "bot_token_expires_at",
                    "is_enterprise_install",
                )
            }
        )
        base.pop("custom_values", None)
        self.save(Installation(**base))

    def find_installation(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None = None,
        is_enterprise_install: bool | None = False,
    ) -> Installation | None:
        row = self.find_row(enterprise_id, team_id, bool(is_enterprise_install))
        if row is None:
            return None
        installation = from_row(row, self.cipher)
        if user_id is not None and installation.user_id != user_id:
            return None  # only the installer's own installation is kept
        return installation

    def find_row(
        self, enterprise_id: str | None, team_id: str | None, org_wide: bool
    ) -> InstallationRow | None:
        """The active installation of the request's workspace (sealed), or None."""
        try:
            workspace = workspace_key(enterprise_id, team_id, org_wide)
        except ValueError:
            return None
        row = self.store.installation(workspace)
        if row is None and team_id and enterprise_id and not org_wide:
            row = self.store.installation(enterprise_id)  # a team under an org-wide install
            if row is not None and not row.org_wide:
                row = None
        return row if row is not None and row.status == "active" else None

    def find_bot(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        is_enterprise_install: bool | None = False,
    ) -> Bot | None:
        found = self.find_installation(
            enterprise_id=enterprise_id,
            team_id=team_id,
            is_enterprise_install=is_enterprise_install,
        )
        return None if found is None or not found.bot_token else found.to_bot()

    def delete_bot(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        self.end(enterprise_id, team_id, "revoked", "the bot token was revoked")

    def delete_installation(
        self, *, enterprise_id: str | None, team_id: str | None, user_id: str | None = None
    ) -> None:
        if user_id is None:
            self.end(enterprise_id, team_id, "uninstalled", "the app was uninstalled")

    def delete_all(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        self.end(enterprise_id, team_id, "uninstalled", "the app was uninstalled")

    def end(
        self,
        enterprise_id: str | None,
        team_id: str | None,
        status: Status,
        reason: str,
        org_wide: bool | None = None,
        issued_at: int | None = None,
    ) -> SetAside | None:
        """The workspace's installation ends: tokens gone, the workspace set aside (see
        core/store/installations.py). None when it was never installed here."""
        workspaces = self._candidates(enterprise_id, team_id, org_wide)
        for workspace in workspaces:
            done = self.store.end_installation(
                workspace, status, reason, self.cipher.seal({}), self.clock(), issued_at
            )
            if done is not None:
                log.warning(
                    "workspace %s: %s; %d outbox row(s) parked, %d timer(s) cancelled, "
                    "%d inbox(es) set aside until it is installed again",
                    workspace,
                    reason,
                    done.parked,
                    done.cancelled,
                    done.inboxes,
                )
                self._changed(workspace)
                return done
        return None

    @staticmethod
    def _candidates(
        enterprise_id: str | None, team_id: str | None, org_wide: bool | None
    ) -> list[str]:
        if org_wide:
            return [enterprise_id] if enterprise_id else []
        found = [w for w in (team_id, enterprise_id) if w]
        return found if org_wide is None else found[:1]

    def _changed(self, workspace: str) -> None:
        if self.on_change is not None:
            self.on_change(workspace)


class StoreStates(OAuthStateStore):
    """slack_sdk's OAuthStateStore on wakeful's store: a state value is random, good once and
    for `expiration_seconds` (10 minutes), whichever host the browser comes back to."""

    def __init__(
        self,
        store: Store,
        expiration_seconds: int = STATE_SECONDS,
        clock: Callable[[], int] = lambda: int(time.time()),
    ) -> None:
        self.store = store
        self.expiration_seconds = expiration_seconds
        self.clock = clock

    @property
    def logger(self) -> logging.Logger:
        return log

    def issue(self, *args: Any, **kwargs: Any) -> str:
        state = secrets.token_urlsafe(32)
        now = self.clock()
        self.store.issue_state(state, now + self.expiration_seconds, now)
        return state

    def consume(self, state: str) -> bool:
        return self.store.consume_state(state, self.clock())
