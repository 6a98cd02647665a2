"""Tracing (issue 39, item 4): attributes never leak. `wakeful demo` run whole with tracing on
(OpenTelemetry's own OTLP exporter, configured by OTEL_* only, to a real receiver on loopback):
every byte it exported, resources, attributes, links, events and statuses alike, is searched
for each secret the demo holds (the signing secret, the bot token, both webhook secrets, the
fake Stripe's key and the gateway's token, which the demo makes at random and so are searched
for by shape) and for what its people wrote (message text is traced only with
WAKEFUL_OTEL_CONTENT=on). tests/integration/test_tracing_secrets.py does the same in-process
with the Claude agent, a DSN holding a password and a gateway of its own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support.otlp_receiver import OtlpReceiver
from wakeful.devtools.demo import GITHUB_SECRET, SECRET, STRIPE_SECRET, TOKEN

WORDS = ("please refund order 1001", "is the refund desk open", "lunch anyone", "digest every")
"""What the demo's people write, each distinctive."""
SHAPES = {
    "a Slack token": re.compile(rb"xox[a-z]-[A-Za-z0-9-]+"),
    "a Stripe key": re.compile(rb"[sr]k_(?:live|test)_[A-Za-z0-9_]+"),
    "a Stripe webhook secret": re.compile(rb"whsec_[A-Za-z0-9_]+"),
    # The gateway's token (secrets.token_urlsafe(32)): 43 URL-safe characters, never all hex.
    "a gateway token": re.compile(
        rb"(?<![A-Za-z0-9_-])(?![0-9a-f]{43})[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])"
    ),
}


def test_no_byte_a_traced_demo_exports_holds_a_secret_or_what_a_person_wrote(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "WAKEFUL_"))}
    with OtlpReceiver() as receiver:
        env |= {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "200"}
        exe = Path(sys.executable).parent / "wakeful"
        out = subprocess.run(
            [str(exe), "demo"], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env
        )
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        spans, bodies = receiver.spans(), receiver.bodies()
    names = {s.name for s in spans}
    # What was searched is the demo's whole work: the front, runs, posts, the approved refund
    # through the gateway's forward, webhooks, timers.
    for name in ("slack.request", "webhook.request", "wakeful.run", "wakeful.post"):
        assert name in names, sorted(names)
    assert "execute_tool refund_order" in names and "gateway.forward" in names, sorted(names)
    assert "wakeful.timer" in names, sorted(names)
    exported = b"\n".join(bodies)
    for secret in (SECRET, TOKEN, GITHUB_SECRET, STRIPE_SECRET):
        assert secret.encode() not in exported, f"{secret!r} was exported"
    for kind, shape in SHAPES.items():
        found = shape.search(exported)
        assert found is None, f"{kind} was exported: {found.group()!r}"
    for words in WORDS:
        assert words.encode() not in exported, f"{words!r} was traced with content off"
