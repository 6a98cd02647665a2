"""A local fake of the Anthropic Messages API: a real HTTP server on 127.0.0.1 (port 0) that
the real `anthropic` SDK talks to.

Each test scripts the answers in order (status code, JSON body, optional delay) and reads back
every request body the SDK sent, so it can assert what the model was shown: the history, the
labelled batch, the tools offered and the tool results. A request with nothing scripted for it
gets a 400 and is counted in `unscripted`, so a test cannot pass by accident.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ids = itertools.count(1)


@dataclass(frozen=True)
class Scripted:
    status: int
    body: dict[str, Any]
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


def message(content: list[dict[str, Any]], stop_reason: str = "end_turn") -> dict[str, Any]:
    """A Messages API response body."""
    return {
        "id": f"msg_fake{next(_ids)}",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 100, "output_tokens": 20},
    }


def text(answer: str, stop_reason: str = "end_turn", delay: float = 0.0) -> Scripted:
    content = [{"type": "text", "text": answer}] if answer else []
    return Scripted(200, message(content, stop_reason), delay)


def tool_use(
    name: str, args: dict[str, Any], tool_id: str, *, say: str = "", stop_reason: str = "tool_use"
) -> Scripted:
    content: list[dict[str, Any]] = [{"type": "text", "text": say}] if say else []
    content.append({"type": "tool_use", "id": tool_id, "name": name, "input": args})
    return Scripted(200, message(content, stop_reason))


def tool_uses(*uses: tuple[str, dict[str, Any], str]) -> Scripted:
    """Several tool_use blocks in one assistant turn."""
    content = [{"type": "tool_use", "id": i, "name": n, "input": a} for n, a, i in uses]
    return Scripted(200, message(content, "tool_use"))


ERROR_TYPES = {
    429: "rate_limit_error",
    500: "api_error",
    503: "api_error",
    529: "overloaded_error",
}


def error(status: int, delay: float = 0.0) -> Scripted:
    kind = ERROR_TYPES.get(status, "invalid_request_error")
    body = {"type": "error", "error": {"type": kind, "message": f"fake {kind}"}}
    headers = {"retry-after": "1"} if status == 429 else {}
    return Scripted(status, body, delay, headers)


class FakeAnthropic:
    """POST /v1/messages answered from a queue of scripted replies."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.unscripted = 0
        self._script: deque[Scripted] = deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                if self.path.split("?")[0] != "/v1/messages":
                    self._send(404, {"type": "error", "error": {"type": "not_found_error"}}, {})
                    return
                with fake._lock:
                    fake.requests.append(json.loads(raw))
                    fake.headers.append({k.lower(): v for k, v in self.headers.items()})
                    reply = fake._script.popleft() if fake._script else None
                    if reply is None:
                        fake.unscripted += 1
                if reply is None:
                    body = {"type": "error", "error": {"type": "unscripted", "message": "no reply"}}
                    self._send(400, body, {})
                    return
                if reply.delay:
                    fake._closing.wait(reply.delay)
                self._send(reply.status, reply.body, reply.headers)

            def _send(self, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
                data = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.send_header("request-id", f"req_fake{next(_ids)}")
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up (its timeout): nothing to answer

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            block_on_close = False

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that hung up mid-answer is part of the timeout tests

        self.server = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def script(self, *replies: Scripted) -> None:
        with self._lock:
            self._script.extend(replies)

    @property
    def left(self) -> int:
        """Scripted replies not yet used."""
        with self._lock:
            return len(self._script)

    def close(self) -> None:
        self._closing.set()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)
