"""The gateway's WSGI app: check, inject the credential, forward, audit.

A request to `/<destination>/<path>` is checked in an order that lets nothing through that is
not allowed, and sends nothing upstream on a refusal:

1. the caller presents the gateway's token, `Authorization: Bearer <token>` (401
   `unauthenticated`), when the gateway has one (always on TCP); `/healthz` and `/metrics`
   need none;
2. the path is plain: no `..`, no empty or `.` segment, no encoded `/`, `\\` or `.`, no
   absolute URL (403 `not_allowed`: the gateway is never an open proxy);
3. the destination is configured (403 `unknown_destination`);
4. the revocations are known, read from the store within the last second (503
   `revocations_unknown`: a kill switch that cannot be read is not assumed off);
5. the destination is not revoked (403 `destination_revoked`);
6. the method, path and query match one of its `allow` rules (403 `not_allowed`);
7. its rate limit has room (429 `rate_limited`);
8. the body fits (413 `too_large`; 400 `bad_request` for a Content-Length that is no number):
   waitress refuses both before the app is called, so these stand for another server.

A refusal answers JSON in the shape of Stripe's errors (`{"error": {"type": "gateway_error",
"code": ..., "message": ...}}`, which Stripe's SDK reads as a PermissionError), with the header
`Wakeful-Gateway: refused`. A forwarded request carries only the caller's headers its
destination lists (`headers`; never the caller's `Authorization`, which holds the token, nor
cookies, hop-by-hop, forwarding or method-override headers), gains the destination's
credential, and goes to the upstream's own host with redirects never followed; the answer
comes back with `Wakeful-Gateway: forwarded` (`upstream_error` with 502 / 504 when the upstream
could not be reached or did not answer in time) and the secret masked should the upstream echo
it.

Each request writes one audit line once its status is known: time, the inbox and run the
caller claims (`Wakeful-Inbox` / `Wakeful-Run`: any holder of the token can claim any, so they
are `claimed_inbox` / `claimed_run`), destination, method, path (no query), status,
idempotency key, duration, outcome and reason. Never the credential or the token, never a body.
"""

from __future__ import annotations

import hmac
import http.client
import json
import logging
import re
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import unquote

from wakeful.core import tracing
from wakeful.core.gateway.audit import AuditLog, Metrics
from wakeful.core.gateway.config import (
    MAX_BODY,
    NEVER_FORWARDED,
    NEVER_PREFIXES,
    Destination,
    GatewayConfig,
)

log = logging.getLogger("wakeful.gateway")

REFUSED, FORWARDED, UPSTREAM_ERROR = "refused", "forwarded", "upstream_error"
MARK = "Wakeful-Gateway"
"""The header saying what the gateway did: refused, forwarded or upstream_error."""
CALLER_HEADERS = ("Wakeful-Inbox", "Wakeful-Run")
_DROP_BACK = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "set-cookie", "trailer"}
)
_BAD_PATH = re.compile(r"%2f|%5c|%2e|%00|\\", re.IGNORECASE)
_VISIBLE = re.compile(r"^[\x21-\x7e]{1,255}$")
FRESH = 1.0
"""Seconds a read of the revocations stays good: the kill switch's promise."""

Environ = dict[str, Any]
StartResponse = Callable[..., Any]


class Revocations:
    """The revoked destinations as last read from the store, and when (see watch.py)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._revoked: frozenset[str] = frozenset()
        self._read_at = float("-inf")
        self._clock = clock

    def started(self) -> float:
        """The time to pass to `update` for a read beginning now."""
        return self._clock()

    def update(self, revoked: Iterable[str], started: float | None = None) -> None:
        """The names a read of the store found. Fresh for FRESH seconds from when that read
        `started`, not from its answer: a revocation committed after the read began may be
        missing from it, and `wakeful gateway revoke` returns FRESH seconds after its commit,
        when every gateway either read it or refuses everything."""
        at = self._clock() if started is None else started
        with self._lock:
            self._revoked, self._read_at = frozenset(revoked), at

    def state(self) -> tuple[bool, frozenset[str]]:
        """(read begun within the last second, the revoked names)."""
        with self._lock:
            return self._clock() - self._read_at <= FRESH, self._revoked


class Bucket:
    """A token bucket: `rate` requests a second, bursts of as many."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.tokens, self._clock = rate, max(rate, 1.0), clock
        self._at = clock()
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            now = self._clock()
            self.tokens = min(max(self.rate, 1.0), self.tokens + (now - self._at) * self.rate)
            self._at = now
            if self.tokens < 1.0:
                return False
            self.tokens -= 1.0
            return True


class Refusal(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class GatewayApp:
    """The WSGI app of one gateway process."""

    def __init__(
        self,
        config: GatewayConfig,
        revocations: Revocations,
        audit: AuditLog,
        metrics: Metrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.destinations = config.destinations
        self.revocations = revocations
        self.audit = audit
        self.metrics = metrics
        self.clock = clock
        self.buckets = {n: Bucket(d.rate_limit, clock) for n, d in self.destinations.items()}
        self.tls = ssl.create_default_context()
        self._token = f"Bearer {config.token}".encode() if config.token else None

    def __call__(self, environ: Environ, start_response: StartResponse) -> list[bytes]:
        raw = str(environ.get("REQUEST_URI") or environ.get("PATH_INFO") or "")
        method = str(environ.get("REQUEST_METHOD", "GET")).upper()
        if raw in ("/healthz", "/metrics") and method == "GET":
            return self._own(raw, start_response)
        path, _, query = raw.partition("?")
        name, _, rest = path.lstrip("/").partition("/")
        rest = "/" + rest
        with _span(environ, method, name if name in self.destinations else "", rest):
            return self._handle(environ, start_response, method, raw, path, name, rest, query)

    def _handle(
        self,
        environ: Environ,
        start_response: StartResponse,
        method: str,
        raw: str,
        path: str,
        name: str,
        rest: str,
        query: str,
    ) -> list[bytes]:
        started = self.clock()
        caller = {h: _header(environ, h) for h in (*CALLER_HEADERS, "Idempotency-Key")}
        record = {
            "claimed_inbox": caller["Wakeful-Inbox"],
            "claimed_run": caller["Wakeful-Run"],
            "destination": name if name in self.destinations else "",
            "asked_for": "" if name in self.destinations else _cut(name, 64),
            "method": method,
            "path": _cut(rest, 300),
            "idempotency_key": caller["Idempotency-Key"],
        }
        try:
            self._authenticate(environ)
            destination = self._check(raw, path, name, rest, query, method)
            body = _body(environ)
        except Refusal as refused:
            self._done(record, refused.status, REFUSED, refused.code, started)
            return _refuse(start_response, refused)
        return self._forward(
            destination, environ, method, rest, query, body, record, started, start_response
        )

    # -- the checks ------------------------------------------------------------------------

    def _authenticate(self, environ: Environ) -> None:
        """The caller holds the token (compared in constant time), when the gateway has one."""
        if self._token is None:
            return
        presented = str(environ.get("HTTP_AUTHORIZATION", "")).strip().encode("latin-1", "replace")
        if not hmac.compare_digest(presented, self._token):
            raise Refusal(
                401,
                "unauthenticated",
                "the gateway answers callers presenting its token (Authorization: Bearer "
                "<WAKEFUL_GATEWAY_TOKEN>) only; nothing was sent",
            )

    def _check(
        self, raw: str, path: str, name: str, rest: str, query: str, method: str
    ) -> Destination:
        if not raw.startswith("/") or not _plain(path):
            raise Refusal(403, "not_allowed", "the path is not a plain path on this gateway")
        destination = self.destinations.get(name)
        if destination is None:
            raise Refusal(
                403,
                "unknown_destination",
                f"the gateway has no destination {_cut(name, 64)!r}; it reaches "
                f"{', '.join(sorted(self.destinations))} only",
            )
        fresh, revoked = self.revocations.state()
        if not fresh:
            raise Refusal(
                503,
                "revocations_unknown",
                "the gateway cannot read its revocations from the store; nothing is forwarded "
                "until it can",
            )
        if name in revoked:
            raise Refusal(
                403,
                "destination_revoked",
                f"destination {name!r} is revoked by an operator (wakeful gateway restore "
                f"{name} lets it through again); nothing was sent",
            )
        if not destination.allows(method, unquote(rest), query):
            asked = f"{method} {_cut(rest, 120)}" + (" with its query" if query else "")
            raise Refusal(403, "not_allowed", f"{asked} is not allowed for destination {name!r}")
        if not self.buckets[name].take():
            raise Refusal(429, "rate_limited", f"destination {name!r} is over its rate limit")
        return destination

    # -- forwarding ------------------------------------------------------------------------

    def _forward(
        self,
        destination: Destination,
        environ: Environ,
        method: str,
        path: str,
        query: str,
        body: bytes,
        record: dict[str, Any],
        started: float,
        start_response: StartResponse,
    ) -> list[bytes]:
        up = destination.upstream
        headers = _headers_out(environ, destination)
        headers[destination.header] = destination.value
        headers["Host"] = up.host if up.port in (80, 443) else f"{up.host}:{up.port}"
        if body or method in ("POST", "PUT", "PATCH"):
            headers["Content-Length"] = str(len(body))
        target = up.base_path + path + (f"?{query}" if query else "")
        conn: http.client.HTTPConnection
        if up.scheme == "https":
            conn = http.client.HTTPSConnection(
                up.host, up.port, timeout=destination.timeout, context=self.tls
            )
        else:
            conn = http.client.HTTPConnection(up.host, up.port, timeout=destination.timeout)
        sent = False
        try:
            conn.connect()
            conn.request(method, target, body=body or None, headers=headers)
            sent = True
            response = conn.getresponse()
            status = response.status
            self._done(record, status, FORWARDED, "", started)
            answer = response.read(MAX_BODY + 1)
            back = [(k, v) for k, v in response.getheaders() if k.lower() not in _DROP_BACK]
        except TimeoutError:
            return self._upstream_failed(
                record, started, start_response, 504, "upstream_timeout", destination, sent
            )
        except (OSError, http.client.HTTPException):
            return self._upstream_failed(
                record, started, start_response, 502, "upstream_unreachable", destination, sent
            )
        finally:
            conn.close()
        if len(answer) > MAX_BODY:
            return self._upstream_failed(
                record, started, start_response, 502, "answer_too_large", destination, True
            )
        secret = destination.secret.encode()
        answer = answer.replace(secret, b"[redacted]")
        out = [(k, v.replace(destination.secret, "[redacted]")) for k, v in back]
        out += [(MARK, FORWARDED), ("Content-Length", str(len(answer)))]
        start_response(f"{status} {http.client.responses.get(status, 'Status')}", out)
        return [answer]

    def _upstream_failed(
        self,
        record: dict[str, Any],
        started: float,
        start_response: StartResponse,
        status: int,
        code: str,
        destination: Destination,
        sent: bool,
    ) -> list[bytes]:
        if record.get("status") is None:
            self._done(record, status, UPSTREAM_ERROR, code, started)
        what = "did not answer in time" if status == 504 else "could not be reached"
        if code == "answer_too_large":
            what = "answered more than the gateway passes on"
        may = " after the request was sent: it may have acted" if sent else ""
        message = f"destination {destination.name!r} {what}{may}"
        body = _error_body(code, message)
        start_response(
            f"{status} {http.client.responses[status]}",
            [
                ("Content-Type", "application/json"),
                (MARK, UPSTREAM_ERROR),
                ("Content-Length", str(len(body))),
            ],
        )
        return [body]

    def _done(
        self, record: dict[str, Any], status: int, outcome: str, reason: str, started: float
    ) -> None:
        record["status"] = status
        record["outcome"] = outcome
        record["reason"] = reason
        seconds = self.clock() - started
        record["duration_ms"] = round(seconds * 1000, 1)
        tracing.note(
            {
                "http.response.status_code": status,
                "wakeful.gateway.outcome": outcome,
                "wakeful.gateway.reason": reason or None,
            },
            error=None if status < 500 else reason or outcome,
        )
        self.audit.write(record)
        self.metrics.count(record["destination"] or "unknown", status, outcome, seconds)

    def _own(self, path: str, start_response: StartResponse) -> list[bytes]:
        if path == "/metrics":
            body = self.metrics.exposition()
            start_response(
                "200 OK",
                [("Content-Type", self.metrics.content_type), ("Content-Length", str(len(body)))],
            )
            return [body]
        fresh, _ = self.revocations.state()
        body = b"ok\n" if fresh else b"revocations unknown\n"
        status = "200 OK" if fresh else "503 Service Unavailable"
        start_response(status, [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
        return [body]


def _plain(path: str) -> bool:
    if _BAD_PATH.search(path) or any(ord(c) < 0x21 or ord(c) == 0x7F for c in path):
        return False
    segments = path.split("/")[1:]
    if not segments or not segments[0]:
        return False
    # A trailing slash is a path of its own; an empty segment inside is not.
    inner = segments[:-1] if segments[-1] == "" else segments
    return all(s not in ("", ".", "..") for s in inner)


def _span(environ: Environ, method: str, destination: str, path: str) -> Any:
    """The forward's span, `gateway.forward`: a child of the caller's span (the `traceparent`
    its client sent), saying the destination (a configured one's name, else nothing), the
    method, the path without its query, and the status; never a header's value."""
    if not tracing.ON:
        return tracing.NOOP
    attrs = {
        "wakeful.gateway.destination": destination or None,
        "http.request.method": method,
        "url.path": _cut(path, 300),
    }
    parent = _header(environ, "traceparent") or None
    return tracing.span("gateway.forward", attrs, parent=parent, kind="server")


def _header(environ: Environ, name: str) -> str:
    value = str(environ.get("HTTP_" + name.upper().replace("-", "_"), "")).strip()
    return value if _VISIBLE.match(value) else ""


def _headers_out(environ: Environ, destination: Destination) -> dict[str, str]:
    """The caller's headers the destination lists, and no other (the config refuses a list
    naming a credential, framing, forwarding or method-override header; checked again here)."""
    out: dict[str, str] = {}
    for key, value in environ.items():
        if not key.startswith("HTTP_"):
            continue
        name = key[5:].replace("_", "-").title()
        low = name.lower()
        if low not in destination.headers or low in NEVER_FORWARDED:
            continue
        if low.startswith(NEVER_PREFIXES) or low == destination.header.lower():
            continue
        out[name] = str(value)
    if environ.get("CONTENT_TYPE") and "content-type" in destination.headers:
        out["Content-Type"] = str(environ["CONTENT_TYPE"])
    return out


def _body(environ: Environ) -> bytes:
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise Refusal(400, "bad_request", "Content-Length is not a number") from None
    if length > MAX_BODY:
        raise Refusal(413, "too_large", f"a body through the gateway is at most {MAX_BODY} bytes")
    return environ["wsgi.input"].read(length) if length else b""


def _error_body(code: str, message: str) -> bytes:
    doc = {"error": {"type": "gateway_error", "code": code, "message": message}}
    return json.dumps(doc).encode()


def _refuse(start_response: StartResponse, refused: Refusal) -> list[bytes]:
    body = _error_body(refused.code, refused.message)
    headers = [
        ("Content-Type", "application/json"),
        (MARK, REFUSED),
        ("Content-Length", str(len(body))),
    ]
    if refused.status == 429:
        headers.append(("Retry-After", "1"))
    if refused.status == 401:
        headers.append(("WWW-Authenticate", 'Bearer realm="wakeful-gateway"'))
    start_response(f"{refused.status} {http.client.responses[refused.status]}", headers)
    return [body]


def _cut(text: str, n: int) -> str:
    text = "".join(c if 0x20 <= ord(c) < 0x7F else "?" for c in text)
    return text if len(text) <= n else text[: n - 1] + "…"
