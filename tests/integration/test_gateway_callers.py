"""Who may use the gateway, and what of their request reaches the destination.

A caller presents the gateway's token (any local user can connect to a loopback port); a
process of another user, run as uid 65534, is refused on the port (401, nothing sent) and on
the Unix socket (mode 0600: it cannot connect), and cannot read the token from the gateway's
environment. What reaches the destination is its credential and the caller's headers it lists,
nothing else (`Stripe-Account`, method overrides and forwarding headers never do), for the
methods, paths and query parameters its rules allow. The real gateway app on waitress, or real
`wakeful gateway` processes; both stores."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import MakeStore
from tests.integration.test_gateway import Echo, _db_of
from tests.support.gateway import (
    ROOT,
    GatewayProcess,
    Running,
    audit_lines,
    gateway_in_thread,
    write_config,
)
from tests.support.other_user import as_nobody, need_root
from wakeful.core.gateway.client import Gateway
from wakeful.core.store import Store
from wakeful.devtools.fake_stripe import FakeStripe

KEY = "sk_test_gateway_callers_key"


@pytest.fixture
def echo() -> Iterator[Echo]:
    running = Echo()
    yield running
    running.close()


@pytest.fixture
def gateway(store: Store, echo: Echo, tmp_path: Path) -> Iterator[Running]:
    """A gateway whose `stripe` destination is the echo (what it receives, it answers)."""
    config = write_config(tmp_path, echo.url, allow=("POST /v1/refunds", "GET /v1/refunds"))
    with gateway_in_thread(config, {"STRIPE_SECRET_KEY": KEY}, store) as running:
        yield running


def test_a_caller_must_present_the_token_and_it_is_never_passed_on(
    gateway: Running, echo: Echo, tmp_path: Path
) -> None:
    assert gateway.token
    for token in (None, "x" * 43, gateway.token[:-1] + "!"):
        got = Gateway(gateway.url, token).request("POST", "stripe", "/v1/refunds", body=b"a=1")
        assert (got.status, got.refused) == (401, "unauthenticated"), token
        assert got.headers["www-authenticate"].startswith("Bearer")
    got = gateway.client().request(
        "POST", "stripe", "/v1/refunds", body=b"a=1", headers={"Authorization": "Bearer sk_x"}
    )
    assert (got.status, got.headers["wakeful-gateway"]) == (200, "forwarded")
    [seen] = echo.seen
    sent = {k.lower(): v for k, v in seen["headers"].items()}
    assert sent["authorization"] == f"Bearer {KEY}", "the credential, in place of the token"
    assert gateway.token not in json.dumps(seen)
    bare = Gateway(gateway.url)
    assert bare.send("GET", f"{bare.base}/healthz", {}).status == 200, "no token needed"
    assert bare.send("GET", f"{bare.base}/metrics", {}).status == 200, "no token needed"
    lines = audit_lines(tmp_path)
    assert [(a["status"], a["outcome"], a["reason"]) for a in lines] == [
        *[(401, "refused", "unauthenticated")] * 3,
        (200, "forwarded", ""),
    ]
    assert gateway.token not in (tmp_path / "gateway-audit.jsonl").read_text()


def _gateway(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(
        [sys.executable, "-m", "wakeful.bot.commands.cli", "gateway", *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_a_gateway_on_tcp_does_not_start_without_a_token(tmp_path: Path) -> None:
    config = write_config(tmp_path, "http://127.0.0.1:9")
    env = {"STRIPE_SECRET_KEY": KEY, "WAKEFUL_DB": str(tmp_path / "w.db")}
    for token, says in (
        (None, "wakeful: WAKEFUL_GATEWAY_TOKEN is not set: a gateway on TCP (127.0.0.1:0)"),
        ("short", "wakeful: WAKEFUL_GATEWAY_TOKEN must be at least 32 visible ASCII"),
    ):
        given = {} if token is None else {"WAKEFUL_GATEWAY_TOKEN": token}
        done = _gateway(["--config", str(config)], {**env, **given})
        assert done.returncode == 2, done.stderr
        assert done.stdout == ""
        [line] = done.stderr.splitlines()
        assert line.startswith(says), line
    assert not (tmp_path / "w.db").exists(), "refused before anything was opened"


def test_another_user_can_use_neither_the_port_nor_the_socket(
    make_store: MakeStore, tmp_path: Path
) -> None:
    need_root()
    db = _db_of(make_store())
    opened = Path(tempfile.mkdtemp(prefix="wakeful-gw-"))  # a folder anyone may look into
    os.chmod(opened, 0o755)
    with FakeStripe() as stripe:
        env = {"STRIPE_SECRET_KEY": stripe.api_key}
        tcp = GatewayProcess(write_config(tmp_path, stripe.url), env, db, tmp_path / "tcp.log")
        socket_path = opened / "gateway.sock"
        unix_config = write_config(tmp_path, stripe.url, listen=f"unix:{socket_path}")
        unix = GatewayProcess(unix_config, env, db, tmp_path / "unix.log", token="")
        try:
            port = int(tcp.url.rsplit(":", 1)[1])
            refused = as_nobody(pids=[tcp.proc.pid], port=port)
            assert refused[f"environ {tcp.proc.pid}"] == "PermissionError", "the token is safe"
            assert (refused["status"], refused["mark"]) == (401, "refused")
            assert refused["code"] == "unauthenticated"
            guess = {"Authorization": "Bearer " + "A" * 43}
            assert as_nobody(port=port, headers=guess)["status"] == 401
            assert as_nobody(socket=str(socket_path))["connect"] == "PermissionError"
            assert stripe.requests == [], "nothing of theirs reached Stripe"
            # This user, with the token (TCP) or through the socket, is served.
            assert tcp.client().request("GET", "stripe", "/v1/refunds/re_x").status == 404
            assert unix.client().request("GET", "stripe", "/v1/refunds/re_x").status == 404
            assert [r.authorized for r in stripe.requests] == [True, True]
        finally:
            tcp.stop()
            unix.stop()
            shutil.rmtree(opened, ignore_errors=True)
    assert tcp.token not in tcp.log.read_text()


SENT = {
    "Content-Type": "application/x-www-form-urlencoded",
    "Idempotency-Key": "refund-1",
    "Accept": "application/json",
    "User-Agent": "Stripe/v1 PythonBindings/16",
    "Stripe-Version": "2024-06-20",
    "Stripe-Account": "acct_OTHER",
    "X-HTTP-Method-Override": "DELETE",
    "X-Forwarded-Host": "evil.example",
    "X-Stripe-Client-User-Agent": "{}",
    "Cookie": "a=b",
    "Accept-Encoding": "gzip",
    "Wakeful-Anything": "x",
}


def _upstream_saw(echo: Echo) -> dict[str, str]:
    return {k.lower(): v for k, v in echo.seen[-1]["headers"].items()}


def test_only_the_headers_a_destination_lists_reach_it(
    store: Store, gateway: Running, echo: Echo, tmp_path: Path
) -> None:
    got = gateway.client().request("POST", "stripe", "/v1/refunds", headers=SENT, body=b"a=1")
    assert (got.status, got.headers["wakeful-gateway"]) == (200, "forwarded")
    assert _upstream_saw(echo) == {
        "host": echo.url.removeprefix("http://"),
        "content-length": "3",
        "accept-encoding": "identity",  # http.client's own, not the caller's gzip
        "authorization": f"Bearer {KEY}",
        "content-type": "application/x-www-form-urlencoded",
        "idempotency-key": "refund-1",
        "accept": "application/json",
        "user-agent": "Stripe/v1 PythonBindings/16",
        "stripe-version": "2024-06-20",
    }
    # A destination's own list: what it names passes, the rest (Stripe-Version too) does not.
    folder = tmp_path / "own"
    folder.mkdir()
    own = ("Accept", "X-Ledger-Book")
    config = write_config(folder, echo.url, name="ledger", allow=("POST /",), headers=own)
    with gateway_in_thread(config, {"STRIPE_SECRET_KEY": KEY}, store) as running:
        asked = {**SENT, "X-Ledger-Book": "eu"}
        got = running.client().request("POST", "ledger", "/entries", headers=asked, body=b"{}")
        assert got.status == 200
    saw = _upstream_saw(echo)
    assert {k for k in saw if k not in ("host", "content-length", "accept-encoding")} == {
        "authorization",
        "accept",
        "x-ledger-book",
    }


def test_allow_rules_may_constrain_the_query(store: Store, echo: Echo, tmp_path: Path) -> None:
    allow = ("GET /v1/refunds?payment_intent&limit&starting_after", "GET /v1/balance?")
    config = write_config(tmp_path, echo.url, allow=allow)
    with gateway_in_thread(config, {"STRIPE_SECRET_KEY": KEY}, store) as running:
        gw = running.client()
        verdicts = {
            path: gw.request("GET", "stripe", path).status
            for path in (
                "/v1/refunds?payment_intent=pi_1&limit=100",
                "/v1/refunds?limit=100&starting_after=re_1&payment_intent=pi_1",
                "/v1/refunds",
                "/v1/refunds?payment_intent=pi_1&customer=cus_1",
                "/v1/refunds?expand%5B%5D=charge",
                "/v1/balance",
                "/v1/balance?currency=usd",
            )
        }
    assert verdicts == {
        "/v1/refunds?payment_intent=pi_1&limit=100": 200,
        "/v1/refunds?limit=100&starting_after=re_1&payment_intent=pi_1": 200,
        "/v1/refunds": 200,
        "/v1/refunds?payment_intent=pi_1&customer=cus_1": 403,
        "/v1/refunds?expand%5B%5D=charge": 403,
        "/v1/balance": 200,
        "/v1/balance?currency=usd": 403,
    }
    assert [s["path"] for s in echo.seen] == [
        "/v1/refunds?payment_intent=pi_1&limit=100",
        "/v1/refunds?limit=100&starting_after=re_1&payment_intent=pi_1",
        "/v1/refunds",
        "/v1/balance",
    ]
    refused = [a["reason"] for a in audit_lines(tmp_path) if a["status"] == 403]
    assert refused == ["not_allowed"] * 3
