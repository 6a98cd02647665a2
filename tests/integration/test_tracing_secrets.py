"""Tracing (issue 39): attributes never leak. A session in-process with tracing on, every span
kept: DMs through the signed Slack front, a webhook delivery, the Claude agent (its key
distinctive) asking for a refund, the click's yes, the approved refund, a reminder set and
fired, a 529 and its retry, and forwards through the credential gateway (its token, the Stripe
key); the PostgreSQL store opened with a DSN holding a password. Every attribute, event, link
and status of every span is searched for each secret and for what the people wrote: none is
there, and, with WAKEFUL_OTEL_CONTENT=on, what they wrote is."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from tests.conftest import PG_DSN, T0, MakeStore, need_pg
from tests.integration.test_tracing import (
    SAID,
    SECRET,
    TOKEN,
    attributes_of,
    collector,
)
from tests.integration.test_tracing import World as FrontWorld
from tests.support import fake_anthropic as api
from tests.support.claude_world import BOSS, INBOX, World, _close_agents, fake
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.gateway import gateway_in_thread, write_config
from tests.support.store_templates import PgSchemas
from tests.support.webhook_front import CI_SECRET, GITHUB_SECRET, STRIPE_SECRET, serve
from wakeful.bot.builtin.claude import ClaudeAgent
from wakeful.bot.slack.kinds import SLACK_KINDS
from wakeful.core import tracing
from wakeful.core.settings import Settings
from wakeful.core.store import Store
from wakeful.devtools.emulator import SlackEmulator
from wakeful.devtools.fake_stripe import FakeStripe
from wakeful.devtools.webhooks import GITHUB_EVENTS

__all__ = ["_close_agents", "fake"]  # the fixtures, used by name
ANTHROPIC_KEY = "sk-ant-api03-tracing-never-this-key"
PG_PASSWORD = "pg-tracing-never-this-password"
ASKED = "please refund order 42, it arrived broken at 9 Elm Street"
REMINDED = "call the courier about parcel 77"
SEARCH = "/v1/payment_intents/search?query=metadata%5B%27order_id%27%5D%3A%27A-7%27"


def with_password(dsn: str) -> str:
    """`dsn` with PG_PASSWORD in it (the local server trusts loopback: it is not checked)."""
    parts = urlsplit(dsn)
    user = parts.username or "postgres"
    netloc = f"{user}:{PG_PASSWORD}@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


@pytest.fixture
def stores(request: pytest.FixtureRequest, make_store: MakeStore) -> Iterator[Callable[[], Store]]:
    """Fresh stores of the test's backend: SQLite files, or PostgreSQL schemas reached with a
    password in the DSN."""
    if request.node.callspec.params["make_store"] == "sqlite":
        yield lambda: make_store(kinds=SLACK_KINDS)
        return
    need_pg()
    schemas = PgSchemas(with_password(PG_DSN))
    made: list[Store] = []

    def make() -> Store:
        made.append(schemas.store(Settings(), kinds=SLACK_KINDS))
        return made[-1]

    yield make
    for store in made:
        store.close()
    schemas.drop_all()


@pytest.fixture
def keyed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ClaudeAgent made holds ANTHROPIC_KEY (the test World gives a plain one)."""
    real = ClaudeAgent.__init__

    def init(self: ClaudeAgent, *args: Any, **kwargs: Any) -> None:
        real(self, *args, **{**kwargs, "api_key": ANTHROPIC_KEY})

    monkeypatch.setattr(ClaudeAgent, "__init__", init)


def session(stores: Callable[[], Store], fake: FakeAnthropic, folder: Path) -> dict[str, str]:
    """The whole session; the secrets it used (by name)."""
    with SlackEmulator(bot_token=TOKEN) as emu:  # DMs through the signed front, posted
        front = FrontWorld(stores(), emu)
        assert front.dm("EvS1").startswith("200")
        front.run()
        front.send()
    served = serve(stores())  # a signed webhook delivery, through the HTTP front
    try:
        assert served.sender.github_example(GITHUB_EVENTS[0]).status == 200
    finally:
        served.close()
    claude = World(stores(), fake)
    claude.say(ASKED)
    fake.script(api.tool_use("refund_order", {"order_id": "42", "reason": "broken"}, "t1"))
    claude.tick()
    [approval] = claude.store.approvals(INBOX)
    with tracing.span("slack.request"):  # the click
        assert claude.store.answer(approval.id, "yes", BOSS, T0 + 10).outcome == "yes"
    fake.script(api.error(529))
    claude.tick(T0 + 10)
    fake.script(api.text("Refunded order 42."))
    claude.tick(T0 + 700)
    claude.say(f"remind me in a minute to {REMINDED}")
    fake.script(api.tool_use("remind_me", {"text": REMINDED, "in_seconds": 60}, "t2"))
    fake.script(api.text("I'll remind you."))
    claude.tick(T0 + 710)
    fake.script(api.text(f"Reminder: {REMINDED}"))
    claude.tick(T0 + 770)
    with FakeStripe() as stripe:  # forwards through the credential gateway
        stripe.add_payment("A-7")
        config = write_config(folder, stripe.url)
        env = {"STRIPE_SECRET_KEY": stripe.api_key}
        with gateway_in_thread(config, env, claude.store) as running:
            gw = running.client()
            with tracing.span("caller"):
                assert gw.request("GET", "stripe", SEARCH).status == 200
                assert gw.request("GET", "stripe", "/v1/customers").status == 403
            token = running.token or ""
        return {"stripe key": stripe.api_key, "gateway token": token}


def everything(found: tuple[ReadableSpan, ...]) -> list[str]:
    """What a collector receives: names, attributes, events, links and statuses, as text."""
    said = attributes_of(found)
    for s in found:
        said.append(s.name)
        said += [e.name for e in s.events]
        said += [f"{link.context.trace_id:x}" for link in s.links]
    return said


@pytest.mark.usefixtures("keyed")
@pytest.mark.parametrize("content", [False, True], ids=["content off", "content on"])
def test_no_attribute_of_a_whole_session_holds_a_secret_or_unasked_text(
    stores: Callable[[], Store], fake: FakeAnthropic, tmp_path: Path, content: bool
) -> None:
    for exporter in collector(content):
        used = session(stores, fake, tmp_path)
        found = exporter.get_finished_spans()
        said = everything(found)
        names = {s.name for s in found}
        # The session took every path.
        assert {
            "slack.request",
            "webhook.request",
            "wakeful.run",
            "wakeful.post",
            "chat claude-test",
            "execute_tool refund_order",
            "execute_tool remind_me",
            "wakeful.timer",
            "gateway.forward",
        } <= names
        secrets = {
            **used,
            "Slack bot token": TOKEN,
            "signing secret": SECRET,
            "Anthropic key": ANTHROPIC_KEY,
            "PostgreSQL password": PG_PASSWORD,
            "GitHub webhook secret": GITHUB_SECRET,
            "Stripe webhook secret": STRIPE_SECRET,
            "generic webhook secret": CI_SECRET,
        }
        assert all(secrets.values())
        leaked = {name: [a for a in said if value in a] for name, value in secrets.items()}
        assert {name: found for name, found in leaked.items() if found} == {}
        written = {"DM": SAID, "refund ask": "9 Elm Street", "reminder": REMINDED}
        shown = {name: any(text in a for a in said) for name, text in written.items()}
        assert shown == dict.fromkeys(written, content)
