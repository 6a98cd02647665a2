"""`wakeful serve` taking webhooks as GitHub and Stripe send them.

The real command runs as a subprocess with webhook secrets in its environment; deliveries are
the services' own payload examples, signed per delivery and posted over loopback HTTP; Slack's
side is the local emulator. Assertions are on what is observable from outside: statuses, what
the emulator received (and when), and the store read from the test process.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.slack_app import (
    APP_SETTINGS,
    BOT_USER,
    TEAM,
    TOKEN,
    Wakeful,
    child_env,
    eventually,
    launch,
    pg_schema_url,
    settle,
    shut_down,
    wakeful_cmd,
)
from wakeful.bot.front.wsgi import BODY_CAP
from wakeful.core.inbox_id import InboxId
from wakeful.core.store import open_store
from wakeful.devtools.audit import count_events
from wakeful.devtools.emulator import SlackEmulator
from wakeful.devtools.webhooks import (
    Sent,
    WebhookSender,
    github_payload,
    github_signature,
    stripe_event,
)

GITHUB_SECRET = "acceptance-github-secret"
STRIPE_SECRET = "whsec_acceptance"
CI_SECRET = "acceptance-ci-secret"
OPS, PAY = "C0OPS", "C0PAY"
GAP = 3
WEBHOOK_SETTINGS = {
    **APP_SETTINGS,
    "WAKEFUL_OUTBOX_GAP": str(GAP),
    "WAKEFUL_GITHUB_WEBHOOK_SECRET": GITHUB_SECRET,
    "WAKEFUL_STRIPE_WEBHOOK_SECRET": STRIPE_SECRET,
    "WAKEFUL_WEBHOOKS": f"ci={CI_SECRET}",
    "WAKEFUL_WEBHOOK_CHANNEL": OPS,
    "WAKEFUL_WEBHOOK_CHANNEL_STRIPE": PAY,
}


def hooks(app: Wakeful) -> WebhookSender:
    return WebhookSender(
        f"http://127.0.0.1:{app.port}",
        github_secret=GITHUB_SECRET,
        stripe_secret=STRIPE_SECRET,
        secrets={"ci": CI_SECRET},
    )


@pytest.fixture(scope="module")
def sqlite_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wakeful]:
    tmp = tmp_path_factory.mktemp("webhooks-sqlite")
    with SlackEmulator(bot_token=TOKEN, bot_user_id=BOT_USER, team_id=TEAM) as emu:
        running = launch(tmp, emu, str(tmp / "wakeful.db"), WEBHOOK_SETTINGS)
        try:
            yield running
        finally:
            shut_down(running)


@pytest.fixture(scope="module")
def postgres_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wakeful]:
    tmp = tmp_path_factory.mktemp("webhooks-pg")
    with (
        pg_schema_url() as url,
        SlackEmulator(bot_token=TOKEN, bot_user_id=BOT_USER, team_id=TEAM) as emu,
    ):
        running = launch(tmp, emu, url, WEBHOOK_SETTINGS, backend="postgres")
        try:
            yield running
        finally:
            shut_down(running)


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.pg)])
def app(request: pytest.FixtureRequest) -> Wakeful:
    running: Wakeful = request.getfixturevalue(f"{request.param}_app")
    return running


def stored_now(app: Wakeful, source: str, sent: Sent) -> bool:
    """Read at the moment the answer arrived: a 200 must follow the commit."""
    return app.store.event_by_key(source, sent.delivery_id) is not None


def posts(app: Wakeful, channel: str, needle: str) -> list[dict[str, Any]]:
    return [m for m in app.emu.messages(channel) if needle in str(m.get("text", ""))]


# -- deliveries in, one line each ----------------------------------------------------------------


def test_serve_names_the_webhook_endpoints_it_serves(app: Wakeful) -> None:
    line = app.proc.next_line(timeout=5)
    assert line == (
        f"wakeful: webhooks on http://127.0.0.1:{app.port}: /webhooks/github -> {OPS}, "
        f"/webhooks/stripe -> {PAY}, /webhooks/ci -> {OPS}"
    )


def test_a_github_delivery_and_its_redelivery_are_one_line(app: Wakeful) -> None:
    sender = hooks(app)
    body = json.loads(github_payload("pull_request.opened"))
    body["pull_request"]["title"] = f"Acceptance {uuid.uuid4().hex[:8]}"
    raw = json.dumps(body, indent=2).encode()
    first = sender.github("pull_request", raw)
    assert (first.status, first.text) == (200, "stored")
    assert stored_now(app, "github", first), "the 200 left before the delivery was committed"
    again = sender.github("pull_request", raw, delivery=first.delivery_id)
    assert (again.status, again.text) == (200, "duplicate delivery; already stored")
    line = (
        f"GitHub pull_request.opened Codertocat/Hello-World: {body['pull_request']['title']} "
        "https://github.com/Codertocat/Hello-World/pull/2"
    )
    app.wait_post(OPS, line)
    settle(app, InboxId.conversation(OPS))
    assert len(posts(app, OPS, line)) == 1, app.emu.messages(OPS)
    [event] = [
        e for e in app.store.events(InboxId.conversation(OPS)) if e.source_id == first.delivery_id
    ]
    assert (event.source, event.status) == ("github", "done")


def test_a_stripe_burst_inside_the_gap_is_one_merged_post(app: Wakeful) -> None:
    sender = hooks(app)
    lead = stripe_event("payment_intent.succeeded")
    assert sender.stripe(lead).status == 200
    app.wait_post(PAY, "Stripe payment_intent.succeeded")
    burst = [stripe_event(t) for t in ("charge.succeeded", "charge.dispute.created")]
    burst.append(stripe_event("invoice.payment_failed"))
    for event in burst:
        sent = sender.stripe(event)
        assert (sent.status, sent.text) == (200, "stored") and stored_now(app, "stripe", sent)
    sender.stripe(burst[0])  # Stripe retrying the first: stores and says nothing new
    app.wait_post(PAY, "Stripe invoice.payment_failed", timeout=GAP + 10)
    settle(app, InboxId.conversation(PAY))
    [merged] = posts(app, PAY, "Stripe charge.succeeded")
    assert merged["text"] == "\n\n".join(
        [
            "Stripe charge.succeeded ch_1PgafuB7WZ01zgkWXYmPNZs8 1.00 USD",
            "Stripe charge.dispute.created dp_1Pgc71B7WZ01zgkWMevJiAUx 10.00 USD",
            "Stripe invoice.payment_failed in_1Pgc6tB7WZ01zgkWu9fdqL6I 10.00 USD",
        ]
    )
    calls = [c for c in app.emu.calls("chat.postMessage") if c.params.get("channel") == PAY]
    lead_call = next(c for c in calls if "payment_intent.succeeded" in str(c.params.get("text")))
    merged_call = next(c for c in calls if "invoice.payment_failed" in str(c.params.get("text")))
    # The engine counts the gap in whole seconds: it lasts between GAP - 1 and GAP.
    assert merged_call.at - lead_call.at > GAP - 1, "the burst did not wait for the gap"


def test_a_generic_delivery_is_reported_by_name(app: Wakeful) -> None:
    delivery = f"build-{uuid.uuid4().hex[:8]}"
    sent = hooks(app).generic("ci", b'{"result": "failed"}', delivery=delivery)
    assert (sent.status, sent.text) == (200, "stored") and stored_now(app, "ci", sent)
    app.wait_post(OPS, f"ci delivery {delivery}", timeout=GAP + 10)


# -- refusals ----------------------------------------------------------------------------------


def raw_post(app: Wakeful, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", app.port, timeout=10)
    try:
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def test_refused_deliveries_store_nothing(app: Wakeful) -> None:
    ping = github_payload("ping")
    signed = {
        "X-GitHub-Event": "ping",
        "X-GitHub-Delivery": str(uuid.uuid4()),
        "X-Hub-Signature-256": github_signature(GITHUB_SECRET, ping),
        "Content-Type": "application/json",
    }
    stale = stripe_event("charge.succeeded")
    before = count_events(app.store)
    cases = [
        (raw_post(app, "/webhooks/github", ping + b"\n", signed), 401),
        (raw_post(app, "/webhooks/gitlab", ping, signed), 404),
        (
            raw_post(
                app,
                "/webhooks/github",
                b"{not json",
                {**signed, "X-Hub-Signature-256": github_signature(GITHUB_SECRET, b"{not json")},
            ),
            400,
        ),
    ]
    late = hooks(app).stripe(stale, timestamp=int(time.time()) - 301)
    cases.append(((late.status, late.text), 401))
    for (status, text), expected in cases:
        assert status == expected, text
    with socket.create_connection(("127.0.0.1", app.port), timeout=10) as sock:
        head = "".join(f"{k}: {v}\r\n" for k, v in signed.items())
        sock.sendall(
            f"POST /webhooks/github HTTP/1.1\r\nHost: x\r\n{head}"
            f"Content-Length: {BODY_CAP + 1}\r\n\r\n".encode()
        )
        assert sock.recv(4096).startswith(b"HTTP/1.1 413 ")
    assert count_events(app.store) == before
    assert app.store.event_by_key("stripe", stale["id"]) is None


# -- settings ------------------------------------------------------------------------------------


def test_a_bad_webhook_setting_stops_start_up_with_one_line(tmp_path: Path) -> None:
    cases = {
        "no channel": (
            {"WAKEFUL_GITHUB_WEBHOOK_SECRET": "x"},
            "wakeful: WAKEFUL_WEBHOOK_CHANNEL is not set (the Slack conversation id webhook "
            "reports go to, required when a webhook secret is set)",
        ),
        "bad name": (
            {"WAKEFUL_WEBHOOKS": "Deploys=x", "WAKEFUL_WEBHOOK_CHANNEL": OPS},
            "wakeful: WAKEFUL_WEBHOOKS: 'Deploys' is not a webhook name (lower-case letters, "
            "digits and _, starting with a letter, at most 32)",
        ),
        "reserved name": (
            {"WAKEFUL_WEBHOOKS": "stripe=x", "WAKEFUL_WEBHOOK_CHANNEL": OPS},
            "wakeful: WAKEFUL_WEBHOOKS: 'stripe' is reserved",
        ),
        "channel name": (
            {"WAKEFUL_STRIPE_WEBHOOK_SECRET": STRIPE_SECRET, "WAKEFUL_WEBHOOK_CHANNEL": "#ops"},
            "wakeful: WAKEFUL_WEBHOOK_CHANNEL must be a Slack conversation id",
        ),
    }
    with SlackEmulator(bot_token=TOKEN) as emu:
        procs = {}
        for n, (name, (settings, _)) in enumerate(cases.items()):
            env = child_env(
                SLACK_BOT_TOKEN=TOKEN,
                SLACK_SIGNING_SECRET="s",
                SLACK_API_URL=emu.api_url,
                WAKEFUL_HOST="127.0.0.1",
                WAKEFUL_PORT="0",
                WAKEFUL_DB=str(tmp_path / f"case-{n}.db"),
                **settings,
            )
            procs[name] = subprocess.Popen(
                wakeful_cmd("serve"),
                env=env,
                cwd=tmp_path,
                text=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        for n, (name, proc) in enumerate(procs.items()):
            out, err = proc.communicate(timeout=30)
            lines = [ln for ln in err.splitlines() if ln.strip()]
            assert proc.returncode == 2, (name, out, err)
            assert len(lines) == 1 and lines[0].startswith(cases[name][1]), (name, lines)
            assert "listening" not in out, name
            assert not (tmp_path / f"case-{n}.db").exists(), f"{name}: wrote the store first"


def test_webhooks_are_served_beside_socket_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In Socket Mode nothing else listens over HTTP, yet webhooks still need a URL: serve
    answers them on WAKEFUL_PORT. (The Socket Mode connection itself is replaced here: the
    emulator has no WebSocket; tests/integration/test_socket_mode.py covers that side.)"""
    from slack_sdk.socket_mode.builtin import SocketModeClient

    from wakeful.bot.commands import cli

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    stops: list[Any] = []
    monkeypatch.setattr(SocketModeClient, "connect", lambda self: None)
    monkeypatch.setattr(SocketModeClient, "close", lambda self: None)
    monkeypatch.setattr("wakeful.bot.process.runtime.install_signal_handlers", stops.append)
    switch = sys.getswitchinterval()
    with SlackEmulator(bot_token=TOKEN, bot_user_id=BOT_USER, team_id=TEAM) as emu:
        env = {
            "SLACK_BOT_TOKEN": TOKEN,
            "SLACK_APP_TOKEN": "xapp-1-socket",
            "SLACK_API_URL": emu.api_url,
            "WAKEFUL_DB": str(tmp_path / "socket.db"),
            "WAKEFUL_HOST": "127.0.0.1",
            "WAKEFUL_PORT": str(port),
            "WAKEFUL_GITHUB_WEBHOOK_SECRET": GITHUB_SECRET,
            "WAKEFUL_WEBHOOK_CHANNEL": OPS,
        }
        for key in list(os.environ):
            if key.startswith(("SLACK_", "WAKEFUL_")):
                monkeypatch.delenv(key)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        args = cli.build_parser().parse_args(["serve"])
        result: list[int] = []
        thread = threading.Thread(target=lambda: result.append(cli._serve(args)), daemon=True)
        thread.start()
        try:
            sender = WebhookSender(f"http://127.0.0.1:{port}", github_secret=GITHUB_SECRET)
            answered: list[Sent] = []

            def delivered() -> bool:
                try:
                    answered.append(sender.github_example("issues.opened"))
                except OSError:
                    return False
                return True

            assert eventually(delivered, 15), "nothing answered on WAKEFUL_PORT in Socket Mode"
            assert (answered[-1].status, answered[-1].text) == (200, "stored")
            assert emu.wait_for(
                lambda e: any("GitHub issues.opened" in str(m["text"]) for m in e.messages(OPS)),
                10,
            ), "the delivery was not reported in Slack"
        finally:
            for stop in stops:
                stop()
            thread.join(15)
            sys.setswitchinterval(switch)
    assert result == [0]
    store = open_store(tmp_path / "socket.db")
    try:
        assert [e.source for e in store.events(InboxId.conversation(OPS))] == ["github"]
    finally:
        store.close()
