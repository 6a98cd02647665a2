"""The credential gateway for tests: its config written to a file, and the gateway itself run
in-process (the same app, revocation watch and waitress server `wakeful gateway` runs) or as
a real `wakeful gateway` process. Each gets a token of its own (WAKEFUL_GATEWAY_TOKEN) unless
the test gives one; `client()` and `worker_env` carry it to the callers."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wakeful.bot.gateway.serve import _server
from wakeful.bot.process.runtime import serve_in_thread
from wakeful.core.gateway.audit import AuditLog, Metrics
from wakeful.core.gateway.client import Gateway
from wakeful.core.gateway.config import TOKEN, load
from wakeful.core.gateway.process import Watch
from wakeful.core.gateway.server import GatewayApp, Revocations
from wakeful.core.store import Store

STRIPE_RULES = (
    "GET /v1/payment_intents/search?query&limit",
    "POST /v1/refunds",
    "GET /v1/refunds?payment_intent&limit&starting_after",
)
"""docs/gateway.md's rules: the refund tool's calls, with the query parameters each may carry."""
ROOT = Path(__file__).resolve().parents[2]


def write_config(
    folder: Path,
    upstream: str,
    *,
    name: str = "stripe",
    secret_env: str = "STRIPE_SECRET_KEY",
    secret_file: str | None = None,
    allow: tuple[str, ...] = STRIPE_RULES,
    listen: str = "127.0.0.1:0",
    timeout: float = 10,
    rate_limit: float = 1000,
    extra: Mapping[str, str] | None = None,
    headers: tuple[str, ...] | None = None,
) -> Path:
    """A gateway config with one destination (and `extra`: name -> upstream, GET / only);
    `headers`: the caller's headers it passes on (None: the default for its name)."""
    path = folder / f"gateway-{os.urandom(3).hex()}.toml"
    secret = f'secret_file = "{secret_file}"' if secret_file else f'secret_env = "{secret_env}"'
    lines = [
        f'listen = "{listen}"',
        f'audit_log = "{folder / "gateway-audit.jsonl"}"',
        f"[destinations.{name}]",
        f'upstream = "{upstream}"',
        "allow = " + json.dumps(list(allow)),
        secret,
        f"timeout = {timeout}",
        f"rate_limit = {rate_limit}",
    ]
    if headers is not None:
        lines.append("headers = " + json.dumps(list(headers)))
    for other, url in (extra or {}).items():
        lines += [f"[destinations.{other}]", f'upstream = "{url}"', 'allow = ["GET /"]']
        lines += [f'secret_env = "{secret_env}"']
    path.write_text("\n".join(lines) + "\n")
    return path


def audit_lines(folder: Path) -> list[dict[str, Any]]:
    path = folder / "gateway-audit.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def new_token() -> str:
    return secrets.token_urlsafe(32)


@dataclass
class Running:
    url: str
    app: GatewayApp
    watch: Watch
    token: str | None

    def client(self) -> Gateway:
        """A caller holding the token."""
        return Gateway(self.url, self.token)

    @property
    def worker_env(self) -> dict[str, str]:
        """What a worker is told: where the gateway is, and its token."""
        return {"WAKEFUL_GATEWAY_URL": self.url, TOKEN: self.token or ""}


@contextmanager
def gateway_in_thread(config: Path, env: Mapping[str, str], store: Store) -> Iterator[Running]:
    """The gateway's app on a waitress server in this process, reading `store`'s revocations
    (with a token of its own unless `env` holds one)."""
    env = {TOKEN: new_token(), **env}
    loaded = load(config, env)
    revocations = Revocations()
    watch = Watch(store, revocations)
    watch.read()
    watch.thread.start()
    audit = AuditLog(loaded.audit_log)
    app = GatewayApp(loaded, revocations, audit, Metrics())
    server = _server(app, loaded)
    stop = serve_in_thread(server)
    url = (
        f"unix:{loaded.unix_socket}"
        if loaded.unix_socket
        else f"http://127.0.0.1:{server.effective_port}"
    )
    try:
        yield Running(url, app, watch, loaded.token)
    finally:
        watch.stop.set()
        stop()
        audit.close()


GATEWAY_LINE = re.compile(r"^wakeful: gateway on (\S+) ")


_TOKENS: dict[str, str] = {}
"""The token of each config a GatewayProcess ran: a restart keeps it, as an operator's would."""


class GatewayProcess:
    """`wakeful gateway` as a real process; `url` once it listens. Its token is `token` when
    given (`""`: none, as a gateway on a Unix socket may run), else `env`'s, else the one this
    config had before, else a new one."""

    def __init__(
        self, config: Path, env: Mapping[str, str], db: str, log: Path, token: str | None = None
    ) -> None:
        self.log = log
        if token is None:
            token = env.get(TOKEN) or _TOKENS.setdefault(str(config), new_token())
        self.token = token
        cmd = [sys.executable, "-m", "wakeful.bot.commands.cli", "gateway", "--config", str(config)]
        full = {**os.environ, "PYTHONPATH": str(ROOT), **env, "WAKEFUL_DB": db}
        full[TOKEN] = self.token
        self.out = open(log, "ab")  # noqa: SIM115 (kept open for the process's life)
        self.proc = subprocess.Popen(
            cmd, env=full, stdout=subprocess.PIPE, stderr=self.out, stdin=subprocess.DEVNULL
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        match = GATEWAY_LINE.match(line)
        assert match, f"the gateway did not start: {line!r}\n{log.read_text()}"
        self.url = match.group(1)
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()

    def client(self) -> Gateway:
        """A caller holding the token."""
        return Gateway(self.url, self.token or None)

    @property
    def worker_env(self) -> dict[str, str]:
        """What a worker is told: where the gateway is, and its token."""
        return {"WAKEFUL_GATEWAY_URL": self.url, TOKEN: self.token}

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for chunk in self.proc.stdout:
            self.out.write(chunk)
            self.out.flush()

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._drainer.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        if not self.out.closed:
            self.out.close()
        return self.proc.returncode
