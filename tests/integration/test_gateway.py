"""The credential gateway on its own: what it lets through, what it refuses, what it writes down,
and its kill switch. The gateway runs as `wakeful gateway` does (its app on waitress, reading
the store's revocations) in front of the fake Stripe API; the kill switch test runs two real
`wakeful gateway` processes on one store. Both stores."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MakeStore
from tests.support.gateway import (
    ROOT,
    GatewayProcess,
    Running,
    audit_lines,
    gateway_in_thread,
    write_config,
)
from wakeful.core.gateway.client import Gateway
from wakeful.core.store import Store
from wakeful.core.store.sqlite import SQLiteConnector
from wakeful.devtools.fake_stripe import FakeStripe

SEARCH = "/v1/payment_intents/search?query=metadata%5B%27order_id%27%5D%3A%27A-7%27"


class Echo:
    """An upstream that answers every request with what it received (headers and body), and
    counts them: the stand-in for another host, or a service that echoes its caller."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        echo = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                echo._answer(self)

            def do_POST(self) -> None:
                echo._answer(self)

            def log_message(self, *_args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def _answer(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        seen = {"path": h.path, "headers": dict(h.headers), "body": h.rfile.read(length).decode()}
        self.seen.append(seen)
        body = json.dumps(seen).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stripe() -> Iterator[FakeStripe]:
    with FakeStripe() as fake:
        yield fake


@pytest.fixture
def echo() -> Iterator[Echo]:
    running = Echo()
    yield running
    running.close()


@pytest.fixture
def gateway(store: Store, stripe: FakeStripe, echo: Echo, tmp_path: Path) -> Iterator[Running]:
    config = write_config(tmp_path, stripe.url, extra={"echo": echo.url})
    with gateway_in_thread(config, {"STRIPE_SECRET_KEY": stripe.api_key}, store) as running:
        yield running


def raw(url: str, request: bytes) -> bytes:
    """One request written by hand (an absolute URL, a path no client would send)."""
    parts = urllib.parse.urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=5) as conn:
        conn.sendall(request)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_the_credential_is_added_and_the_callers_dropped(
    gateway: Running, stripe: FakeStripe, echo: Echo, tmp_path: Path
) -> None:
    stripe.add_payment("A-7")
    gw = gateway.client()
    got = gw.request("GET", "stripe", SEARCH, headers={"Authorization": "Bearer sk_worker_guess"})
    assert got.status == 200 and got.headers["wakeful-gateway"] == "forwarded"
    assert len(got.json()["data"]) == 1
    assert [r.authorized for r in stripe.requests] == [True], "the gateway's key, not the caller's"
    got = gw.request(
        "POST",
        "echo",
        "/anything",
        headers={"Cookie": "a=b", "X-Forwarded-For": "1.2.3.4"},
        body=b"secret-body",
    )
    assert got.status == 403 and got.refused == "not_allowed"  # echo allows GET / only
    got = gw.request("GET", "echo", "/x", headers={"Cookie": "a=b", "X-Forwarded-For": "1.2.3.4"})
    upstream = {k.lower(): v for k, v in echo.seen[-1]["headers"].items()}
    assert upstream["authorization"] == f"Bearer {stripe.api_key}", "the gateway's credential"
    assert "cookie" not in upstream and "x-forwarded-for" not in upstream
    back = {k.lower(): v for k, v in got.json()["headers"].items()}
    assert back["authorization"] == "Bearer [redacted]", "an echoed credential comes back masked"
    assert stripe.api_key not in got.body.decode()
    lines = audit_lines(tmp_path)
    assert [
        (a["destination"], a["method"], a["path"], a["status"], a["outcome"]) for a in lines
    ] == [
        ("stripe", "GET", "/v1/payment_intents/search", 200, "forwarded"),
        ("echo", "POST", "/anything", 403, "refused"),
        ("echo", "GET", "/x", 200, "forwarded"),
    ]
    text = (tmp_path / "gateway-audit.jsonl").read_text()
    assert stripe.api_key not in text and "secret-body" not in text and "A-7" not in text
    assert set(lines[0]) == {
        "time",
        "claimed_inbox",
        "claimed_run",
        "destination",
        "asked_for",
        "method",
        "path",
        "status",
        "idempotency_key",
        "duration_ms",
        "outcome",
        "reason",
    }


REFUSED = [
    (b"GET /elsewhere/v1/refunds HTTP/1.1", "unknown_destination"),
    (b"GET /evil.example.com/collect?d=secret HTTP/1.1", "unknown_destination"),
    (b"GET http://evil.example.com/stripe/v1/refunds/re_1 HTTP/1.1", "not_allowed"),
    (b"POST /stripe/v1/payouts HTTP/1.1", "not_allowed"),
    (b"GET /stripe/v1/customers HTTP/1.1", "not_allowed"),
    (b"DELETE /stripe/v1/refunds/re_1 HTTP/1.1", "not_allowed"),
    (b"GET /stripe/v1/refunds/../customers HTTP/1.1", "not_allowed"),
    (b"GET /stripe/v1/refunds/%2e%2e/customers HTTP/1.1", "not_allowed"),
    (b"GET /stripe/v1/refunds/re_1%2F..%2F..%2Fcustomers HTTP/1.1", "not_allowed"),
    (b"GET /stripe/v1/refunds//customers HTTP/1.1", "not_allowed"),
    (b"POST /stripe/v1/refunds_all HTTP/1.1", "not_allowed"),
]
"""Requests the gateway must refuse, each with its reason: other hosts and destinations it
does not have, methods and paths outside the allowlist, and paths that only look inside it."""


def test_anything_not_allowed_is_refused_sends_nothing_and_is_logged(
    gateway: Running, stripe: FakeStripe, echo: Echo, tmp_path: Path
) -> None:
    bearer = f"Authorization: Bearer {gateway.token}\r\n".encode()
    for request_line, reason in REFUSED:
        request = request_line + b"\r\nHost: x\r\n" + bearer
        request += b"Content-Length: 0\r\nConnection: close\r\n\r\n"
        head, _, body = raw(gateway.url, request).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 403"), (request_line, head)
        assert b"Wakeful-Gateway: refused" in head
        assert json.loads(body)["error"]["code"] == reason, request_line
    assert stripe.requests == [] and echo.seen == [], "nothing reached any upstream"
    lines = audit_lines(tmp_path)
    assert [(a["status"], a["outcome"], a["reason"]) for a in lines] == [
        (403, "refused", reason) for _, reason in REFUSED
    ]


def test_a_rate_limit_a_timeout_and_the_metrics(
    store: Store, stripe: FakeStripe, tmp_path: Path
) -> None:
    config = write_config(tmp_path, stripe.url, rate_limit=2, timeout=0.5)
    with gateway_in_thread(config, {"STRIPE_SECRET_KEY": stripe.api_key}, store) as running:
        gw = running.client()
        codes = [gw.request("GET", "stripe", "/v1/refunds/re_x").status for _ in range(3)]
        assert codes == [404, 404, 429], "two a second, then refused"
        time.sleep(0.6)
        stripe.hold_next("answer")
        pi = stripe.add_payment("B")
        got = gw.request(
            "POST",
            "stripe",
            "/v1/refunds",
            body=f"payment_intent={pi}".encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded", "Idempotency-Key": "k"},
        )
        stripe.release()
        assert (got.status, got.headers["wakeful-gateway"]) == (504, "upstream_error")
        metrics = gw.send("GET", f"{gw.base}/metrics", {}).body.decode()
    counted = 'wakeful_gateway_requests_total{destination="stripe",outcome="%s",status="%s"} %s'
    for outcome, status, n in (
        ("forwarded", 404, 2),
        ("refused", 429, 1),
        ("upstream_error", 504, 1),
    ):
        assert counted % (outcome, status, f"{n}.0") in metrics, metrics


def test_a_unix_socket_gateway_answers_its_own_user_only(
    store: Store, stripe: FakeStripe, tmp_path: Path
) -> None:
    path = tmp_path / "gw.sock"
    config = write_config(tmp_path, stripe.url, listen=f"unix:{path}")
    with gateway_in_thread(config, {"STRIPE_SECRET_KEY": stripe.api_key}, store) as running:
        assert running.url == f"unix:{path}"
        assert oct(path.stat().st_mode & 0o777) == "0o600"
        got = running.client().request("GET", "stripe", "/v1/refunds/re_nope")
        assert got.status == 404 and got.headers["wakeful-gateway"] == "forwarded"


def _db_of(store: Store) -> str:
    if isinstance(store.db, SQLiteConnector):
        return str(store.db.path)
    schema = store.db.schema  # type: ignore[attr-defined]
    return f"{store.db.dsn}?options=-csearch_path%3D{schema}"  # type: ignore[attr-defined]


def _cli(db: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WAKEFUL_DB": db}
    out = subprocess.run(
        [sys.executable, "-m", "wakeful.bot.commands.cli", "gateway", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return out.stdout.strip()


def _first_change(gateways: list[Gateway], want: int, budget: float = 3.0) -> float:
    """Seconds until every gateway answers `want` to a GET of a refund (polled every 20 ms)."""
    started = time.monotonic()
    waiting = set(range(len(gateways)))
    while waiting and time.monotonic() - started < budget:
        for i in list(waiting):
            if gateways[i].request("GET", "stripe", "/v1/refunds/re_x").status == want:
                waiting.discard(i)
        time.sleep(0.02)
    assert not waiting, f"gateways {sorted(waiting)} never answered {want}"
    return time.monotonic() - started


def test_revoke_returns_once_every_gateway_refuses_and_restore_undoes_it(
    make_store: MakeStore, stripe: FakeStripe, tmp_path: Path
) -> None:
    """Three gateway processes are asked without pause while `wakeful gateway revoke` runs in
    a process of its own: no request sent after the command returned is forwarded, at any.
    (Each reads the store every 0.25 s from its own start: a revoke that returned at its commit
    would be missed for a while by at least one of them nearly every time.)"""
    store = make_store()
    db = _db_of(store)
    env = {"STRIPE_SECRET_KEY": stripe.api_key}
    procs = [
        GatewayProcess(write_config(tmp_path, stripe.url), env, db, tmp_path / f"gw{i}.log")
        for i in range(3)
    ]
    try:
        gateways = [p.client() for p in procs]
        assert _first_change(gateways, 404) < 1.0  # all forward (Stripe: no such refund)
        asked: list[tuple[float, int, int]] = []  # (sent at, which gateway, status)
        returned = [float("inf")]
        stop = threading.Event()

        def ask(i: int) -> None:
            while not stop.is_set():
                at = time.monotonic()
                status = gateways[i].request("GET", "stripe", "/v1/refunds/re_x").status
                asked.append((at, i, status))
                time.sleep(0.002)

        askers = [threading.Thread(target=ask, args=(i,), daemon=True) for i in range(3)]
        for t in askers:
            t.start()
        began = time.monotonic()
        said = _cli(db, "revoke", "stripe", "--reason", "key leaked")
        returned[0] = time.monotonic()
        assert said == "revoked stripe: every gateway on this store refuses it now"
        deadline = returned[0] + 10
        while (
            min(sum(1 for at, g, _ in asked if at > returned[0] and g == i) for i in (0, 1, 2)) < 20
        ):
            assert time.monotonic() < deadline, "the gateways stopped answering"
            time.sleep(0.01)
        stop.set()
        for t in askers:
            t.join(10)
        after = [status for at, _, status in asked if at > returned[0]]
        assert set(after) == {403}, f"forwarded after revoke returned: {after.count(404)}"
        last_forwarded = max(at for at, _, status in asked if status == 404)
        first_refused = min(at for at, _, status in asked if status == 403)
        print(
            f"revoke took {returned[0] - began:.3f} s; the last forwarded request was sent "
            f"{returned[0] - last_forwarded:.3f} s and the first refused one "
            f"{returned[0] - first_refused:.3f} s before it returned"
        )
        answer = gateways[0].request("GET", "stripe", "/v1/refunds/re_x")
        assert answer.refused == "destination_revoked"
        status = _cli(db, "status")
        assert status.startswith("revoked destinations: 1\n  stripe  since ")
        assert status.endswith("reason: key leaked")
        assert _cli(db, "restore", "stripe") == "restored stripe"
        restored = _first_change(gateways, 404)
        print(f"restore took effect at every gateway in {restored:.3f} s")
        assert restored < 1.0
    finally:
        for p in procs:
            p.stop()


def test_the_audit_line_in_the_docs_has_the_fields_the_gateway_writes(
    gateway: Running, tmp_path: Path
) -> None:
    text = (ROOT / "docs" / "gateway.md").read_text()
    sample = json.loads(text.split("<!-- audit line -->\n```json\n", 1)[1].split("\n```", 1)[0])
    gateway.client().request("POST", "stripe", "/v1/refunds", headers={"Idempotency-Key": "k"})
    [line] = audit_lines(tmp_path)
    assert list(sample) == list(line)
    assert {k: type(v) for k, v in sample.items()} == {k: type(v) for k, v in line.items()}
