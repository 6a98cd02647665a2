"""`wakeful doctor`: every setting this host runs with, checked against the real thing.

One line per check (`ok`, `FAIL`, or `skip` with the reason), in the order a start-up meets
them: the settings, the store (reachable, migrations current, SQLite in WAL with synchronous
FULL, integrity on request, the database server's clock), Slack (the token by auth.test, the
scopes it was granted against the manifest's, Slack's clock, the bot's place in
WAKEFUL_OPS_CHANNEL when set), the signing secret (set or not: only Slack can tell a wrong
one), the agent (WAKEFUL_AGENT loads), and the Anthropic key when the Claude agent is on. The
exit status is 1 when any check failed. It changes nothing: the store is probed before it is
opened, and never migrated, and nothing is posted.
"""

from __future__ import annotations

import email.utils
import importlib.util
import os
import sqlite3
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from wakeful.bot.process.config import Config, ConfigError
from wakeful.bot.slack.scopes import find_manifest, required_scopes
from wakeful.core.errors import StoreError, WakefulError
from wakeful.core.logs import one_line
from wakeful.core.store import open_store
from wakeful.core.store.installations import InstallationRow
from wakeful.core.store.probe import Probe, probe

CLOCK_SKEW = 5.0
"""Seconds a clock may differ from this host's: leases, backoffs and timers compare times
taken on different hosts, and Slack refuses request signatures 5 minutes off."""
_DURABLE_PG = ("on", "remote_apply", "remote_write", "local")


class DoctorStore(Protocol):
    """The store as the doctor opens it (the rest it learns from `probe`, before opening)."""

    def store_synchronous(self) -> str: ...

    def installations(self) -> list[InstallationRow]: ...

    def installation_for_team(self, team: str) -> InstallationRow | None: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool | None
    """True passed, False failed, None skipped (the detail says why)."""
    detail: str

    def line(self) -> str:
        """One line, whatever the detail held (a server's message may span several)."""
        mark = "skip" if self.ok is None else "ok" if self.ok else "FAIL"
        return f"{mark:<5}{self.name:<16}{one_line(self.detail)}"


def run_checks(
    env: Mapping[str, str],
    integrity: bool = False,
    manifest: str | None = None,
    clock: Callable[[], float] = time.time,
) -> list[Check]:
    try:
        config = Config.from_env(env)
    except ConfigError as exc:
        return [Check("settings", False, str(exc))]
    checks = [Check("settings", True, "every variable parses")]
    checks += _store_checks(config, integrity)
    if config.distribution:
        checks += _installation_checks(config, manifest)
    else:
        checks += _slack_checks(config, manifest, clock)
    if config.settings.ops_channel:
        checks.append(_ops_channel(config))
    if config.socket_mode:
        checks.append(Check("signing secret", None, "Socket Mode (SLACK_APP_TOKEN): not used"))
    elif config.signing_secret:
        checks.append(Check("signing secret", True, SECRET_SET))
    else:
        checks.append(
            Check("signing secret", False, "SLACK_SIGNING_SECRET is not set (HTTP mode needs it)")
        )
    checks.append(_agent(config, env))
    if config.agent == "claude":
        checks.append(_anthropic(config))
    return checks


SECRET_SET = "set (cannot check it against Slack; a wrong one shows as refused requests in the log)"


def _agent(config: Config, env: Mapping[str, str]) -> Check:
    """WAKEFUL_AGENT loads: its module imports (WAKEFUL_AGENT_PATH), its factory exists and
    takes one setup. The factory is not called: that needs the store and Slack."""
    from wakeful.bot.process.loading import load_factory

    try:
        load_factory(config.agent, env)
    except ConfigError as exc:
        return Check("agent", False, str(exc))
    except Exception as exc:  # the module itself failed while importing: its own bug
        return Check("agent", False, f"WAKEFUL_AGENT {config.agent!r} failed to import: {exc!r}")
    return Check("agent", True, f"{config.agent} loads")


def _store_checks(config: Config, integrity: bool) -> list[Check]:
    try:
        found = probe(config.db)
    except StoreError as exc:  # a server that cannot be reached, or refuses the address
        return [Check("store", False, f"unreachable: {exc}")]
    except WakefulError as exc:  # no store there, or not a store URL: said as it is
        return [Check("store", False, str(exc))]
    except Exception as exc:  # any driver or file error: the store is not usable
        return [Check("store", False, f"unreachable: {exc}")]  # one line: Check.line
    checks = [Check("store", True, f"{found.dialect} reachable")]
    checks.append(Check("migrations", found.current, found.state()))
    if found.dialect == "sqlite":
        wal = found.journal_mode == "wal"
        checks.append(Check("journal", wal, f"journal_mode={found.journal_mode}"))
    else:
        checks.append(_skew("db clock", found.clock_skew, "the database server"))
    checks.append(_durability(config, found))
    checks.append(_integrity(config, found, integrity))
    return checks


def _durability(config: Config, found: Probe) -> Check:
    if not found.current:
        return Check("durability", None, "not checked: the store is not at this schema")
    try:
        store: DoctorStore = open_store(config.db, config.settings, migrate=False)
    except WakefulError as exc:
        return Check("durability", False, f"cannot open the store: {exc}")
    try:
        level = store.store_synchronous()
    finally:
        store.close()
    if found.dialect == "sqlite":
        names = {"0": "OFF", "1": "NORMAL", "2": "FULL", "3": "EXTRA"}
        name = names.get(level, level)
        return Check("durability", name in ("FULL", "EXTRA"), f"synchronous={name}")
    return Check("durability", level in _DURABLE_PG, f"synchronous_commit={level}")


def _integrity(config: Config, found: Probe, wanted: bool) -> Check:
    if not wanted:
        return Check("integrity", None, "not checked (--integrity reads every page)")
    if found.dialect != "sqlite":
        return Check("integrity", None, "PostgreSQL: use pg_amcheck")
    path = os.path.abspath(config.db.removeprefix("sqlite:///"))
    conn = sqlite3.connect(f"file:{urllib.parse.quote(path)}?mode=ro", uri=True)
    try:
        rows = [str(r[0]) for r in conn.execute("PRAGMA integrity_check").fetchall()]
    except sqlite3.DatabaseError as exc:
        rows = [str(exc)]
    finally:
        conn.close()
    return Check("integrity", rows == ["ok"], "; ".join(rows[:3]))


def _slack_checks(config: Config, manifest: str | None, clock: Callable[[], float]) -> list[Check]:
    if not config.bot_token:
        return [Check("slack token", False, "SLACK_BOT_TOKEN is not set")]
    from slack_sdk.errors import SlackApiError

    from wakeful.bot.slack.sender import make_client

    client = make_client(config.bot_token, config.api_url, timeout=10)
    try:
        sent = clock()
        response = client.auth_test()
        received = clock()
    except SlackApiError as exc:
        error = exc.response.get("error") if hasattr(exc.response, "get") else "error"
        return [Check("slack token", False, f"rejected by Slack ({error})")]
    except OSError as exc:
        return [Check("slack token", False, f"cannot reach {config.api_url}: {exc}")]
    headers = {k.lower(): v for k, v in (response.headers or {}).items()}
    who = f"bot {response.get('user_id')} in team {response.get('team_id')}"
    checks = [Check("slack token", True, who)]
    checks.append(_scopes(_header(headers, "x-oauth-scopes"), manifest))
    date = _header(headers, "date")
    if date is None:
        checks.append(Check("slack clock", None, "Slack sent no Date header"))
    else:
        slack_time = email.utils.parsedate_to_datetime(date).timestamp()
        # Date has whole seconds: compare with the middle of the call, allow the rounding.
        skew = slack_time + 0.5 - (sent + received) / 2
        checks.append(_skew("slack clock", skew, "Slack"))
    return checks


def _installation_checks(config: Config, manifest: str | None) -> list[Check]:
    """Distribution mode: every active installation's token by auth.test, and its scopes
    against the manifest's. A token is opened in memory only, and never printed."""
    from slack_sdk.errors import SlackApiError

    from wakeful.bot.slack.installations import TokenCipher, from_row
    from wakeful.bot.slack.sender import make_client

    try:
        store: DoctorStore = open_store(config.db, config.settings, migrate=False)
        rows = store.installations()
    except WakefulError as exc:
        return [Check("installations", False, f"cannot read them: {exc}")]
    store.close()
    active = [r for r in rows if r.status == "active"]
    checks = [
        Check("installations", True, f"{len(active)} active of {len(rows)} (distribution mode)")
    ]
    cipher = TokenCipher(config.token_key)
    client = make_client("", config.api_url, timeout=10)
    now = int(time.time())
    for row in active:
        name = f"workspace {row.workspace}"
        try:
            installation = from_row(row, cipher)
            if row.expires_at is not None and row.expires_at <= now:
                # Its scopes as granted at install or last refresh (the profile keeps them).
                granted = ",".join(installation.bot_scopes or [])
                scopes = _scopes(granted, manifest)
                ok, detail = _expired(row.expires_at, installation.bot_refresh_token)
                checks.append(Check(name, ok and bool(scopes.ok), f"{detail}; {scopes.detail}"))
                continue
            response = client.auth_test(token=installation.bot_token or "")
        except SlackApiError as exc:
            error = exc.response.get("error") if hasattr(exc.response, "get") else "error"
            checks.append(Check(name, False, f"token rejected by Slack ({error})"))
            continue
        except OSError as exc:
            checks.append(Check(name, False, f"cannot reach {config.api_url}: {exc}"))
            continue
        except WakefulError as exc:
            checks.append(Check(name, False, str(exc)))
            continue
        headers = {k.lower(): v for k, v in (response.headers or {}).items()}
        scopes = _scopes(_header(headers, "x-oauth-scopes"), manifest)
        who = f"bot {response.get('user_id')}; {scopes.detail}"
        checks.append(Check(name, scopes.ok, who))
    return checks


def _ops_channel(config: Config) -> Check:
    """WAKEFUL_OPS_CHANNEL, asked of Slack with the token that posts there (in distribution
    mode, its workspace's installation's): `conversations.info` says the channel exists, is
    not archived, and has the bot in it. Nothing is posted."""
    from slack_sdk.errors import SlackApiError

    from wakeful.bot.slack.sender import make_client

    name = "ops channel"
    team, _, channel = config.settings.ops_channel.rpartition(":")
    try:
        token = _ops_token(config, team)
        info = make_client(token, config.api_url).conversations_info(channel=channel)["channel"]
    except SlackApiError as exc:
        error = str(exc.response.get("error") if hasattr(exc.response, "get") else "error")
        why = _OPS_REFUSED.get(error, "{channel}: Slack answered {error}")
        return Check(name, False, why.format(channel=channel, error=error))
    except OSError as exc:
        return Check(name, False, f"cannot reach {config.api_url}: {exc}")
    except WakefulError as exc:
        return Check(name, None if isinstance(exc, _NotChecked) else False, str(exc))
    if info.get("is_archived"):
        return Check(
            name, False, f"{channel} is archived: unarchive it, or set another WAKEFUL_OPS_CHANNEL"
        )
    if not info.get("is_member"):
        return Check(name, False, f"the bot is not in {channel}: `/invite @wakeful` there")
    return Check(
        name, True, f"#{info.get('name') or channel} ({channel}): the bot is in it, not archived"
    )


_OPS_REFUSED = {
    "channel_not_found": (
        "{channel} not found: no such channel, or a private one the bot is not in (invite it)"
    ),
    "missing_scope": (
        "cannot look at {channel}: the token lacks channels:read and groups:read (asked for "
        "by manifest.yml); add them and reinstall the app"
    ),
}


class _NotChecked(WakefulError):
    """The check cannot be made from here (the doctor changes nothing, refreshes no token)."""


def _ops_token(config: Config, team: str) -> str:
    """The bot token that posts in the ops channel: SLACK_BOT_TOKEN, or (distribution mode)
    the installation of the channel's workspace, opened in memory only."""
    if not config.distribution:
        if not config.bot_token:
            raise WakefulError("SLACK_BOT_TOKEN is not set")
        return config.bot_token
    from wakeful.bot.slack.installations import TokenCipher, from_row

    store: DoctorStore = open_store(config.db, config.settings, migrate=False)
    try:
        row = store.installation_for_team(team)
    finally:
        store.close()
    if row is None or row.status != "active":
        raise WakefulError(f"workspace {team} (WAKEFUL_OPS_CHANNEL) has no active installation")
    if row.expires_at is not None and row.expires_at <= int(time.time()):
        raise _NotChecked(
            f"workspace {team}'s token has expired: not refreshed by the doctor (the next send "
            "refreshes it)"
        )
    return from_row(row, TokenCipher(config.token_key)).bot_token or ""


def _expired(expired_at: int, refresh_token: str | None) -> tuple[bool, str]:
    """A rotating token past its 12 hours: normal for a workspace quiet since (a token is
    refreshed when a send needs it), as long as its refresh token is kept. Not refreshed here:
    a refresh token is single-use, and the doctor changes nothing."""
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(expired_at))
    if not refresh_token:
        return False, f"token expired {when} and no refresh token is kept: reinstall"
    return True, f"token expired {when}; the next send refreshes it (rotation)"


def _header(headers: Mapping[str, Any], name: str) -> str | None:
    value = headers.get(name)
    if isinstance(value, list):
        value = value[0] if value else None
    return None if value is None else str(value)


def _scopes(granted_header: str | None, manifest: str | None) -> Check:
    wanted = required_scopes(manifest)
    if wanted is None:
        where = manifest or "./manifest.yml"
        return Check("slack scopes", False, f"no manifest at {where} to compare with (--manifest)")
    if granted_header is None:
        return Check("slack scopes", False, "Slack did not say which scopes the token has")
    granted = {s.strip() for s in granted_header.split(",") if s.strip()}
    missing = [s for s in wanted if s not in granted]
    source = find_manifest(manifest)
    if missing:
        return Check(
            "slack scopes",
            False,
            f"missing {', '.join(missing)} (asked for by {source}); add them and reinstall the app",
        )
    extra = sorted(granted - set(wanted))
    more = f"; also granted {', '.join(extra)}" if extra else ""
    return Check("slack scopes", True, f"all {len(wanted)} in {source} granted{more}")


def _skew(name: str, skew: float | None, other: str) -> Check:
    if skew is None:
        return Check(name, None, f"{other} did not say its time")
    ahead = "ahead of" if skew > 0 else "behind"
    text = f"{other} is {abs(skew):.1f} s {ahead} this host"
    if abs(skew) > CLOCK_SKEW:
        return Check(name, False, f"{text} (more than {CLOCK_SKEW:.0f} s): fix NTP")
    return Check(name, True, text)


def _anthropic(config: Config) -> Check:
    if not config.anthropic_api_key:
        return Check("anthropic key", False, "ANTHROPIC_API_KEY is not set (WAKEFUL_AGENT=claude)")
    if importlib.util.find_spec("anthropic") is None:
        return Check("anthropic key", False, "set, but the anthropic package is not installed")
    return Check("anthropic key", True, "set (not sent anywhere by the doctor)")


def report(checks: list[Check]) -> tuple[str, int]:
    """The lines, and the exit status: 1 when any check failed."""
    failed = sum(1 for c in checks if c.ok is False)
    lines = [c.line() for c in checks]
    lines.append(f"{failed} check(s) failed" if failed else "all checks passed")
    return "\n".join(lines), 1 if failed else 0
