"""Assembling a process: store, agent, loops, HTTP server or Socket Mode, and a clean stop."""

from __future__ import annotations

import errno
import gc
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from wakeful.bot.process.config import Config, ConfigError
from wakeful.bot.slack.distribution import Distribution
from wakeful.bot.slack.kinds import SLACK_KINDS
from wakeful.bot.slack.sender import SlackSender, make_client
from wakeful.bot.slack.streams import SlackStreams
from wakeful.bot.slack.web_client import KeepAliveWebClient
from wakeful.core import tracing
from wakeful.core.clock import LoopClock, ServerClock, wall_clock
from wakeful.core.dispatcher import Dispatcher
from wakeful.core.errors import StoreUnavailable
from wakeful.core.heartbeat import Heartbeat
from wakeful.core.loops import Bell, Wakeup
from wakeful.core.scheduler import Scheduler
from wakeful.core.store import Store, open_store
from wakeful.core.worker import Worker

log = logging.getLogger("wakeful")


def identify(client: WebClient, api_url: str) -> dict[str, str]:
    """auth.test once at start-up: who the bot is, so it never answers itself."""
    try:
        response = client.auth_test()
    except SlackApiError as exc:
        raise ConfigError(
            f"SLACK_BOT_TOKEN was rejected by Slack ({exc.response.get('error')})"
        ) from exc
    except OSError as exc:
        raise ConfigError(f"cannot reach the Slack API at {api_url}: {exc}") from exc
    return {
        "user_id": str(response.get("user_id") or ""),
        "bot_id": str(response.get("bot_id") or ""),
        "team_id": str(response.get("team_id") or ""),
    }


@dataclass
class Runtime:
    """The loops of one process, each on its own thread, stopped together."""

    config: Config
    store: Store
    roles: tuple[str, ...]
    poll: float = 1.0
    bell: Bell = field(default_factory=Bell)
    wake_worker: Wakeup = field(default_factory=Wakeup)
    """Kicked when events are stored."""
    wake_dispatcher: Wakeup = field(default_factory=Wakeup)
    """Kicked when outbox rows are queued."""
    wake_scheduler: Wakeup = field(default_factory=Wakeup)
    """Kicked when timers or approvals are added."""
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    client: WebClient | None = None
    clock: LoopClock = field(default=wall_clock)
    """Where every loop (and the front) of this process reads the time: on PostgreSQL the
    database server's clock (see core/clock.py), so hosts whose clocks disagree still agree
    on leases, backoffs and due times; on SQLite the host's, the only one there is."""
    distribution: Distribution | None = None
    """Distribution mode (bot/slack/distribution.py): every call with its workspace's token."""
    heartbeat: Heartbeat | None = field(default=None, init=False)
    """Records this process alive and ends dead processes' leases (set by `start`)."""

    def __post_init__(self) -> None:
        if self.clock is wall_clock and self.store.db.dialect == "postgres":
            self.clock = ServerClock(self.store)

    def start(self) -> None:
        """Set tracing up when OTEL_* asks for it, build the loops, record this process alive
        (ending the leases of dead ones, before any loop takes work or the caller answers
        /healthz), then start every loop."""
        role = ",".join(self.roles) or "front"
        try:
            if tracing.configure(os.environ, role):
                log.info("tracing on: spans exported as OTEL_* configures them")
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        loops = self.build_loops()
        self.heartbeat = Heartbeat(
            store=self.store,
            clock=self.clock,
            poll=self.store.settings.heartbeat,
            wakeup=self.bell.subscribe(),
            role=role,
            wake_worker=self.wake_worker,
        )
        self.heartbeat.start(self.clock())
        # What start-up built (modules, the agent, Slack's and OpenTelemetry's SDKs) lives as
        # long as the process: frozen, the collector's full passes stop walking it again and
        # again (a third of a traced message's extra CPU at 200 msg/s was collection).
        gc.freeze()
        if loops:
            self.store.listen(self.wake_worker.kick)  # PostgreSQL: a store on any host wakes us
        for loop in [*loops, self.heartbeat]:
            thread = threading.Thread(
                target=loop.run,
                args=(self.stop,),
                name=f"wakeful-{type(loop).__name__.lower()}",
                daemon=True,
            )
            thread.start()
            self.threads.append(thread)
        log.info("started %s", ", ".join(type(lp).__name__.lower() for lp in loops) or "no loops")

    def build_loops(self) -> list[Any]:
        """This process's loops, wired so each kick wakes the one loop it is news for."""
        if self.config.bot_token:
            self.client = make_client(self.config.bot_token, self.config.api_url)
        elif self.distribution is not None:
            self.client = make_client("", self.config.api_url)  # the token goes with each call
        loops: list[Any] = []
        if "worker" in self.roles:
            from wakeful.bot.process.loading import build_runner

            dist = self.distribution
            tokens = None if dist is None else dist.workspaces.token
            runner = build_runner(
                self.config,
                self.store,
                self.client,
                tokens=tokens,
                wake_dispatcher=self.wake_dispatcher.kick,
                streams=None if self.client is None else SlackStreams(self.client, tokens),
            )
            loops.append(
                Worker(
                    store=self.store,
                    clock=self.clock,
                    runner=runner,
                    poll=self.poll,
                    wakeup=self.bell.subscribe(self.wake_worker),
                    wake_dispatcher=self.wake_dispatcher,
                    wake_scheduler=self.wake_scheduler,
                    batch_window=self.config.batch_window,
                )
            )
        if "scheduler" in self.roles:
            loops.append(
                Scheduler(
                    store=self.store,
                    clock=self.clock,
                    poll=self.poll,
                    wakeup=self.bell.subscribe(self.wake_scheduler),
                    wake_worker=self.wake_worker,
                )
            )
        if "dispatcher" in self.roles:
            if self.client is None:
                raise ConfigError("SLACK_BOT_TOKEN is not set (the dispatcher posts to Slack)")
            ws = None if self.distribution is None else self.distribution.workspaces
            sender = (
                SlackSender(self.client)
                if ws is None
                else SlackSender(self.client, tokens=ws.token, forget=ws.forget)
            )
            loops.append(
                Dispatcher(
                    store=self.store,
                    clock=self.clock,
                    sender=sender,
                    poll=self.poll,
                    wakeup=self.bell.subscribe(self.wake_dispatcher),
                )
            )
        return loops

    def shutdown(self, timeout: float = 10.0) -> None:
        self.stop.set()
        self.bell.kick()
        for thread in self.threads:
            thread.join(timeout)
        if self.heartbeat is not None:
            self.heartbeat.stop(self.clock())
        if isinstance(self.client, KeepAliveWebClient):
            self.client.close()


def open_configured_store(config: Config) -> Store:
    """Open (and migrate) the configured store, taking and planning Slack's outbox kinds.

    On PostgreSQL a server that refuses or ends connections while this process starts (hosts
    booting before the database, a failover, a restart) is waited for, up to
    WAKEFUL_STARTUP_WAIT seconds with a growing pause, as the running loops wait for it;
    after that the error stands. A SQLite store is a local file: what fails to open it does
    not pass by itself."""
    if "://" not in config.db:
        if config.sqlite_max_pages:
            return open_store(
                config.db, config.settings, kinds=SLACK_KINDS, max_pages=config.sqlite_max_pages
            )
        return open_store(config.db, config.settings, kinds=SLACK_KINDS)
    deadline = time.monotonic() + config.startup_wait
    pause = 0.5
    while True:
        left = deadline - time.monotonic()
        try:
            # Each try connects for at most half what is left (10 s at most), so a short
            # patience still gets a second try.
            return open_store(
                config.db,
                config.settings,
                kinds=SLACK_KINDS,
                connect_timeout=min(10.0, max(left / 2, 1)),
                pool_size=config.pg_pool,
            )
        except StoreUnavailable as exc:  # a StoreRefused (no such role, ...) is not waited for
            left = deadline - time.monotonic()
            if left <= 0:
                if not config.startup_wait:
                    raise
                raise StoreUnavailable(
                    f"{exc} (still failing after WAKEFUL_STARTUP_WAIT={config.startup_wait:g} s)"
                ) from exc
            log.warning("store unavailable at start-up, retrying in %.1f s: %s", pause, exc)
            time.sleep(min(pause, left))
            pause = min(pause * 2, 5.0)


def install_signal_handlers(on_stop: Callable[[], None]) -> None:
    def handler(signum: int, _frame: object) -> None:
        log.info("signal %s: stopping", signum)
        on_stop()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def http_server(app: Any, host: str, port: int) -> Any:
    """waitress: a maintained, pure-Python production WSGI server with a thread pool, so one
    slow commit never stalls other connections, and it runs in-process beside the loops."""
    from waitress.server import create_server

    from wakeful.bot.front.wsgi import BODY_CAP

    try:
        return create_server(
            app,
            host=host,
            port=port,
            threads=16,
            backlog=1024,
            connection_limit=1000,
            max_request_body_size=BODY_CAP + 1,  # waitress refuses a body equal to its limit
            channel_timeout=30,  # a client stalled mid-body gives its thread back after 30 s
            ident="wakeful",
            clear_untrusted_proxy_headers=True,
        )
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"port {port} is already in use: another wakeful serve? set WAKEFUL_PORT or stop it"
            ) from exc
        if exc.errno == errno.EADDRNOTAVAIL or isinstance(exc, socket.gaierror):
            raise ConfigError(
                f"WAKEFUL_HOST {host} is not an address of this host ({exc.strerror}): use "
                "0.0.0.0 for every interface or 127.0.0.1 for this host only"
            ) from exc
        if exc.errno == errno.EACCES:
            raise ConfigError(
                f"port {port} needs privileges this process lacks: set WAKEFUL_PORT to 1024 "
                "or above"
            ) from exc
        raise


def serve_in_thread(server: Any) -> Callable[[], None]:
    """Run a waitress server on a daemon thread (the HTTP front beside Socket Mode); returns
    the function that stops it. The stop closes the server on its own loop's thread, woken
    through waitress's trigger: closed from outside, the loop would sit out its select
    (`asyncore_loop_timeout`, 1 s) before it saw. Closing the sockets under a running loop
    (the fallback, if the loop did not end) can fail its last select with EBADF: after a
    stop that is the stop, not an error."""
    stopping = threading.Event()

    def run() -> None:
        try:
            server.run()
        except OSError:
            if not stopping.is_set():
                raise

    thread = threading.Thread(target=run, name="wakeful-http", daemon=True)
    thread.start()

    def stop() -> None:
        if stopping.is_set():
            return
        stopping.set()
        try:
            server.trigger.pull_trigger(server.close)
        except OSError:  # the trigger's pipe is gone already: close from here, as before
            server.close()
        thread.join(5)
        server.close()  # idempotent; closes what a loop that ended by itself left open

    return stop
