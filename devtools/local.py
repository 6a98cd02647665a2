"""What `wakeful demo` and `wakeful dev` both set up on this machine: the credential gateway in
front of a fake Stripe, and a clock that can be moved forward (shared by processes)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wakeful.devtools.fake_stripe import FakeStripe


def start_gateway(
    folder: Path, stripe: FakeStripe, store: Any
) -> tuple[dict[str, str], Callable[[], None]]:
    """The credential gateway in front of the fake Stripe, in this process: the settings a
    worker refunds through it with (WAKEFUL_REFUNDS=stripe and the gateway's URL and token;
    the Stripe key stays here), and the function that stops it."""
    from wakeful.bot.gateway.serve import serve_in_background

    config = folder / "gateway.toml"
    config.write_text(
        'listen = "127.0.0.1:0"\n'
        f'audit_log = "{folder / "gateway-audit.jsonl"}"\n'
        "[destinations.stripe]\n"
        f'upstream = "{stripe.url}"\n'
        'allow = ["GET /v1/payment_intents/search", "POST /v1/refunds", "GET /v1/refunds"]\n'
        'secret_env = "STRIPE_SECRET_KEY"\n'
    )
    token = secrets.token_urlsafe(32)  # a gateway on TCP answers its token's holders only
    env = {"STRIPE_SECRET_KEY": stripe.api_key, "WAKEFUL_GATEWAY_TOKEN": token}
    url, stop = serve_in_background(config, env, store)
    worker_env = {
        "WAKEFUL_REFUNDS": "stripe",
        "WAKEFUL_GATEWAY_URL": url,
        "WAKEFUL_GATEWAY_TOKEN": token,
    }
    return worker_env, stop


class ShiftedClock:
    """The host's clock plus an offset that only grows: `wakeful dev`'s `/advance`. The offset
    lives in a file, so the worker process (and its replacement after `/crash`) reads the same
    time as the front and the signed requests: timers, leases and approval deadlines are all
    decided on it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int] | None = None
        self._offset = 0
        if not path.exists():
            path.write_text("0\n")

    @property
    def offset(self) -> int:
        """Seconds added to the host's clock."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return self._offset
        mark = (stat.st_mtime_ns, stat.st_size)
        if mark != self._seen:
            text = self.path.read_text().strip()
            if text:  # a read racing the writer's truncate keeps the last value
                self._offset, self._seen = int(text), mark
        return self._offset

    def advance(self, seconds: int) -> None:
        if seconds <= 0:
            raise ValueError(f"time only moves forward, got {seconds} s")
        new = self.path.with_suffix(".new")
        new.write_text(f"{self.offset + seconds}\n")
        new.replace(self.path)  # atomic: a reader sees the old offset or the new one

    def __call__(self) -> int:
        return int(time.time()) + self.offset

    def seconds(self) -> float:
        """The same time with its fraction: what signed requests are stamped with."""
        return time.time() + self.offset

    def monotonic(self) -> float:
        """The loops' sub-second timeline: the host's (`/advance` moves only the seconds)."""
        return time.monotonic()

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000
