"""How a tool reaches a destination through the gateway (`wakeful.agents.Gateway`).

The worker knows where the gateway is (`WAKEFUL_GATEWAY_URL`: `http://127.0.0.1:<port>` or
`unix:/path/to/socket`) and the token it answers (`WAKEFUL_GATEWAY_TOKEN`: it lets a process
use the gateway, never see a secret). A request goes to `<gateway>/<destination>/<path>`
with `Authorization: Bearer <token>` in place of whatever the caller (an SDK's placeholder
key) put there, and carries the run it belongs to (`Wakeful-Inbox`, `Wakeful-Run`, from the
worker's log context) for the gateway's audit line. The client connects to the gateway and
nowhere else: a URL on another host is refused before anything is sent, and no proxy setting
of the environment is honoured (the standard library's http.client reads none).
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from wakeful.core import logs, tracing
from wakeful.core.errors import InvalidInput
from wakeful.core.gateway.config import GatewayConfigError, check_token, is_loopback

UNIX_HOST = "gateway"
"""The host name URLs to a gateway on a Unix socket carry (`http://gateway/<destination>/`)."""


@dataclass(frozen=True)
class GatewayResponse:
    """What came back: the status, the headers (names in lower case), the body."""

    status: int
    headers: Mapping[str, str]
    body: bytes = field(repr=False)

    @property
    def refused(self) -> str | None:
        """The gateway's reason when it refused the request itself (`not_allowed`,
        `unknown_destination`, `destination_revoked`, `rate_limited`, ...), else None."""
        if self.headers.get("wakeful-gateway") != "refused":
            return None
        try:
            return str(json.loads(self.body)["error"]["code"])
        except (ValueError, KeyError, TypeError):
            return "refused"

    def json(self) -> Any:
        return json.loads(self.body)


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__(UNIX_HOST, timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class Gateway:
    """The credential gateway as a tool sees it: `url(destination)` for an SDK's base URL,
    `request(...)` for a call of your own, `send(...)` for an SDK's transport."""

    def __init__(self, url: str, token: str | None = None) -> None:
        try:
            self._token = check_token(token, "WAKEFUL_GATEWAY_TOKEN")
        except GatewayConfigError as exc:
            raise InvalidInput(str(exc)) from None
        url = url.strip()
        if url.startswith("unix:"):
            path = url[len("unix:") :].removeprefix("//")
            if not path.startswith("/"):
                raise InvalidInput(f"WAKEFUL_GATEWAY_URL: unix: needs an absolute path: {url!r}")
            self.socket_path: str | None = path
            self.host, self.port = UNIX_HOST, 80
        else:
            parts = urlsplit(url)
            if parts.scheme != "http" or not parts.hostname or not is_loopback(parts.hostname):
                raise InvalidInput(
                    "WAKEFUL_GATEWAY_URL must be http://127.0.0.1:<port> (the gateway listens "
                    f"on loopback) or unix:/path, got {url!r}"
                )
            self.socket_path = None
            self.host, self.port = parts.hostname, parts.port or 80
        self.address = url

    def __repr__(self) -> str:
        return f"Gateway({self.address!r})"

    @property
    def base(self) -> str:
        if self.socket_path is not None:
            return f"http://{UNIX_HOST}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def url(self, destination: str, path: str = "") -> str:
        """`<gateway>/<destination><path>`: the base URL to give an SDK for a destination."""
        return f"{self.base}/{destination}{path}"

    def request(
        self,
        method: str,
        destination: str,
        path: str,
        *,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
        timeout: float = 30.0,
    ) -> GatewayResponse:
        """One request to `destination` through the gateway. A refusal is an answer too:
        see `GatewayResponse.refused`."""
        if not path.startswith("/"):
            path = "/" + path
        return self.send(method, self.url(destination, path), headers or {}, body, timeout)

    def send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None = None,
        timeout: float = 30.0,
    ) -> GatewayResponse:
        """Send to a URL on this gateway (an SDK's transport): OSError when the gateway
        cannot be reached, InvalidInput for a URL elsewhere."""
        parts = urlsplit(url)
        if f"{parts.scheme}://{parts.netloc}" != self.base:
            raise InvalidInput(f"not a URL on the gateway ({self.base}): {url[:100]!r}")
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        sent = {
            k: v
            for k, v in headers.items()
            if not k.lower().startswith("wakeful-") and k.lower() != "authorization"
        }
        if self._token is not None:
            sent["Authorization"] = f"Bearer {self._token}"
        if (trace := tracing.current_context()) is not None:
            sent["traceparent"] = trace  # the gateway's forward joins the caller's trace
        context = logs.current()
        for header, key in (("Wakeful-Inbox", "inbox"), ("Wakeful-Run", "run_id")):
            if context.get(key) is not None:
                sent[header] = str(context[key])
        conn = self._connection(timeout)
        try:
            conn.request(method.upper(), target, body=body, headers=sent)
            response = conn.getresponse()
            data = response.read()
            got = {k.lower(): v for k, v in response.getheaders()}
            return GatewayResponse(response.status, got, data)
        finally:
            conn.close()

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self.socket_path is not None:
            return _UnixConnection(self.socket_path, timeout)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)
