"""Refunds that are real, run as a user runs them: `wakeful serve` (with its gateway child, or
beside a `wakeful gateway` of its own for a split deployment) against the Slack emulator, the
fake Stripe API behind the gateway, and Stripe's signed webhooks back to `/webhooks/stripe`.

The exactly-once tests kill a process at the worst moment: the worker after Stripe refunded and
before the result was recorded, and, separately, the gateway in the middle of relaying Stripe's
answer. After recovery Stripe holds one refund per approved request, the person got one reply
naming it and one confirmation from Stripe's webhook, and the gateway's audit log shows the
same Idempotency-Key on both attempts. Both stores.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.test_examples import approve
from tests.support.chaos import free_port
from tests.support.gateway import GatewayProcess, audit_lines, write_config
from tests.support.other_user import as_nobody, need_root
from tests.support.slack_app import (
    Wakeful,
    dm,
    eventually,
    launch,
    shut_down,
)
from wakeful.devtools.emulator import SlackEmulator
from wakeful.devtools.fake_stripe import FakeStripe

BOSS, ALICE = "U0BOSS", "U0ALICE"
HOOKS = "C0HOOKS"
WEBHOOK_SECRET = "whsec_acceptance"


@pytest.fixture
def stripe() -> Iterator[FakeStripe]:
    with FakeStripe(webhook_secret=WEBHOOK_SECRET) as fake:
        yield fake


def settings(**more: str) -> dict[str, str]:
    return {
        "WAKEFUL_APPROVERS": BOSS,
        "WAKEFUL_BATCH_WINDOW": "0.1",
        "WAKEFUL_REFUNDS": "stripe",
        "WAKEFUL_STRIPE_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "WAKEFUL_WEBHOOK_CHANNEL": HOOKS,
        # The default lease: a killed worker's lease ends at once (its pid is gone,
        # core/heartbeat.py), so none need lapse; a short one lapses under a live run on a
        # loaded machine, its finish is refused and its tries are spent again (issue 36).
        "WAKEFUL_LEASE_TTL": "120",
        "WAKEFUL_BACKOFF_BASE": "1",
        **more,
    }


def start(
    tmp: Path, emu: SlackEmulator, db: str, stripe: FakeStripe, real_exec: bool = False, **more: str
) -> Wakeful:
    """`real_exec`: the real script, for a test that reads what serve was told in
    /proc/<pid>/environ (a fork would show its zygote's, whatever serve did with the secret)."""
    backend = "postgres" if "://" in db else "sqlite"
    app = launch(tmp, emu, db, settings(**more), backend=backend, fork=not real_exec)
    stripe.webhook_url = f"http://127.0.0.1:{app.port}"
    return app


def refund_and_wait(app: Wakeful, stripe: FakeStripe, order: str) -> str:
    assert app.sender.message(ALICE, f"refund order {order}").status == 200
    return approve(app, dm(ALICE))


def check_once(app: Wakeful, stripe: FakeStripe, order: str, request_id: str) -> None:
    """One refund, one reply naming it, one confirmation from Stripe's webhook."""
    channel = dm(ALICE)
    app.wait_post(channel, f"Refunded order {order} through Stripe (re_", timeout=30)
    app.wait_post(channel, f"Stripe confirmed the refund of order {order}", timeout=30)
    [refund] = stripe.refunds.values()
    assert refund["metadata"]["wakeful_request"] == request_id
    time.sleep(1.0)  # one settle: nothing else arrives
    # The reply and the confirmation are one post when the outbox held both (it merges held
    # rows of a conversation), two otherwise: count the lines, whichever posts carry them.
    lines = [line for m in app.emu.messages(channel) for line in str(m["text"]).split("\n\n")]
    assert [line for line in lines if line.startswith(f"Refunded order {order}")] == [
        f"Refunded order {order} through Stripe ({refund['id']}, 20.00 USD)."
    ]
    assert [line for line in lines if line.startswith("Stripe confirmed")] == [
        f"Stripe confirmed the refund of order {order} ({refund['id']}, 20.00 USD)."
    ]
    assert len(stripe.refunds) == 1


def everything_stored(db: str) -> str:
    """Every row of every table of the store, as text."""
    if "://" not in db:
        conn = sqlite3.connect(db)
        try:
            return "\n".join(conn.iterdump())
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(db) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = "
                "current_schema()"
            )
        ]
        return "\n".join(
            str(row[0])
            for t in tables
            for row in conn.execute(f'SELECT row_to_json(t)::text FROM "{t}" t')  # type: ignore[call-overload]
        )


def test_a_refund_through_serves_gateway_child_and_the_worker_never_holds_the_secret(
    emu: SlackEmulator, stripe: FakeStripe, db: str, tmp_path: Path
) -> None:
    config = write_config(tmp_path, stripe.url)
    app = start(
        tmp_path,
        emu,
        db,
        stripe,
        real_exec=True,
        WAKEFUL_GATEWAY_CONFIG=str(config),
        STRIPE_SECRET_KEY=stripe.api_key,
    )
    try:
        stripe.add_payment("1001")
        # The first try meets Stripe's rate limit: a wait, logged, then retried under the key.
        stripe.rate_limit(1, method="POST")
        request_id = refund_and_wait(app, stripe, "1001")
        check_once(app, stripe, "1001", request_id)
        assert stripe.keys_seen() == [request_id, request_id]
        secret = stripe.api_key.encode()
        worker = Path(f"/proc/{app.proc.popen.pid}/environ").read_bytes()
        assert b"STRIPE_SECRET_KEY" not in worker and secret not in worker
        token = _told(app)[b"WAKEFUL_GATEWAY_TOKEN"]
        assert b"WAKEFUL_GATEWAY_URL=http://127.0.0.1:" in worker and len(token) >= 32
        assert stripe.api_key not in everything_stored(db)
        log = app.proc.log.read_bytes() + "\n".join(list(app.proc.lines.queue)).encode()
        assert b"gateway started" in log, log
        assert f"(request {request_id}) failed (transient)".encode() in log, "the wait was logged"
        assert secret not in log and token not in log
        audit = (tmp_path / "gateway-audit.jsonl").read_bytes()
        assert request_id.encode() in audit and secret not in audit and token not in audit
        slack = json.dumps([c.params for c in emu.calls()]).encode()
        assert secret not in slack
    finally:
        shut_down(app)


def _told(app: Wakeful) -> dict[bytes, bytes]:
    """What serve's process was told at its (re-)execution: its environment."""
    worker = Path(f"/proc/{app.proc.popen.pid}/environ").read_bytes()
    return dict(v.split(b"=", 1) for v in worker.split(b"\0") if b"=" in v)


def test_another_user_can_use_neither_serves_gateway_child_nor_learn_its_token(
    emu: SlackEmulator, stripe: FakeStripe, db: str, tmp_path: Path
) -> None:
    need_root()
    config = write_config(tmp_path, stripe.url)  # the child listens on TCP: it gets a token
    gateway = {"WAKEFUL_GATEWAY_CONFIG": str(config), "STRIPE_SECRET_KEY": stripe.api_key}
    app = start(tmp_path, emu, db, stripe, real_exec=True, **gateway)
    try:
        told = _told(app)
        url, token = told[b"WAKEFUL_GATEWAY_URL"].decode(), told[b"WAKEFUL_GATEWAY_TOKEN"]
        serve, child = app.proc.popen.pid, int(told[b"WAKEFUL_GATEWAY_CHILD_PID"])
        seen = as_nobody(pids=[serve, child], port=int(url.rsplit(":", 1)[1]))
        assert (seen["status"], seen["mark"], seen["code"]) == (401, "refused", "unauthenticated")
        assert seen[f"environ {serve}"] == seen[f"environ {child}"] == "PermissionError"
        for pid in (serve, child):  # what every user can read of a process: never the token
            assert token not in Path(f"/proc/{pid}/cmdline").read_bytes()
        assert stripe.requests == [], "nothing of theirs reached Stripe"
        [line] = audit_lines(tmp_path)
        assert (line["status"], line["reason"]) == (401, "unauthenticated")
    finally:
        shut_down(app)
    assert token not in app.proc.log.read_bytes()


def test_sigkill_of_the_worker_between_stripe_and_the_record_refunds_once(
    emu: SlackEmulator, stripe: FakeStripe, db: str, tmp_path: Path
) -> None:
    socket_path = tmp_path / "gateway.sock"
    config = write_config(tmp_path, stripe.url, listen=f"unix:{socket_path}")
    env = {"STRIPE_SECRET_KEY": stripe.api_key}
    gateway = GatewayProcess(config, env, db, tmp_path / "gateway.log")
    url = gateway.worker_env
    try:
        stripe.add_payment("2001")
        app = start(tmp_path, emu, db, stripe, **url)
        try:
            stripe.hold_next("answer")
            request_id = refund_and_wait(app, stripe, "2001")
            assert stripe.held.wait(15), f"Stripe was never called:\n{app.tail()}"
            app.proc.popen.send_signal(signal.SIGKILL)  # Stripe refunded; nothing recorded
            assert app.proc.stop() == -signal.SIGKILL
        finally:
            app.store.close()
            stripe.release()
        assert len(stripe.refunds) == 1
        again = start(tmp_path, emu, db, stripe, **url)
        try:
            check_once(again, stripe, "2001", request_id)
            # The retry asks Stripe first and finds the refund the killed worker made: nothing
            # is sent again (the key alone would hold only while Stripe keeps it, 24 h).
            assert stripe.keys_seen() == [request_id], "one POST: the retry found its refund"
            audit = [(a["method"], a["path"]) for a in audit_lines(tmp_path)]
            assert audit.count(("POST", "/v1/refunds")) == 1, audit
            assert any(m == "GET" and p.startswith("/v1/refunds") for m, p in audit), audit
        finally:
            shut_down(again)
    finally:
        gateway.stop()


def test_sigkill_of_the_gateway_mid_request_refunds_once(
    emu: SlackEmulator, stripe: FakeStripe, db: str, tmp_path: Path
) -> None:
    listen = f"127.0.0.1:{free_port()}"
    config = write_config(tmp_path, stripe.url, listen=listen)
    env = {"STRIPE_SECRET_KEY": stripe.api_key}
    gateway = GatewayProcess(config, env, db, tmp_path / "gateway.log")
    stripe.add_payment("3001")
    try:
        app = start(tmp_path, emu, db, stripe, **gateway.worker_env)
    except BaseException:
        gateway.stop()  # serve did not start: the gateway must not outlive the test
        raise
    try:
        stripe.hold_next("body")  # Stripe refunds, sends its status, holds the body
        request_id = refund_and_wait(app, stripe, "3001")
        assert eventually(
            lambda: any(a["idempotency_key"] == request_id for a in audit_lines(tmp_path)), 15
        ), f"the gateway never had Stripe's answer:\n{app.tail()}"
        gateway.proc.send_signal(signal.SIGKILL)  # mid-request: the answer half relayed
        assert gateway.stop() == -signal.SIGKILL
        stripe.release()
        gateway = GatewayProcess(config, env, db, tmp_path / "gateway.log")  # restarted
        check_once(app, stripe, "3001", request_id)
        assert stripe.keys_seen()[0] == request_id and set(stripe.keys_seen()) == {request_id}
        # Stripe's answer was cut off: either the SDK sent again at once under the same key
        # (Stripe replayed its answer), or, the gateway still down, the call waited and its
        # retry asked Stripe first and found the refund. Either way one key, one refund.
        audit = audit_lines(tmp_path)
        keys = [a["idempotency_key"] for a in audit if a["method"] == "POST"]
        asked = [a for a in audit if a["method"] == "GET" and a["path"].startswith("/v1/refunds")]
        assert set(keys) == {request_id}, "only the request's own key, in the audit"
        assert len(keys) >= 2 or asked, [(a["method"], a["path"]) for a in audit]
    finally:
        shut_down(app)
        gateway.stop()
