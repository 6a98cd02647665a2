"""The front does Bolt's work once (issue 26): one signature check and one parse per request,
Bolt given the parsed body; Slack's app_rate_limited notice said and counted with a bounded
workspace label; a request of an org-wide install records its workspace under it."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from cryptography.fernet import Fernet

from tests.conftest import T0
from wakeful.bot.front.listeners import Listeners
from wakeful.bot.front.wsgi import SlackFront
from wakeful.bot.process.config import Config
from wakeful.bot.slack.distribution import ALL, Distribution
from wakeful.core import metrics
from wakeful.core.store import Store
from wakeful.core.store.installations import InstallationRow
from wakeful.devtools.audit import count_events
from wakeful.devtools.emulator import EventSender

SECRET = "one-pass-secret"


def call(front: SlackFront, body: bytes, content_type: str = "application/json") -> str:
    return answer(front, body, content_type)[0]


def answer(
    front: SlackFront, body: bytes, content_type: str = "application/json"
) -> tuple[str, str]:
    """A signed request through the front's WSGI callable: (status line, body)."""
    stamp = str(int(time.time()))
    signature = EventSender("http://unused", SECRET).sign(body, int(stamp))
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/slack/events",
        "QUERY_STRING": "",
        "CONTENT_TYPE": content_type,
        "CONTENT_LENGTH": str(len(body)),
        "HTTP_X_SLACK_REQUEST_TIMESTAMP": stamp,
        "HTTP_X_SLACK_SIGNATURE": signature,
        "wsgi.input": io.BytesIO(body),
    }
    seen: list[str] = []
    text = b"".join(front(environ, lambda status, headers: seen.append(status)))
    return seen[0], text.decode()


def message(event_id: str, team: str = "T1") -> bytes:
    return json.dumps(
        {
            "type": "event_callback",
            "team_id": team,
            "api_app_id": "A1",
            "event_id": event_id,
            "event_time": T0,
            "event": {
                "type": "message",
                "channel_type": "im",
                "channel": "D1",
                "user": "U1",
                "text": "hello",
                "ts": "1.000001",
            },
        }
    ).encode()


def counting(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[int]:
    calls: list[int] = []
    original: Callable[..., Any] = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def test_a_request_is_verified_once_and_parsed_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    import slack_bolt.request.request as bolt_request
    from slack_sdk.signature import SignatureVerifier

    front = SlackFront(Listeners(store, SECRET, "UBOT", "BBOT"))
    checks = counting(monkeypatch, SignatureVerifier, "generate_signature")
    bolt_parses = counting(monkeypatch, bolt_request, "parse_body")
    assert call(front, message("Ev1")).startswith("200")
    assert [e.source_id for e in store.events("T1:U1")] == ["Ev1"]
    assert len(checks) == 1  # the front's; Bolt's RequestVerification is off
    assert bolt_parses == []  # Bolt reads the front's parsed body
    form = b"command=%2Fwakeful&text=status&team_id=T1&user_id=U1&channel_id=D1&response_url=x"
    assert call(front, form, "application/x-www-form-urlencoded").startswith("200")
    assert len(checks) == 2 and bolt_parses == []
    [command] = [e for e in store.events("T1:U1") if e.source_id.startswith("command:")]
    assert command.payload["text"] == "status"


def test_a_bad_signature_is_still_refused(store: Store) -> None:
    front = SlackFront(Listeners(store, "another-secret", "UBOT", "BBOT"))
    assert call(front, message("Ev2")).startswith("401")
    assert store.events("T1:U1") == []


def rate_limited(team: str) -> bytes:
    """app_rate_limited as Slack's Events API documents it (a body of its own)."""
    return json.dumps(
        {
            "token": "Jhj5dZrVaK7ZwHHjRyZWjbDl",
            "type": "app_rate_limited",
            "team_id": team,
            "minute_rate_limited": 1518467820,
            "api_app_id": "A1",
        }
    ).encode()


def counted(workspace: str) -> float:
    value = metrics.REGISTRY.get_sample_value(
        "wakeful_slack_events_rate_limited_total", {"workspace": workspace}
    )
    return value or 0.0


def test_app_rate_limited_is_counted_by_a_bounded_workspace_label(store: Store) -> None:
    env = {
        "SLACK_CLIENT_ID": "1.2",
        "SLACK_CLIENT_SECRET": "s",
        "WAKEFUL_TOKEN_KEY": Fernet.generate_key().decode(),
        "WAKEFUL_WORKSPACE_LABELS": "1",
    }
    dist = Distribution.build(Config.from_env(env), store)
    front = SlackFront(Listeners(store, SECRET), workspace_label=dist.workspace_label)
    row = InstallationRow("TA", None, "TA", False, "{}", "sealed", None)
    store.save_installation(row, T0)
    before = counted("TA")
    assert call(front, rate_limited("TA")).startswith("200")
    assert counted("TA") == before + 1
    assert count_events(store) == 0  # said and counted, nothing stored
    store.save_installation(InstallationRow("TB", None, "TB", False, "{}", "sealed", None), T0)
    dist._count = None  # the count is read again (once a minute in a running process)
    all_before = counted(ALL)
    call(front, rate_limited("TB"))
    assert counted(ALL) == all_before + 1  # past WAKEFUL_WORKSPACE_LABELS: aggregated
    assert counted("TB") == 0


def org_message(event_id: str, team: str, shared: bool = False) -> bytes:
    """A DM event of an org-wide install in org E1, as Slack sends it: the installation in
    `authorizations` with `"team_id": null`, the workspace only in the envelope."""
    body = json.loads(message(event_id, team))
    body["enterprise_id"] = "E1"
    body["context_team_id"], body["context_enterprise_id"] = team, "E1"
    body["is_ext_shared_channel"] = shared
    body["authorizations"] = [
        {
            "enterprise_id": "E1",
            "team_id": None,
            "user_id": "UBOT",
            "is_bot": True,
            "is_enterprise_install": True,
        }
    ]
    return json.dumps(body).encode()


def test_a_request_of_an_org_wide_install_records_its_workspace_under_it(store: Store) -> None:
    """The org's rows go out with the org's token only if each workspace is recorded under
    the install when its people write; a Slack Connect channel's event, which may come from
    another org's workspace, records nothing."""
    from slack_sdk.oauth.installation_store import Installation

    env = {
        "SLACK_CLIENT_ID": "1.2",
        "SLACK_CLIENT_SECRET": "s",
        "WAKEFUL_TOKEN_KEY": Fernet.generate_key().decode(),
    }
    dist = Distribution.build(Config.from_env(env), store, clock=lambda: T0)
    dist.installations.save(
        Installation(
            app_id="A1",
            enterprise_id="E1",
            team_id=None,
            is_enterprise_install=True,
            bot_token="xoxb-org",
            bot_id="BBOT",
            bot_user_id="UBOT",
            user_id="WADMIN",
        )
    )
    listeners = Listeners(
        store, SECRET, authorizer=dist.authorize(), installations=dist.installations
    )
    front = SlackFront(listeners)
    assert call(front, org_message("EvS", "TX", shared=True)).startswith("200")
    assert store.installation_for_team("TX") is None
    assert call(front, org_message("Ev1", "TE1")).startswith("200")
    assert [e.source_id for e in store.events("TE1:U1")] == ["Ev1"]
    found = store.installation_for_team("TE1")
    assert found is not None and found.workspace == "E1"
    assert dist.workspaces.token("TE1") == "xoxb-org"  # what the dispatcher sends it with


@pytest.mark.parametrize("failure", ["unavailable", "other"])
def test_every_store_failure_on_a_slack_request_is_the_webhooks_503(
    store: Store, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    # One answer to a store failure at every HTTP entry: a Slack request meeting a store error
    # other than "unavailable" was a 500 while a webhook delivery meeting it was a 503.
    from wakeful.bot.front.store_failures import RETRY
    from wakeful.core.errors import StoreError, StoreUnavailable

    error = StoreUnavailable("locked") if failure == "unavailable" else StoreError("malformed")

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise error

    monkeypatch.setattr(store, "ingest", failing)
    front = SlackFront(Listeners(store, SECRET, "UBOT", "BBOT"))
    assert answer(front, message("Ev9")) == ("503 Service Unavailable", RETRY[1])
    assert RETRY == (503, "store unavailable; please retry")


def test_distribution_mode_authorizes_from_a_cache_of_the_store_never_with_auth_test(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each workspace's installation is read once per cache period, whatever the rate of its
    events, and no event costs an auth.test; a process whose WAKEFUL_TOKEN_KEY cannot open the
    tokens still stores the events (who the bot is, is not secret)."""
    from slack_sdk import WebClient
    from slack_sdk.oauth.installation_store import Installation

    def build(key: str) -> tuple[SlackFront, Distribution]:
        env = {"SLACK_CLIENT_ID": "1.2", "SLACK_CLIENT_SECRET": "s", "WAKEFUL_TOKEN_KEY": key}
        dist = Distribution.build(Config.from_env(env), store, clock=lambda: T0)
        listeners = Listeners(
            store, SECRET, authorizer=dist.authorize(), installations=dist.installations
        )
        return SlackFront(listeners), dist

    front, dist = build(Fernet.generate_key().decode())
    dist.installations.save(
        Installation(
            app_id="A1",
            team_id="T1",
            bot_token="xoxb-t1",
            bot_id="BBOT",
            bot_user_id="UBOT",
            user_id="U1",
        )
    )
    auth_tests = counting(monkeypatch, WebClient, "auth_test")
    reads = counting(monkeypatch, Store, "installation_for_team")
    for i in range(20):
        assert call(front, message(f"Ev{i}")).startswith("200")
    assert count_events(store) == 20
    assert len(reads) == 1  # then the cache answers (Workspaces.ttl)
    assert auth_tests == []
    other, _ = build(Fernet.generate_key().decode())  # restarted with another key
    assert call(other, message("EvK")).startswith("200")
    assert count_events(store) == 21
    assert auth_tests == []
