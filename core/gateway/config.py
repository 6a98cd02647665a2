"""The gateway's configuration: where it listens, where its audit log goes, and its destinations.

Read from the TOML file `WAKEFUL_GATEWAY_CONFIG` names, e.g.

    listen = "127.0.0.1:7878"          # loopback only, or "unix:/run/wakeful/gateway.sock"
    audit_log = "/var/log/wakeful/gateway-audit.jsonl"

    [destinations.stripe]
    upstream = "https://api.stripe.com"
    allow = ["GET /v1/payment_intents/search", "POST /v1/refunds",
             "GET /v1/refunds?payment_intent&limit&starting_after"]
    headers = ["Content-Type", "Accept", "User-Agent", "Idempotency-Key", "Stripe-Version"]
    credential_header = "Authorization"
    credential_format = "Bearer {secret}"
    secret_env = "STRIPE_SECRET_KEY"     # or secret_file = "/run/secrets/stripe" (mode 0600)
    timeout = 30
    rate_limit = 25                      # requests per second (and the burst)

Every mistake stops start-up with one line naming the setting (GatewayConfigError). A secret
is read here, in the gateway's process only: from its own environment, or from a file that no
other user can read. So is the callers' token (`WAKEFUL_GATEWAY_TOKEN`): a gateway on TCP
answers only callers presenting it (any local user can connect to a loopback port), and does
not start without one; on a Unix socket (mode 0600) it is optional.
"""

from __future__ import annotations

import ipaddress
import os
import re
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from wakeful.core.errors import InvalidInput
from wakeful.core.store.revocations import DESTINATION_NAME

RESERVED = frozenset({"healthz", "metrics"})
"""Paths the gateway answers itself; no destination may take these names."""
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"})
_HEADER_NAME = re.compile(r"^[A-Za-z0-9-]{1,64}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_PREFIX = re.compile(r"^/[A-Za-z0-9._~!$&'()*+,;=:@/-]*$")
_QUERY_NAME = re.compile(r"^[A-Za-z0-9._~\[\]-]{1,64}$")
MAX_BODY = 1024 * 1024
"""Bytes a request or an answer may carry through the gateway."""
TOKEN = "WAKEFUL_GATEWAY_TOKEN"
"""The variable holding the token callers present (`Authorization: Bearer <token>`)."""
MIN_TOKEN = 32
_TOKEN = re.compile(r"^[\x21-\x7e]+$")
HEADERS = ("Content-Type", "Accept", "User-Agent", "Idempotency-Key")
"""The caller's headers a destination passes on when its `headers` says nothing."""
DEFAULT_HEADERS = {"stripe": (*HEADERS, "Stripe-Version")}
"""Per destination name, when it differs from HEADERS."""
NEVER_FORWARDED = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "cookie",
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "proxy-connection",
        "expect",
        "forwarded",
        "x-http-method-override",
        "x-http-method",
        "x-method-override",
    }
)
"""Headers no `headers` list may name: the caller's credentials (the gateway's token among
them), hop-by-hop and framing headers, forwarding headers, and method overrides (they would
turn an allowed POST into a DELETE upstream). `X-Forwarded-*`, `Wakeful-*` and `Proxy-*` too."""
NEVER_PREFIXES = ("x-forwarded-", "wakeful-", "proxy-")


class GatewayConfigError(InvalidInput):
    """The gateway's configuration is missing or wrong; the message names the setting."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One allowed method on one path prefix. `POST /v1/refunds` allows that path and the
    paths under it (`/v1/refunds/re_1`), never `/v1/refunds_x`; a prefix ending in `/` allows
    only the paths under it. `GET /v1/refunds?payment_intent&limit` allows those query
    parameters only (each any number of times, in any order), `GET /v1/x?` no query at all;
    without a `?` any query passes."""

    method: str
    prefix: str
    query: frozenset[str] | None = None
    """The query parameters allowed, or None for any."""

    def allows(self, method: str, path: str, query: str = "") -> bool:
        if method != self.method:
            return False
        under = self.prefix if self.prefix.endswith("/") else self.prefix + "/"
        if not (path == self.prefix or path.startswith(under)):
            return False
        if self.query is None or not query:
            return True
        names = [name for name, _ in parse_qsl(query, keep_blank_values=True)]
        return bool(names) and all(name in self.query for name in names)

    def __str__(self) -> str:
        if self.query is None:
            return f"{self.method} {self.prefix}"
        return f"{self.method} {self.prefix}?{'&'.join(sorted(self.query))}"


@dataclass(frozen=True, slots=True)
class Upstream:
    scheme: str
    host: str
    port: int
    base_path: str
    """The upstream URL's own path, put before the tool's (`""` for `https://api.stripe.com`)."""

    @property
    def origin(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"


@dataclass(frozen=True)
class Destination:
    """A service tools may reach through the gateway, and the credential it adds."""

    name: str
    upstream: Upstream
    rules: tuple[Rule, ...]
    header: str
    value: str = field(repr=False)
    """The header's value with the secret in it: never logged, never shown."""
    secret: str = field(repr=False)
    timeout: float = 30.0
    rate_limit: float = 25.0
    headers: frozenset[str] = frozenset(h.lower() for h in HEADERS)
    """The caller's headers passed on (lower case); every other one is dropped."""

    def allows(self, method: str, path: str, query: str = "") -> bool:
        return any(rule.allows(method, path, query) for rule in self.rules)


@dataclass(frozen=True)
class GatewayConfig:
    listen: str
    """`host:port` on loopback, or `unix:/path`."""
    audit_log: str
    """A file the audit lines are appended to, or `-` for standard output."""
    destinations: Mapping[str, Destination]
    token: str | None = field(default=None, repr=False)
    """What callers present as `Authorization: Bearer <token>`; None: any caller that can
    connect (a Unix socket only this user can open)."""

    @property
    def unix_socket(self) -> str | None:
        return self.listen[len("unix:") :] if self.listen.startswith("unix:") else None

    def host_port(self) -> tuple[str, int]:
        host, port = split_host_port(self.listen, "listen")
        return host, port

    def secrets(self) -> list[str]:
        return [d.secret for d in self.destinations.values()] + [self.token or ""]


def load(path: str | Path, env: Mapping[str, str]) -> GatewayConfig:
    """The configuration in `path`, with each destination's secret read from `env` or its
    file."""
    doc = _read(path)
    listen = _text(doc, "listen", "127.0.0.1:7878")
    if not listen.startswith("unix:"):
        check_loopback(listen)
    elif not listen[len("unix:") :].startswith("/"):
        raise GatewayConfigError(f"listen: a Unix socket needs an absolute path, got {listen!r}")
    audit = _text(doc, "audit_log", "-")
    tables = doc.get("destinations")
    if not isinstance(tables, dict) or not tables:
        raise GatewayConfigError("the gateway's configuration names no [destinations.<name>]")
    destinations = {name: _destination(name, table, env) for name, table in tables.items()}
    unknown = set(doc) - {"listen", "audit_log", "destinations"}
    if unknown:
        raise GatewayConfigError(f"unknown setting(s): {', '.join(sorted(unknown))}")
    token = check_token(env.get(TOKEN, ""), TOKEN)
    if token is None and not listen.startswith("unix:"):
        raise GatewayConfigError(
            f"{TOKEN} is not set: a gateway on TCP ({listen}) answers only callers presenting "
            "it, since any local user can reach a loopback port (make one with: python -c "
            "'import secrets; print(secrets.token_urlsafe(32))'; give it to the workers too)"
        )
    return GatewayConfig(listen, audit, destinations, token)


def check_token(raw: str | None, where: str) -> str | None:
    """The callers' token from `raw`, None when unset; GatewayConfigError for one too short to
    resist guessing or holding what a header cannot carry. The value is never shown."""
    token = (raw or "").strip()
    if not token:
        return None
    if len(token) < MIN_TOKEN or not _TOKEN.match(token):
        raise GatewayConfigError(
            f"{where} must be at least {MIN_TOKEN} visible ASCII characters, no spaces (make "
            "one with: python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )
    return token


def secret_variables(path: str | Path) -> list[str]:
    """The environment variables the gateway takes its secrets from (what `wakeful serve`
    hands to the gateway and keeps out of its own environment)."""
    doc = _read(path)
    tables = doc.get("destinations")
    found = []
    for table in tables.values() if isinstance(tables, dict) else ():
        name = table.get("secret_env") if isinstance(table, dict) else None
        if isinstance(name, str) and name:
            found.append(name)
    return found


def _read(path: str | Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise GatewayConfigError(f"WAKEFUL_GATEWAY_CONFIG: no such file {str(path)!r}") from None
    except OSError as exc:
        raise GatewayConfigError(f"WAKEFUL_GATEWAY_CONFIG cannot be read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise GatewayConfigError(f"WAKEFUL_GATEWAY_CONFIG is not valid TOML: {exc}") from None


def _destination(name: str, table: Any, env: Mapping[str, str]) -> Destination:
    where = f"destinations.{name}"
    if not DESTINATION_NAME.match(name) or name in RESERVED:
        raise GatewayConfigError(
            f"{where}: not a destination name (lower-case letters, digits, '-' and '_', "
            f"starting with a letter, at most 32; not {', '.join(sorted(RESERVED))})"
        )
    if not isinstance(table, dict):
        raise GatewayConfigError(f"{where} must be a table")
    known = {"upstream", "allow", "credential_header", "credential_format"}
    known |= {"secret_env", "secret_file", "timeout", "rate_limit", "headers"}
    unknown = set(table) - known
    if unknown:
        raise GatewayConfigError(f"{where}: unknown setting(s): {', '.join(sorted(unknown))}")
    upstream = _upstream(where, table.get("upstream"))
    rules = _rules(where, table.get("allow"))
    header = table.get("credential_header", "Authorization")
    if not isinstance(header, str) or not _HEADER_NAME.match(header):
        raise GatewayConfigError(f"{where}.credential_header must be a header name")
    fmt = table.get("credential_format", "Bearer {secret}")
    if not isinstance(fmt, str) or fmt.count("{secret}") != 1:
        raise GatewayConfigError(f"{where}.credential_format must hold {{secret}} once")
    secret = _secret(where, table, env)
    value = fmt.replace("{secret}", secret)
    if any(c in value for c in "\r\n\x00"):
        raise GatewayConfigError(f"{where}: the secret holds a line break or a NUL")
    timeout = _number(where, table, "timeout", 30.0, 0.1, 600)
    rate = _number(where, table, "rate_limit", 25.0, 0.1, 100_000)
    default = DEFAULT_HEADERS.get(name, HEADERS)
    passed = _headers(where, table.get("headers", list(default)), header)
    return Destination(name, upstream, rules, header, value, secret, timeout, rate, passed)


def _headers(where: str, raw: Any, credential: str) -> frozenset[str]:
    if not isinstance(raw, list) or not all(isinstance(h, str) for h in raw):
        raise GatewayConfigError(f'{where}.headers must list header names, e.g. ["Accept"]')
    out = set()
    for name in raw:
        low = name.strip().lower()
        if not _HEADER_NAME.match(low):
            raise GatewayConfigError(f"{where}.headers: {name!r} is not a header name")
        if low in NEVER_FORWARDED or low.startswith(NEVER_PREFIXES) or low == credential.lower():
            raise GatewayConfigError(
                f"{where}.headers: {name} is never passed on (credentials, framing, forwarding "
                "and method-override headers are the gateway's own)"
            )
        out.add(low)
    return frozenset(out)


def _upstream(where: str, raw: Any) -> Upstream:
    if not isinstance(raw, str) or not raw:
        raise GatewayConfigError(f"{where}.upstream must be the service's base URL")
    parts = urlsplit(raw)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise GatewayConfigError(f"{where}.upstream must be an http(s) URL, got {raw!r}")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise GatewayConfigError(f"{where}.upstream must be a plain base URL, got {raw!r}")
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        raise GatewayConfigError(
            f"{where}.upstream: a credential goes over https only (plain http is for a "
            f"service on this host), got {raw!r}"
        )
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return Upstream(parts.scheme, parts.hostname, port, parts.path.rstrip("/"))


def _rules(where: str, raw: Any) -> tuple[Rule, ...]:
    if not isinstance(raw, list) or not raw:
        raise GatewayConfigError(f'{where}.allow must list "METHOD /path/prefix" rules')
    rules = []
    for entry in raw:
        method, _, target = str(entry).strip().partition(" ")
        prefix, question, names = target.strip().partition("?")
        if method not in METHODS or not _PREFIX.match(prefix) or "//" in prefix:
            raise GatewayConfigError(
                f'{where}.allow: {entry!r} is not "METHOD /path/prefix[?name&name]" (methods: '
                f"{', '.join(sorted(METHODS))})"
            )
        if any(seg in (".", "..") for seg in prefix.split("/")):
            raise GatewayConfigError(f"{where}.allow: {entry!r} has a . or .. segment")
        query = frozenset(n for n in names.split("&") if n) if question else None
        if query and not all(_QUERY_NAME.match(n) for n in query):
            raise GatewayConfigError(
                f"{where}.allow: {entry!r}: after ? come parameter names joined by &"
            )
        rules.append(Rule(method, prefix, query))
    return tuple(rules)


def _secret(where: str, table: Mapping[str, Any], env: Mapping[str, str]) -> str:
    name, path = table.get("secret_env"), table.get("secret_file")
    if bool(name) == bool(path):
        raise GatewayConfigError(f"{where} needs one of secret_env or secret_file")
    if name:
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise GatewayConfigError(f"{where}.secret_env must be an environment variable name")
        secret = env.get(name, "").strip()
        if not secret:
            raise GatewayConfigError(f"{where}: {name} is not set in the gateway's environment")
        return secret
    return read_secret_file(where, str(path))


def read_secret_file(where: str, path: str) -> str:
    """A secret from a file only this user can read: a regular file, ours, no access for the
    group or others (chmod 600). Anything else is refused, the file's content never shown."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise GatewayConfigError(f"{where}.secret_file cannot be opened: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise GatewayConfigError(f"{where}.secret_file is not a regular file")
        if info.st_uid != os.geteuid():
            raise GatewayConfigError(f"{where}.secret_file is not owned by the gateway's user")
        if info.st_mode & 0o077:
            raise GatewayConfigError(
                f"{where}.secret_file can be read by others (mode "
                f"{stat.S_IMODE(info.st_mode):o}): chmod 600 it"
            )
        with os.fdopen(fd, "r", encoding="utf-8", closefd=False) as f:
            secret = f.read().strip()
    finally:
        os.close(fd)
    if not secret:
        raise GatewayConfigError(f"{where}.secret_file is empty")
    return secret


def _number(
    where: str, table: Mapping[str, Any], key: str, default: float, low: float, high: float
) -> float:
    raw = table.get(key, default)
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not low <= raw <= high:
        raise GatewayConfigError(f"{where}.{key} must be a number from {low:g} to {high:g}")
    return float(raw)


def _text(doc: Mapping[str, Any], key: str, default: str) -> str:
    raw = doc.get(key, default)
    if not isinstance(raw, str) or not raw.strip():
        raise GatewayConfigError(f"{key} must be a string")
    return raw.strip()


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def split_host_port(text: str, what: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535 or not host:
        raise GatewayConfigError(f"{what} must be host:port or unix:/path, got {text!r}")
    return host.strip("[]"), int(port)


def check_loopback(listen: str) -> None:
    """The gateway answers this host alone: a loopback address or a Unix socket."""
    host, _ = split_host_port(listen, "listen")
    if not is_loopback(host):
        raise GatewayConfigError(
            f"listen: the gateway listens on loopback (127.0.0.1, ::1) or a Unix socket only, "
            f"got {listen!r}"
        )
