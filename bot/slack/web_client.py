"""slack_sdk's WebClient, with one keep-alive HTTP connection per thread.

slack_sdk's synchronous client opens a new connection (TCP, and TLS on slack.com) for every
call through urllib. The dispatcher makes a few calls per reply, hundreds a second under load:
a connection kept per thread saves the handshake each time. Everything else (arguments,
errors, rate-limit headers) stays slack_sdk's: only the transport underneath is replaced.

A kept connection is used again only while it is healthy: one the server closed while idle is
noticed before the request goes out and replaced. A request that fails on the wire is never
repeated here; the error surfaces and the outbox retries the batch after looking in Slack for
the post, so a post cannot go out twice.
"""

from __future__ import annotations

import functools
import http.client
import io
import select
import threading
import time
import urllib.error
from typing import Any
from urllib.parse import urlsplit
from urllib.request import Request

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

IDLE_LIMIT = 30.0
"""Seconds a connection may sit idle before it is replaced rather than reused."""


class KeepAliveWebClient(WebClient):
    """A WebClient whose calls from one thread share one HTTP/1.1 connection."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Before WebClient's own __init__, which may raise: __del__ closes whatever got this far.
        self._local = threading.local()
        self._open: set[http.client.HTTPConnection] = set()
        self._lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def close(self) -> None:
        """Close every thread's kept connection (a later call opens a new one)."""
        with self._lock:
            conns, self._open = self._open, set()
        for conn in conns:
            conn.close()

    def __del__(self) -> None:
        self.close()

    def _perform_urllib_http_request_internal(self, url: str, req: Request) -> dict[str, Any]:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or self.proxy is not None:
            return super()._perform_urllib_http_request_internal(url, req)
        conn, reused = self._connection(parts.scheme, parts.netloc)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        method, headers = req.get_method(), dict(req.header_items())
        try:
            try:
                conn.request(method, path, body=req.data, headers=headers)
            except (BrokenPipeError, ConnectionResetError):
                if not reused:
                    raise
                # The server closed the kept connection just before the request went out: it
                # was not delivered, so it goes once more, on a new connection.
                self._drop()
                conn, _ = self._connection(parts.scheme, parts.netloc)
                conn.request(method, path, body=req.data, headers=headers)
            resp = conn.getresponse()
            body = resp.read()
        except BaseException:
            self._drop()
            raise
        if resp.will_close:
            self._drop()
        else:
            self._local.used_at = time.monotonic()
        if resp.status >= 400:
            # What urlopen raises, so slack_sdk reads the error (and Retry-After) as it does.
            raise urllib.error.HTTPError(url, resp.status, resp.reason, resp.msg, io.BytesIO(body))
        charset = resp.msg.get_content_charset() or "utf-8"
        return {"status": resp.status, "headers": resp.msg, "body": body.decode(charset)}

    def _connection(self, scheme: str, netloc: str) -> tuple[http.client.HTTPConnection, bool]:
        """This thread's connection to `netloc`, and whether it was used before."""
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        key = (scheme, netloc)
        fresh = (
            conn is not None
            and self._local.key == key
            and time.monotonic() - self._local.used_at < IDLE_LIMIT
            and not _closed_by_peer(conn)
        )
        if conn is not None and fresh:
            return conn, True
        self._drop()
        if scheme == "https":
            conn = http.client.HTTPSConnection(netloc, timeout=self.timeout, context=self.ssl)
        else:
            conn = http.client.HTTPConnection(netloc, timeout=self.timeout)
        self._local.conn, self._local.key, self._local.used_at = conn, key, time.monotonic()
        with self._lock:
            self._open.add(conn)
        return conn, False

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            with self._lock:
                self._open.discard(conn)
        self._local.conn = None


def _closed_by_peer(conn: http.client.HTTPConnection) -> bool:
    """True when the server has closed an idle connection (it reads as end-of-file)."""
    sock = conn.sock
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)  # an idle HTTP connection has nothing to read unless it was closed


class WithToken:
    """A WebClient whose every call carries one workspace's token (slack_sdk takes `token`
    per call), so one client and its kept connections serve every workspace."""

    def __init__(self, client: WebClient, token: str) -> None:
        self._client = client
        self._token = token

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)
        return functools.partial(method, token=self._token)


def error_code(exc: SlackApiError) -> str:
    """Slack's error code of a refused call (`channel_not_found`), or "" when it gave none."""
    response = exc.response
    return str(response.get("error") or "") if hasattr(response, "get") else ""
