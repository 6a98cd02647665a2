"""Settings from the environment. A missing or malformed one stops start-up with one line that
names it (ConfigError), before anything listens or writes."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlparse

from wakeful.bot.process.env_values import LOG_FORMATS as LOG_FORMATS
from wakeful.bot.process.env_values import ConfigError as ConfigError
from wakeful.bot.process.env_values import duration, int_value, whole_duration
from wakeful.bot.process.env_values import log_format as log_format
from wakeful.bot.process.env_values import log_level as log_level
from wakeful.bot.process.env_values import switch as switch
from wakeful.core.settings import (
    DEFAULTS,
    OPS_CHANNEL,
    REDELIVERY_WINDOW,
    Settings,
)

AGENTS = ("refund-desk", "claude")
_FACTORY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_USER_ID = re.compile(r"^[UW][A-Z0-9]{2,}$")
_APPROVER_TEAM = re.compile(r"^T[A-Z0-9]{1,}$")
_CONVERSATION_ID = re.compile(r"^[CDG][A-Z0-9]{2,}$")
_WEBHOOK_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
OWN_SOURCES = frozenset({"slack", "timer", "approval"})
"""The sources wakeful stores events under itself; every other source is a webhook."""
RESERVED_SOURCES = frozenset({"github", "stripe", *OWN_SOURCES})
"""Names a WAKEFUL_WEBHOOKS entry may not take: the built-in webhook sources and our own."""
WEBHOOK_CHANNEL = "WAKEFUL_WEBHOOK_CHANNEL"
DEFAULT_API_URL = "https://slack.com/api/"
SECRET_VARIABLES = (
    "SLACK_BOT_TOKEN",
    "SLACK_APP_TOKEN",
    "SLACK_SIGNING_SECRET",
    "SLACK_CLIENT_SECRET",
    "WAKEFUL_TOKEN_KEY",
    "ANTHROPIC_API_KEY",
    "WAKEFUL_GITHUB_WEBHOOK_SECRET",
    "WAKEFUL_STRIPE_WEBHOOK_SECRET",
    "WAKEFUL_GATEWAY_TOKEN",
)


@dataclass(frozen=True)
class WebhookSource:
    """One webhook endpoint, `POST /webhooks/<name>`: how its deliveries are signed (`github`,
    `stripe` or `generic`), the secret that verifies them, and the Slack conversation their
    reports go to."""

    name: str
    scheme: str
    secret: str = field(repr=False)
    channel: str


ENGINE_SETTINGS: dict[str, tuple[str, int]] = {
    "WAKEFUL_OUTBOX_GAP": ("outbox_gap", 0),
    "WAKEFUL_LEASE_TTL": ("lease_ttl", 1),
    "WAKEFUL_MAX_ATTEMPTS": ("max_attempts", 1),
    "WAKEFUL_APPROVAL_TTL": ("approval_ttl", 1),
    "WAKEFUL_MAX_APPROVALS_PER_RUN": ("max_approvals_per_run", 1),
    "WAKEFUL_MAX_OPEN_APPROVALS": ("max_open_approvals", 1),
    "WAKEFUL_MAX_TIMERS_PER_INBOX": ("max_timers_per_inbox", 1),
    "WAKEFUL_SEND_TIMEOUT": ("send_timeout", 1),
    "WAKEFUL_BACKOFF_BASE": ("backoff_base", 1),
    "WAKEFUL_BACKOFF_CAP": ("backoff_cap", 1),
    "WAKEFUL_TOOL_RETRY_FOR": ("tool_retry_for", 1),
    "WAKEFUL_STREAM_SEGMENT": ("stream_segment", 1),
    "WAKEFUL_MEMORY_DOC_BYTES": ("memory_doc_bytes", 1),
    "WAKEFUL_MEMORY_DOCS": ("memory_docs", 1),
}
"""Environment variable -> (engine Settings field, lowest value). Defaults come from Settings."""
DURATIONS = frozenset(
    {
        "WAKEFUL_OUTBOX_GAP",
        "WAKEFUL_LEASE_TTL",
        "WAKEFUL_HEARTBEAT",
        "WAKEFUL_APPROVAL_TTL",
        "WAKEFUL_SEND_TIMEOUT",
        "WAKEFUL_BACKOFF_BASE",
        "WAKEFUL_BACKOFF_CAP",
        "WAKEFUL_TOOL_RETRY_FOR",
        "WAKEFUL_STREAM_SEGMENT",
        "WAKEFUL_RETENTION",
        "WAKEFUL_STARTUP_WAIT",
        "WAKEFUL_BATCH_WINDOW",
        "WAKEFUL_TOKEN_REFRESH_BEFORE",
    }
)
"""The settings that are spans of time: each is read by core.settings.parse_duration, so
`90`, `90s`, `15m`, `1h` and `30d` mean the same in every one of them."""


@dataclass(frozen=True)
class Config:
    """Everything a process reads from its environment; the engine's tunables in `settings`."""

    bot_token: str = ""
    signing_secret: str = ""
    app_token: str = ""
    api_url: str = DEFAULT_API_URL
    db: str = "wakeful.db"
    host: str = "0.0.0.0"
    port: int = 3000
    approvers: tuple[str, ...] = ()
    """WAKEFUL_APPROVERS: `T…:U…` (that person in that workspace) or, in single-workspace
    mode, `U…` (core/tenancy.py `is_approver`)."""
    agent: str = "refund-desk"
    sqlite_max_pages: int = 0
    batch_window: float = 0.5
    """Seconds the worker waits after a new event, so quick messages share one run."""
    startup_wait: float = 60.0
    """Seconds a process starting on PostgreSQL waits for a server that refuses or ends its
    connections before it exits (WAKEFUL_STARTUP_WAIT; 0: at once)."""
    pg_pool: int = 8
    """Most PostgreSQL connections the process's pool opens (WAKEFUL_PG_POOL), LISTEN's
    aside: what it may take of the server's `max_connections`, shared with every process."""
    anthropic_api_key: str = ""
    model: str = ""
    metrics_port: int | None = None
    """A port of its own for GET /metrics (None: none; 0 picks a free one). `serve` answers
    /metrics on its HTTP port as well."""
    log_format: str = "text"
    webhooks: tuple[WebhookSource, ...] = ()
    """The webhook endpoints served; empty when no webhook secret is set."""
    quiet_digests: bool = True
    """A digest period with nothing new posts nothing (WAKEFUL_QUIET_DIGESTS)."""
    min_digest_period: int = 60
    """The shortest digest period the built-in agents set, in seconds
    (WAKEFUL_MIN_DIGEST_PERIOD; a test or the demo sets 1 to see pacing in seconds)."""
    failure_text: str | None = None
    """Told once to a person whose message ran out of attempts (WAKEFUL_FAILURE_TEXT; None:
    the agent's own, or wakeful's)."""
    assistant: bool = True
    """The app has Agents & AI Apps (manifest `assistant_view`): show "is thinking…" in
    assistant threads (WAKEFUL_ASSISTANT)."""
    client_id: str = ""
    """SLACK_CLIENT_ID: with SLACK_CLIENT_SECRET and no SLACK_BOT_TOKEN, distribution mode
    (installed through /slack/install in any number of workspaces)."""
    client_secret: str = field(default="", repr=False)
    token_key: str = field(default="", repr=False)
    """WAKEFUL_TOKEN_KEY: the Fernet key(s) the installations' tokens are sealed with."""
    redirect_uri: str = ""
    """SLACK_REDIRECT_URI: the OAuth redirect URL (https://<host>/slack/oauth_redirect) as
    listed in the app's manifest; empty: the one Slack has for the app."""
    webhook_team: str = ""
    """WAKEFUL_WEBHOOK_TEAM: in distribution mode, the workspace webhook reports post in."""
    token_refresh_before: int = 1800
    """WAKEFUL_TOKEN_REFRESH_BEFORE: seconds before its expiry a rotating token is refreshed."""
    workspace_labels: int = 20
    """WAKEFUL_WORKSPACE_LABELS: up to this many installations, per-workspace metrics carry
    the workspace; past it they are aggregated under `all` (bounded label values)."""
    settings: Settings = field(default_factory=Settings)

    @property
    def socket_mode(self) -> bool:
        return bool(self.app_token)

    @property
    def distribution(self) -> bool:
        """Installed through OAuth in many workspaces, one token per installation."""
        return bool(self.client_id and self.client_secret and not self.bot_token)

    @property
    def authorize_url(self) -> str:
        """Slack's "Add to Slack" page, beside the Web API (an emulator serves it too)."""
        if self.api_url == DEFAULT_API_URL:
            return "https://slack.com/oauth/v2/authorize"
        return self.api_url.removesuffix("api/") + "oauth/v2/authorize"

    @classmethod
    def from_env(cls, env: Mapping[str, str], need: Collection[str] = ()) -> Config:
        """Read every setting; `need` names the ones this command cannot run without
        (`token`, `secret`, `agent`)."""
        bot_token = env.get("SLACK_BOT_TOKEN", "").strip()
        secret = env.get("SLACK_SIGNING_SECRET", "").strip()
        app_token = env.get("SLACK_APP_TOKEN", "").strip()
        oauth = _distribution(env, bot_token, app_token)
        if "token" in need and not bot_token and not oauth:
            raise ConfigError(
                "SLACK_BOT_TOKEN is not set (the bot token, xoxb-...; or SLACK_CLIENT_ID and "
                "SLACK_CLIENT_SECRET for distribution mode)"
            )
        if bot_token and not bot_token.startswith("xox"):
            raise ConfigError("SLACK_BOT_TOKEN must be a Slack token starting with 'xoxb-'")
        if app_token and not app_token.startswith("xapp-"):
            raise ConfigError("SLACK_APP_TOKEN must be an app-level token starting with 'xapp-'")
        if "secret" in need and not secret and not app_token:
            raise ConfigError(
                "SLACK_SIGNING_SECRET is not set (needed to verify requests in HTTP mode)"
            )
        agent = env.get("WAKEFUL_AGENT", "refund-desk").strip() or "refund-desk"
        if agent not in AGENTS and not _FACTORY.match(agent):
            raise ConfigError(
                f"WAKEFUL_AGENT must be one of {', '.join(AGENTS)} or module.path:factory, "
                f"got {agent!r}"
            )
        api_key = env.get("ANTHROPIC_API_KEY", "").strip()
        if agent == "claude" and "agent" in need and not api_key:
            raise ConfigError("ANTHROPIC_API_KEY is not set (required by WAKEFUL_AGENT=claude)")
        tunables = {
            name: (whole_duration if var in DURATIONS else int_value)(
                env, var, getattr(DEFAULTS, name), low
            )
            for var, (name, low) in ENGINE_SETTINGS.items()
        }
        tunables["retention"] = whole_duration(env, "WAKEFUL_RETENTION", DEFAULTS.retention, 1)
        tunables["heartbeat"] = whole_duration(env, "WAKEFUL_HEARTBEAT", DEFAULTS.heartbeat, 1, 60)
        if tunables["retention"] < REDELIVERY_WINDOW:
            raise ConfigError(
                f"WAKEFUL_RETENTION must be at least 4d ({REDELIVERY_WINDOW} s): a handled "
                "event is its own dedupe key and must outlive the longest redelivery window "
                "(Stripe retries for 3 days)"
            )
        return cls(
            bot_token=bot_token,
            signing_secret=secret,
            app_token=app_token,
            api_url=_api_url(env.get("SLACK_API_URL", "")),
            db=env.get("WAKEFUL_DB", "").strip() or cls.db,
            host=env.get("WAKEFUL_HOST", "").strip() or cls.host,
            port=int_value(env, "WAKEFUL_PORT", cls.port, 0, 65535),
            approvers=_approvers(env.get("WAKEFUL_APPROVERS", ""), distribution=bool(oauth)),
            agent=agent,
            batch_window=duration(env, "WAKEFUL_BATCH_WINDOW", cls.batch_window, 0, 60, False),
            startup_wait=duration(env, "WAKEFUL_STARTUP_WAIT", cls.startup_wait, 0, 3600, False),
            sqlite_max_pages=int_value(env, "WAKEFUL_SQLITE_MAX_PAGES", 0, 0),
            pg_pool=int_value(env, "WAKEFUL_PG_POOL", cls.pg_pool, 1, 100),
            anthropic_api_key=api_key,
            model=env.get("WAKEFUL_MODEL", "").strip(),
            metrics_port=(
                int_value(env, "WAKEFUL_METRICS_PORT", 0, 0, 65535)
                if env.get("WAKEFUL_METRICS_PORT", "").strip()
                else None
            ),
            log_format=log_format(env),
            webhooks=_webhooks(env),
            quiet_digests=switch(env, "WAKEFUL_QUIET_DIGESTS", True),
            min_digest_period=whole_duration(
                env, "WAKEFUL_MIN_DIGEST_PERIOD", cls.min_digest_period, 1, 86_400
            ),
            failure_text=env.get("WAKEFUL_FAILURE_TEXT", "").strip() or None,
            assistant=switch(env, "WAKEFUL_ASSISTANT", True),
            workspace_labels=int_value(env, "WAKEFUL_WORKSPACE_LABELS", cls.workspace_labels, 0),
            token_refresh_before=whole_duration(
                env, "WAKEFUL_TOKEN_REFRESH_BEFORE", cls.token_refresh_before, 1, 43_200
            ),
            **oauth,
            settings=Settings(
                **tunables,
                ops_channel=_ops_channel(env, oauth),
                self_approval=switch(env, "WAKEFUL_SELF_APPROVAL", True),
            ),
        )


_TEAM_ID = re.compile(r"^[TE][A-Z0-9]{2,}$")


def _distribution(env: Mapping[str, str], bot_token: str, app_token: str) -> dict[str, str]:
    """The OAuth settings, checked when distribution mode is on (client id and secret, no
    bot token): a missing or malformed token key stops start-up here, with one line."""
    client_id = env.get("SLACK_CLIENT_ID", "").strip()
    client_secret = env.get("SLACK_CLIENT_SECRET", "").strip()
    if bool(client_id) != bool(client_secret):
        missing = "SLACK_CLIENT_SECRET" if client_id else "SLACK_CLIENT_ID"
        raise ConfigError(f"{missing} is not set (distribution mode needs both, from Basic Info)")
    if not client_id or bot_token:
        return {}
    if app_token:
        raise ConfigError(
            "distribution mode serves /slack/install and /slack/oauth_redirect over HTTP: unset "
            "SLACK_APP_TOKEN (Socket Mode), or set SLACK_BOT_TOKEN for one workspace"
        )
    key = env.get("WAKEFUL_TOKEN_KEY", "").strip()
    from wakeful.bot.slack.installations import TokenCipher

    TokenCipher(key)  # ConfigError when missing or malformed
    redirect = env.get("SLACK_REDIRECT_URI", "").strip()
    if redirect and urlparse(redirect).scheme not in ("http", "https"):
        raise ConfigError(f"SLACK_REDIRECT_URI must be an http(s) URL, got {redirect!r}")
    team = env.get("WAKEFUL_WEBHOOK_TEAM", "").strip()
    if team and not _TEAM_ID.match(team):
        raise ConfigError(
            f"WAKEFUL_WEBHOOK_TEAM must be a Slack team id like T012AB3CD, got {team!r}"
        )
    return {
        "client_id": client_id,
        "client_secret": client_secret,
        "token_key": key,
        "redirect_uri": redirect,
        "webhook_team": team,
    }


def _ops_channel(env: Mapping[str, str], oauth: Mapping[str, str]) -> str:
    """WAKEFUL_OPS_CHANNEL as the engine keeps it: `C…`, or `T…:C…` with its workspace. In
    distribution mode a channel id alone is one of WAKEFUL_WEBHOOK_TEAM's workspace (start-up
    stops when that is unset: no installation's token is known to reach it)."""
    raw = env.get("WAKEFUL_OPS_CHANNEL", "").strip()
    if not raw:
        return ""
    if not OPS_CHANNEL.fullmatch(raw):
        raise ConfigError(
            "WAKEFUL_OPS_CHANNEL must be a channel id like C012AB3CD (not a #name), or "
            f"T012AB3CD:C012AB3CD with its workspace's team id first, got {raw!r}"
        )
    if ":" in raw or not oauth:
        return raw
    team = oauth.get("webhook_team", "")
    if not team:
        raise ConfigError(
            "WAKEFUL_OPS_CHANNEL names no workspace, and distribution mode posts with the "
            "token of one: write it T012AB3CD:C012AB3CD, or set WAKEFUL_WEBHOOK_TEAM"
        )
    return f"{team}:{raw}"


def secret_values(env: Mapping[str, str]) -> list[str]:
    """Every secret a process may hold, so no log line or error can show one: the secret
    settings, the database password (`user:password@` or `?password=`) and each secret of
    WAKEFUL_WEBHOOKS (read leniently: a malformed entry is a secret all the same)."""
    values = [env.get(name, "").strip() for name in SECRET_VARIABLES]
    values += [k.strip() for k in env.get("WAKEFUL_TOKEN_KEY", "").split(",")]
    db = env.get("WAKEFUL_DB", "").strip()
    if "://" in db:
        try:
            url = urlparse(db)
            passwords = [url.password or "", *parse_qs(url.query).get("password", [])]
        except ValueError:  # not a URL after all (a broken IPv6 host): all of it is the secret
            passwords = [db]
        values += [p for raw in passwords for p in (raw, unquote(raw))]
    for entry in env.get("WAKEFUL_WEBHOOKS", "").split(","):
        name, eq, secret = entry.strip().partition("=")
        values.append(secret.strip() if eq else name)
    return [v for v in values if v]


def _api_url(raw: str) -> str:
    raw = raw.strip()
    if not raw:
        return DEFAULT_API_URL
    parsed = urlparse(raw)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ConfigError(f"SLACK_API_URL must be an http(s) URL, got {raw!r}")
    return raw if raw.endswith("/") else raw + "/"


def _approvers(raw: str, distribution: bool = False) -> tuple[str, ...]:
    """WAKEFUL_APPROVERS: `T…:U…` (that person in that workspace) or `U…` (that person,
    single-workspace mode only: in distribution mode a user id alone would not say where
    they approve, so start-up stops naming the setting)."""
    ids = tuple(p.strip() for p in raw.split(",") if p.strip())
    for entry in ids:
        team, sep, user = entry.rpartition(":")
        if not _USER_ID.match(user) or (sep and not _APPROVER_TEAM.match(team)):
            raise ConfigError(
                "WAKEFUL_APPROVERS must be comma-separated Slack user ids like U012AB3CD, or "
                f"T012AB3CD:U012AB3CD for that person in that workspace, got {entry!r}"
            )
        if distribution and not sep:
            raise ConfigError(
                "WAKEFUL_APPROVERS: in distribution mode name each approver with their "
                f"workspace, T012AB3CD:{user} (a user id alone, {entry!r}, says not where "
                "they approve)"
            )
    return ids


def _webhooks(env: Mapping[str, str]) -> tuple[WebhookSource, ...]:
    """The endpoints whose secret is set: GitHub, Stripe and each `name=secret` of
    WAKEFUL_WEBHOOKS, each reporting to its WAKEFUL_WEBHOOK_CHANNEL_<NAME> or else to
    WAKEFUL_WEBHOOK_CHANNEL (required as soon as one secret is set)."""
    found: list[tuple[str, str, str]] = []
    github = env.get("WAKEFUL_GITHUB_WEBHOOK_SECRET", "").strip()
    if github:
        found.append(("github", "github", github))
    stripe = env.get("WAKEFUL_STRIPE_WEBHOOK_SECRET", "").strip()
    if stripe:
        if not stripe.startswith("whsec_"):
            raise ConfigError(
                "WAKEFUL_STRIPE_WEBHOOK_SECRET must be the endpoint's signing secret, "
                "starting with 'whsec_'"
            )
        found.append(("stripe", "stripe", stripe))
    found.extend((name, "generic", secret) for name, secret in _named_secrets(env))
    known = {"GITHUB", "STRIPE", *(name.upper() for name, _, _ in found)}
    for var in sorted(env):
        suffix = var.removeprefix(WEBHOOK_CHANNEL + "_")
        if var != suffix and suffix not in known:
            raise ConfigError(
                f"{var} names no webhook: use {WEBHOOK_CHANNEL}_<NAME> with GITHUB, STRIPE or "
                "a name listed in WAKEFUL_WEBHOOKS"
            )
    if not found:
        return ()
    default = env.get(WEBHOOK_CHANNEL, "").strip()
    if not default:
        raise ConfigError(
            f"{WEBHOOK_CHANNEL} is not set (the Slack conversation id webhook reports go to, "
            "required when a webhook secret is set)"
        )
    _conversation(WEBHOOK_CHANNEL, default)
    sources = []
    for name, scheme, secret in found:
        var = f"{WEBHOOK_CHANNEL}_{name.upper()}"
        channel = env.get(var, "").strip() or default
        sources.append(WebhookSource(name, scheme, secret, _conversation(var, channel)))
    return tuple(sources)


def _named_secrets(env: Mapping[str, str]) -> list[tuple[str, str]]:
    """WAKEFUL_WEBHOOKS: comma-separated `name=secret`; a secret may hold `=`, not `,`."""
    out: list[tuple[str, str]] = []
    for entry in (p.strip() for p in env.get("WAKEFUL_WEBHOOKS", "").split(",")):
        if not entry:
            continue
        name, eq, secret = (part.strip() for part in entry.partition("="))
        if not eq:  # the entry may be a secret pasted without its name: it is not shown
            raise ConfigError("WAKEFUL_WEBHOOKS entries must be name=secret; one has no '='")
        if not secret:
            raise ConfigError(
                f"WAKEFUL_WEBHOOKS entries must be name=secret, got {name!r} without a secret"
            )
        if not _WEBHOOK_NAME.match(name):
            raise ConfigError(
                f"WAKEFUL_WEBHOOKS: {name!r} is not a webhook name (lower-case letters, digits "
                "and _, starting with a letter, at most 32)"
            )
        if name in RESERVED_SOURCES:
            raise ConfigError(
                f"WAKEFUL_WEBHOOKS: {name!r} is reserved (github and stripe have their own "
                "secret settings; slack, timer and approval are wakeful's own sources)"
            )
        if any(name == seen for seen, _ in out):
            raise ConfigError(f"WAKEFUL_WEBHOOKS lists {name!r} twice")
        out.append((name, secret))
    return out


def _conversation(var: str, value: str) -> str:
    if not _CONVERSATION_ID.match(value):
        raise ConfigError(
            f"{var} must be a Slack conversation id like C012AB3CD (not a #name), got {value!r}"
        )
    return value
