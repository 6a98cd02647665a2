"""`wakeful gateway`: the process that holds the tools' secrets.

It reads its configuration (and so its secrets) first, registers every secret with the log
redaction, makes itself undumpable on Linux (another process of the same user can then read
neither its memory nor its /proc environment), opens the store for the revocations, and serves
loopback or a Unix socket with waitress. A thread reads the revocations a few times a second;
when it cannot, the gateway refuses everything until it can (the kill switch fails closed).

Started by `wakeful serve` as a child (bot/gateway_child.py), the gateway leaves as soon as its
parent is gone, so a SIGKILLed serve never leaves a gateway behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wakeful.core import logs
from wakeful.core.errors import StoreError
from wakeful.core.gateway.audit import AuditLog, Metrics
from wakeful.core.gateway.config import MAX_BODY, GatewayConfig, load
from wakeful.core.gateway.server import GatewayApp, Revocations
from wakeful.core.store import Store, open_store

log = logging.getLogger("wakeful.gateway")
POLL = 0.25
"""Seconds between two reads of the revocations: a revoke reaches every gateway well inside
its one-second promise."""


def not_dumpable() -> bool:
    """prctl(PR_SET_DUMPABLE, 0): no core dump, no ptrace, no /proc/<pid>/environ or mem for
    other processes of this user. True when it took (Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(4, 0, 0, 0, 0)) == 0  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        return False


def die_with_parent() -> None:
    """prctl(PR_SET_PDEATHSIG, SIGTERM) on Linux: the kernel ends a child whose parent died."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)


class Watch:
    """Reads the revocations from the store every POLL seconds, on a thread of its own."""

    def __init__(self, store: Store, revocations: Revocations) -> None:
        self.store, self.revocations = store, revocations
        self.stop = threading.Event()
        self._warned_at = 0.0
        self.thread = threading.Thread(target=self._run, name="wakeful-gateway-watch", daemon=True)

    def read(self) -> bool:
        try:
            self.revocations.update(self.store.revoked_destinations())
            return True
        except StoreError as exc:
            if time.monotonic() - self._warned_at > 10:
                self._warned_at = time.monotonic()
                log.warning("gateway: cannot read the revocations (refusing all): %s", exc)
            return False

    def _run(self) -> None:
        while not self.stop.wait(POLL):
            self.read()


def serve(
    config_path: str | Path,
    env: Mapping[str, str],
    db: str,
    ready_fd: int | None = None,
    parent: int | None = None,
) -> int:
    """Run the gateway until SIGTERM / SIGINT (or its parent's death)."""
    os.umask(0o077)
    config = load(config_path, env)
    logs.add_secrets(config.secrets())
    not_dumpable()
    if parent is not None:
        die_with_parent()
    store = open_store(db)
    revocations = Revocations()
    watch = Watch(store, revocations)
    watch.read()
    watch.thread.start()
    audit = AuditLog(config.audit_log)
    app = GatewayApp(config, revocations, audit, Metrics())
    server = _server(app, config)
    url = _url(config, server)
    names = ", ".join(sorted(config.destinations))
    line = f"wakeful: gateway on {url} (destinations: {names})"
    if ready_fd is not None:
        os.write(ready_fd, (url + "\n").encode())
        os.close(ready_fd)
        print(line, file=sys.stderr, flush=True)
    else:
        print(line, flush=True)

    def stop(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if parent is not None:
        threading.Thread(target=_orphan_watch, args=(parent,), daemon=True).start()
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        watch.stop.set()
        audit.close()
        store.close()
    return 0


def _server(app: GatewayApp, config: GatewayConfig) -> Any:
    from waitress.server import create_server

    common: dict[str, Any] = {
        "threads": 8,
        "ident": "wakeful-gateway",
        "max_request_body_size": MAX_BODY + 1,
        "channel_timeout": 60,
        "clear_untrusted_proxy_headers": True,
    }
    socket_path = config.unix_socket
    if socket_path is not None:
        return create_server(app, unix_socket=socket_path, unix_socket_perms="600", **common)
    host, port = config.host_port()
    return create_server(app, host=host, port=port, **common)


def _url(config: GatewayConfig, server: Any) -> str:
    if config.unix_socket is not None:
        return f"unix:{config.unix_socket}"
    host, _ = config.host_port()
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{server.effective_port}"


def _orphan_watch(parent: int) -> None:
    """The portable half of dying with the parent: a reparented gateway stops itself."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGTERM)
