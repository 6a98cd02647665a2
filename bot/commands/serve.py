"""`wakeful serve` once its settings are read: the store, the loops and the Slack front, over
HTTP or Socket Mode; and the metrics port the loop commands open the same way.

Imported only when a command runs (bot/commands/cli.py), so `wakeful --help` loads no Bolt.
"""

from __future__ import annotations

import contextlib
import secrets
import sys
from typing import Any

from slack_sdk import WebClient

from wakeful.bot.front.listeners import Listeners
from wakeful.bot.front.wsgi import EVENTS_PATH, INSTALL_PATH, SlackFront
from wakeful.bot.process import runtime as process
from wakeful.bot.process.config import Config, ConfigError
from wakeful.bot.process.runtime import Runtime
from wakeful.bot.slack.distribution import Distribution
from wakeful.bot.slack.sender import make_client
from wakeful.core import logs
from wakeful.core.metrics import MetricsServer
from wakeful.core.store import Store


def run(config: Config, roles: tuple[str, ...], manifest: str | None) -> None:
    """Serve until stopped. The front's port is bound before any loop starts, so a port in
    use stops this process with nothing claimed; what started is stopped the other way round
    (metrics port, loops, store)."""
    store = process.open_configured_store(config)
    client = make_client(config.bot_token, config.api_url)
    if roles:
        # The loops share the interpreter with the HTTP threads: hand the GIL over more often
        # so a burst of agent runs does not hold an acknowledgement back (default is 5 ms).
        sys.setswitchinterval(0.0005)
    dist = Distribution.build(config, store) if config.distribution else None
    runtime = Runtime(config, store, roles, distribution=dist)
    front = build_front(config, runtime, client, manifest)
    http = None if config.socket_mode else process.http_server(front, config.host, config.port)
    runtime.start()
    with contextlib.ExitStack() as started:
        started.callback(store.close)
        started.callback(runtime.shutdown)
        if http is None:
            _over_socket_mode(config, front, client, runtime, started)
        else:
            _over_http(config, http, runtime, started)


def build_front(
    config: Config, runtime: Runtime, client: WebClient, manifest: str | None
) -> SlackFront:
    """The front over `runtime`'s store, wake-ups and clock. With one workspace who the bot
    is comes from auth.test; in distribution mode from each workspace's installation, with
    Bolt's OAuth pages (the scopes of `manifest`) and the uninstall events."""
    dist = runtime.distribution
    me = process.identify(client, config.api_url) if dist is None else {}
    listeners = Listeners(
        runtime.store,
        # Socket Mode needs no signing secret (nothing is served over HTTP); Bolt wants one.
        config.signing_secret or secrets.token_hex(16),
        bot_user_id=me.get("user_id", ""),
        bot_id=me.get("bot_id", ""),
        wake_worker=runtime.wake_worker,
        wake_dispatcher=runtime.wake_dispatcher,
        clock=runtime.clock,
        approvers=config.approvers,
        authorizer=None if dist is None else dist.authorize(),
        installations=None if dist is None else dist.installations,
        oauth_settings=None if dist is None else dist.oauth_settings(manifest),
        client=None if dist is None else dist.oauth_client(),
    )
    return SlackFront(
        listeners,
        webhook_sources=config.webhooks,
        workspace_label=None if dist is None else dist.workspace_label,
    )


def _over_http(
    config: Config, server: Any, runtime: Runtime, started: contextlib.ExitStack
) -> None:
    """Slack's requests (and webhooks, /healthz, /metrics) on the bound port until stopped."""
    port = server.effective_port

    def stop() -> None:
        runtime.stop.set()
        raise KeyboardInterrupt

    # The handlers first: a SIGTERM the moment "listening on" is out (a supervisor's, a
    # test's) is a clean stop, not the default action's exit code.
    process.install_signal_handlers(stop)
    try:
        logs.say(f"wakeful: listening on http://{config.host}:{port}{EVENTS_PATH}")
        if config.distribution:
            logs.say(
                f"wakeful: distribution mode: install at http://{config.host}:{port}{INSTALL_PATH}"
            )
        _print_webhooks(config, port)
        _open_metrics(config, runtime.store, started)
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()


def _over_socket_mode(
    config: Config,
    front: SlackFront,
    client: WebClient,
    runtime: Runtime,
    started: contextlib.ExitStack,
) -> None:
    """Slack's requests over Socket Mode, through the front's listeners, until stopped;
    webhooks still arrive over HTTP (and /healthz with them) when any is configured."""
    from slack_sdk.errors import SlackApiError
    from slack_sdk.socket_mode.builtin import SocketModeClient

    socket = SocketModeClient(config.app_token, web_client=client, concurrency=16)
    socket.socket_mode_request_listeners.append(front.listeners.on_socket_request)
    process.install_signal_handlers(runtime.stop.set)
    try:
        socket.connect()
    except SlackApiError as exc:
        raise ConfigError(
            f"SLACK_APP_TOKEN could not open a Socket Mode connection ({exc.response.get('error')})"
        ) from exc
    except OSError as exc:
        raise ConfigError(f"cannot reach Slack for Socket Mode: {exc}") from exc
    logs.say("wakeful: connected in Socket Mode")
    stop_http = None
    if config.webhooks:
        server = process.http_server(front, config.host, config.port)
        stop_http = process.serve_in_thread(server)
        _print_webhooks(config, server.effective_port)
    _open_metrics(config, runtime.store, started)
    runtime.stop.wait()
    socket.close()
    if stop_http is not None:
        stop_http()


def _open_metrics(config: Config, store: Store, started: contextlib.ExitStack) -> None:
    exporter = metrics_port(config, store)
    if exporter is not None:
        started.callback(exporter.close)


def metrics_port(config: Config, store: Store) -> MetricsServer | None:
    """GET /metrics on WAKEFUL_METRICS_PORT, when set (the loops serve no other HTTP)."""
    if config.metrics_port is None:
        return None
    try:
        server = MetricsServer(store, config.host, config.metrics_port)
    except OSError as exc:
        raise ConfigError(
            f"WAKEFUL_METRICS_PORT {config.metrics_port} cannot be opened: {exc}"
        ) from exc
    logs.say(f"wakeful: metrics on http://{config.host}:{server.port}/metrics")
    return server


def _print_webhooks(config: Config, port: int) -> None:
    """One line naming the webhook endpoints served and where each one reports."""
    if config.webhooks:
        served = ", ".join(f"/webhooks/{s.name} -> {s.channel}" for s in config.webhooks)
        logs.say(f"wakeful: webhooks on http://{config.host}:{port}: {served}")
