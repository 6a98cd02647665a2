"""A local operations service for the ops example's tests: `POST /restart/<service>` restarts
once per `Idempotency-Key` and answers a repeat of the key with the first answer, as a
well-behaved idempotent API does. A real HTTP server on port 0.

`hold` makes the next restart act (it is counted) and then wait before answering until
`release()`: a test kills the worker while the call is in flight, after the service acted and
before the worker could record the result."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class OpsService:
    def __init__(self) -> None:
        self.keys: list[str] = []
        """Every Idempotency-Key received, repeats included, in order."""
        self.restarts: list[dict[str, Any]] = []
        """What was done: one entry per restart that really happened."""
        self._answers: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._hold = threading.Event()
        self._held = threading.Event()
        self._released = threading.Event()
        self._released.set()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                service._post(self)

            def log_message(self, *_args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> OpsService:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._released.set()
        self.server.shutdown()
        self.server.server_close()

    def hold(self) -> None:
        """The next restart acts, then waits for `release` before answering."""
        self._released.clear()
        self._hold.set()

    def wait_held(self, timeout: float = 20.0) -> bool:
        return self._held.wait(timeout)

    def release(self) -> None:
        self._released.set()

    def _post(self, request: BaseHTTPRequestHandler) -> None:
        key = request.headers.get("Idempotency-Key") or ""
        parts = request.path.strip("/").split("/")
        if len(parts) != 2 or parts[0] != "restart" or not key:
            request.send_response(400)
            request.end_headers()
            return
        with self._lock:
            self.keys.append(key)
            answer = self._answers.get(key)
            if answer is None:
                answer = {"service": parts[1], "restart_id": f"rs-{len(self.restarts) + 1}"}
                self._answers[key] = answer
                self.restarts.append({**answer, "key": key})
            hold = self._hold.is_set()
            self._hold.clear()
        if hold:
            self._held.set()
            self._released.wait(60)
        body = json.dumps(answer).encode()
        try:
            request.send_response(200)
            request.send_header("Content-Type", "application/json")
            request.send_header("Content-Length", str(len(body)))
            request.end_headers()
            request.wfile.write(body)
        except OSError:
            pass  # the caller died while we held the answer
