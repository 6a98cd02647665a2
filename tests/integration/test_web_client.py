"""The Web API client keeps one connection per thread, replaces one the server closed while it
was idle, and reads errors exactly as slack_sdk does."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError

from wakeful.bot.slack.sender import make_client


class _Counting(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, close_after_each: bool) -> None:
        self.connections = 0
        self.close_after_each = close_after_each
        self.closed = threading.Semaphore(0)
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        self.connections += 1
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        super().shutdown_request(request)
        self.closed.release()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Counting

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.endswith("chat.postMessage"):
            status, body = 200, b'{"ok": true, "ts": "1.0"}'
        else:
            status, body = 429, b'{"ok": false, "error": "ratelimited"}'
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        if status == 429:
            self.send_header("Retry-After", "7")
        self.end_headers()
        self.wfile.write(body)
        if self.server.close_after_each:
            self.close_connection = True  # gone while idle, without saying so


@pytest.fixture(params=[False, True], ids=["keeps", "closes"])
def server(request: pytest.FixtureRequest) -> Iterator[_Counting]:
    srv = _Counting(close_after_each=request.param)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def test_calls_share_a_connection_and_one_closed_by_the_server_is_replaced(
    server: _Counting,
) -> None:
    client = make_client("xoxb-t", f"http://127.0.0.1:{server.server_address[1]}/api/")
    try:
        for i in range(20):
            assert client.chat_postMessage(channel="C1", text=f"n{i}")["ts"] == "1.0"
            if server.close_after_each:  # the server has closed it before the next call
                assert server.closed.acquire(timeout=5)
                time.sleep(0.005)
    finally:
        client.close()
    assert server.connections == (20 if server.close_after_each else 1)


def test_an_error_answer_reads_as_slack_sdk_reads_it(server: _Counting) -> None:
    client = make_client("xoxb-t", f"http://127.0.0.1:{server.server_address[1]}/api/")
    try:
        with pytest.raises(SlackApiError) as info:
            client.chat_update(channel="C1", ts="1.0", text="x")
        assert info.value.response.status_code == 429
        assert info.value.response["error"] == "ratelimited"
        assert info.value.response.headers.get("Retry-After") == "7"
        if server.close_after_each:
            assert server.closed.acquire(timeout=5)
            time.sleep(0.005)
        assert client.chat_postMessage(channel="C1", text="after")["ok"]  # still usable
    finally:
        client.close()
