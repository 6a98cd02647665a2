"""A webhook front on a real port for tests: SlackFront with webhook sources under the
product's waitress server, a signed sender, and the clock both share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tests.conftest import T0
from wakeful.bot.front.listeners import Listeners
from wakeful.bot.front.wsgi import SlackFront
from wakeful.bot.process.config import WebhookSource
from wakeful.bot.process.runtime import http_server, serve_in_thread
from wakeful.core.clock import ManualClock
from wakeful.core.store import Store
from wakeful.devtools.audit import count_events
from wakeful.devtools.webhooks import WebhookSender

GITHUB_SECRET = "gh-integration-secret"
STRIPE_SECRET = "whsec_integration_secret"
CI_SECRET = "ci-integration-secret"
OPS, PAY = "C0OPS", "C0PAY"
SOURCES = (
    WebhookSource("github", "github", GITHUB_SECRET, OPS),
    WebhookSource("stripe", "stripe", STRIPE_SECRET, PAY),
    WebhookSource("ci", "generic", CI_SECRET, OPS),
)


class CountingKicker:
    def __init__(self) -> None:
        self.kicks = 0

    def kick(self) -> None:
        self.kicks += 1


@dataclass
class Served:
    """A front on a real port, its store, the sender's and the front's shared clock."""

    store: Store
    sender: WebhookSender
    clock: ManualClock
    worker: CountingKicker
    port: int
    stop: Callable[[], None]

    def snapshot(self) -> tuple[int, int]:
        """(events, outbox rows): what a refused delivery must leave unchanged."""
        return count_events(self.store), len(self.store.outbox())

    def close(self) -> None:
        self.stop()


def start_server(app: SlackFront) -> tuple[int, Callable[[], None]]:
    """The product's waitress server for `app` on a free loopback port, in a thread; returns
    the port and the function that stops it."""
    server = http_server(app, "127.0.0.1", 0)
    return int(server.effective_port), serve_in_thread(server)


def serve(
    store: Store,
    sources: tuple[WebhookSource, ...] = SOURCES,
    clock: ManualClock | None = None,
) -> Served:
    clock = clock or ManualClock(T0)
    worker = CountingKicker()
    listeners = Listeners(store, "slack-secret", wake_worker=worker, clock=clock)
    front = SlackFront(listeners, webhook_sources=sources)
    port, stop = start_server(front)
    sender = WebhookSender(
        f"http://127.0.0.1:{port}",
        github_secret=GITHUB_SECRET,
        stripe_secret=STRIPE_SECRET,
        secrets={"ci": CI_SECRET},
        clock=clock,
    )

    return Served(store, sender, clock, worker, port, stop)
