"""The emulator over HTTP: the Web API, response URLs, and an admin API for other processes."""

from __future__ import annotations

import json
import socketserver
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from wakeful.devtools.emulator.common import (
    Call,
    JsonDict,
    log,
)


class Served(Protocol):
    """What the HTTP layer asks of the emulator it serves (state.py's SlackEmulator): the Web
    API and response_url answers, the OAuth page, and the admin calls other processes make."""

    scopes: list[str]

    def _dispatch(
        self,
        method: str,
        params: JsonDict,
        headers: dict[str, str],
        auth: str | None,
        body_ok: bool = True,
    ) -> tuple[int, JsonDict, dict[str, str], float | None]: ...
    def _response_url(
        self, key: str, body: Any, headers: dict[str, str]
    ) -> tuple[int, str, dict[str, str], float | None]: ...
    def _pause(self, delay: float | None) -> None: ...
    def authorize_page(self, query: JsonDict) -> tuple[int, str, dict[str, str]]: ...
    def messages(self, channel: str) -> list[JsonDict]: ...
    def calls(self, method: str | None = None) -> list[Call]: ...
    def ephemerals(self, channel: str | None = None, user: str | None = None) -> list[JsonDict]: ...
    def responses(self, key: str) -> list[Any]: ...
    def fault(
        self,
        method: str,
        *,
        status: int | None = None,
        error: str | None = None,
        retry_after: int | None = None,
        delay: float | None = None,
        times: int = 1,
    ) -> None: ...
    def clear_faults(self) -> None: ...
    def remove_channel(self, channel: str) -> None: ...
    def add_channel(self, channel: str) -> None: ...
    def clear(self) -> None: ...
    def streams(self, channel: str | None = None) -> list[JsonDict]: ...
    def open_streams(self) -> list[JsonDict]: ...
    def press_stop(self, channel: str, ts: str) -> None: ...


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], emulator: Served) -> None:
        self.emulator = emulator
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn(), a needless (and slow) DNS lookup.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "127.0.0.1", int(self.server_address[1])

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out and hung up is an expected, scripted outcome, not a bug.
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as Slack's Web API
    # Headers and body go out in two writes: without this, Nagle's algorithm holds the body
    # back until the client's delayed ACK of the headers, 40 ms on every kept-alive call.
    disable_nagle_algorithm = True
    server: _Server
    server_version = "SlackEmulator/1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _body(self) -> tuple[bytes, JsonDict, bool]:
        """Read the body as Slack would: JSON, form fields, or query string all at once."""
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        query = urllib.parse.urlsplit(self.path).query
        params: JsonDict = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
        ctype = (self.headers.get("Content-Type") or "").lower()
        if not raw.strip():
            return raw, params, True
        if "json" in ctype or (not ctype and raw.lstrip().startswith(b"{")):
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = None
            if not isinstance(parsed, dict):
                return raw, params, False
            return raw, {**params, **parsed}, True
        form = urllib.parse.parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True)
        return raw, {**params, **dict(form)}, True

    def _serve(self) -> None:
        emu = self.server.emulator
        path = urllib.parse.urlsplit(self.path).path
        raw, params, body_ok = self._body()
        headers = {k: str(v) for k, v in self.headers.items()}
        if path.startswith("/api/"):
            status, answer, extra, delay = emu._dispatch(
                path[len("/api/") :], params, headers, self.headers.get("Authorization"), body_ok
            )
            extra = {**extra, "x-oauth-scopes": ",".join(emu.scopes)}
            emu._pause(delay)
            self._send(
                status, json.dumps(answer).encode(), "application/json; charset=utf-8", extra
            )
        elif path.startswith("/response/"):
            key = urllib.parse.unquote(path[len("/response/") :])
            try:
                body: Any = json.loads(raw) if raw.strip() else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            status, text, extra, delay = emu._response_url(key, body, headers)
            emu._pause(delay)
            self._send(status, text.encode(), "text/plain; charset=utf-8", extra)
        elif path == "/oauth/v2/authorize":
            status, text, extra = emu.authorize_page(params)
            self._send(status, text.encode(), "text/plain; charset=utf-8", extra)
        elif path.startswith("/_emulator/"):
            self._admin(path[len("/_emulator/") :], params)
        else:
            self._send(404, b"not found", "text/plain; charset=utf-8")

    def _admin(self, action: str, p: JsonDict) -> None:
        """Let another process (chaos tests) read records and script faults over HTTP."""
        emu = self.server.emulator
        result: Any = {"ok": True}
        try:
            if action == "messages":
                result = emu.messages(str(p["channel"]))
            elif action == "calls":
                result = [asdict(c) for c in emu.calls(p.get("method"))]
            elif action == "ephemerals":
                result = emu.ephemerals(p.get("channel"), p.get("user"))
            elif action == "responses":
                result = emu.responses(str(p["key"]))
            elif action == "fault":
                opts = {
                    k: p[k] for k in ("status", "error", "retry_after", "delay", "times") if k in p
                }
                emu.fault(str(p["method"]), **opts)
            elif action == "clear_faults":
                emu.clear_faults()
            elif action == "remove_channel":
                emu.remove_channel(str(p["channel"]))
            elif action == "add_channel":
                emu.add_channel(str(p["channel"]))
            elif action == "clear":
                emu.clear()
            elif action == "streams":
                result = emu.streams(p.get("channel"))
            elif action == "open_streams":
                result = emu.open_streams()
            elif action == "press_stop":
                emu.press_stop(str(p["channel"]), str(p["ts"]))
            else:
                self._send(
                    404, b'{"ok": false, "error": "unknown_admin_action"}', "application/json"
                )
                return
        except (KeyError, TypeError, ValueError) as e:
            err = json.dumps({"ok": False, "error": f"bad_request: {e!r}"}).encode()
            self._send(400, err, "application/json")
            return
        self._send(200, json.dumps(result).encode(), "application/json; charset=utf-8")

    def _send(
        self, status: int, body: bytes, ctype: str, extra: Mapping[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)
