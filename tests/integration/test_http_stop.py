"""Stopping the product's waitress front (`serve_in_thread`): at once, not after the loop's
select timeout (waitress's `asyncore_loop_timeout`, 1 s), with its port closed and its thread
ended. Every `wakeful serve` shutdown and every test server pays this stop."""

from __future__ import annotations

import http.client
import socket
import threading
import time

import pytest

from wakeful.bot.process.runtime import http_server, serve_in_thread

PROMPT = 0.5
"""Well under waitress's 1 s loop timeout, well over what a stop takes (milliseconds)."""


def hello(environ: object, start_response: object) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])  # type: ignore[operator]
    return [b"hello"]


def served_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "wakeful-http"]


@pytest.mark.parametrize("used", [False, True], ids=["idle", "after-a-request"])
def test_a_served_front_stops_at_once_and_closes_its_port(used: bool) -> None:
    before = set(served_threads())
    server = http_server(hello, "127.0.0.1", 0)
    port = int(server.effective_port)
    stop = serve_in_thread(server)
    if used:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/")
        assert conn.getresponse().read() == b"hello"
        conn.close()
    time.sleep(0.05)  # the loop is in its select when the stop comes
    started = time.monotonic()
    stop()
    took = time.monotonic() - started
    assert took < PROMPT, f"the stop took {took:.2f} s"
    assert set(served_threads()) <= before, "the server's thread is still running"
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    stop()  # a second stop is harmless
