"""`wakeful gateway`: the process that holds the tools' secrets, served by waitress.

It reads its configuration (and so its secrets, and the token its callers must present,
WAKEFUL_GATEWAY_TOKEN: required on TCP) first, registers every secret and the token with the log
redaction, makes itself undumpable on Linux (another process of the same user can then read
neither its memory nor its /proc environment), opens the store for the revocations, and serves
loopback or a Unix socket with waitress (the server `wakeful serve` runs too: a maintained,
pure-Python WSGI server with a thread pool, request-size caps and Unix sockets; a dependency
already). A thread reads the revocations a few times a second; when it cannot, the gateway
refuses everything until it can (the kill switch fails closed).

Started by `wakeful serve` as a child (bot/gateway/child.py), the gateway leaves as soon as its
parent is gone, so a SIGKILLed serve never leaves a gateway behind.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from wakeful.core import logs, tracing
from wakeful.core.gateway.audit import AuditLog, Metrics
from wakeful.core.gateway.config import MAX_BODY, GatewayConfig, GatewayConfigError, load
from wakeful.core.gateway.process import Watch, die_with_parent, not_dumpable, orphan_watch
from wakeful.core.gateway.server import GatewayApp, Revocations
from wakeful.core.store import Store


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
    try:  # its own spans (gateway.forward), when OTEL_* asks for them, joined to its callers'
        tracing.configure(env, "gateway")
    except ValueError as exc:
        raise GatewayConfigError(str(exc)) from exc
    not_dumpable()
    if parent is not None:
        die_with_parent()
    # A gateway (re)started while PostgreSQL refuses or ends connections waits for it as every
    # wakeful process does (WAKEFUL_STARTUP_WAIT), rather than exiting at once.
    from wakeful.bot.process.config import Config
    from wakeful.bot.process.runtime import open_configured_store

    store = open_configured_store(replace(Config.from_env(env), db=db))
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
        logs.say(line, sys.stderr)
    else:
        logs.say(line)

    def stop(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if parent is not None:
        threading.Thread(target=orphan_watch, args=(parent,), daemon=True).start()
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


def serve_in_background(
    config_path: str | Path, env: Mapping[str, str], store: Store
) -> tuple[str, Callable[[], None]]:
    """The gateway inside this process, on threads of its own, reading `store`'s revocations
    (`wakeful demo`: one process plays every part); returns its URL and the function that
    stops it. A deployment runs `wakeful gateway`, whose process alone holds the secret."""
    from wakeful.bot.process.runtime import serve_in_thread

    config = load(config_path, env)
    logs.add_secrets(config.secrets())
    revocations = Revocations()
    watch = Watch(store, revocations)
    watch.read()
    watch.thread.start()
    audit = AuditLog(config.audit_log)
    server = _server(GatewayApp(config, revocations, audit, Metrics()), config)
    stop_http = serve_in_thread(server)

    def stop() -> None:
        watch.stop.set()
        stop_http()
        audit.close()

    return _url(config, server), stop
