"""The gateway's configuration refuses what would widen it, and its rules mean what they say."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from wakeful.core.gateway.config import Destination, GatewayConfigError, Rule, load
from wakeful.core.gateway.server import Revocations, _plain

BASE = """
listen = "{listen}"
[destinations.{name}]
upstream = "{upstream}"
allow = ["POST /v1/refunds"]
{secret}
"""


def config(tmp_path: Path, **values: str) -> Path:
    fields = {
        "listen": "127.0.0.1:0",
        "name": "stripe",
        "upstream": "https://api.stripe.com",
        "secret": 'secret_env = "STRIPE_SECRET_KEY"',
        **values,
    }
    path = tmp_path / "gateway.toml"
    path.write_text(BASE.format(**fields))
    return path


ENV = {"STRIPE_SECRET_KEY": "sk_test_123456", "WAKEFUL_GATEWAY_TOKEN": "t" * 32}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"listen": "0.0.0.0:7878"}, "listens on loopback (127.0.0.1, ::1) or a Unix socket only"),
        ({"listen": "unix:relative.sock"}, "a Unix socket needs an absolute path"),
        ({"upstream": "http://api.stripe.com"}, "a credential goes over https only"),
        ({"upstream": "https://user:pw@api.stripe.com"}, "must be a plain base URL"),
        ({"name": "metrics"}, "not a destination name"),
        ({"secret": 'secret_env = "NOT_SET_HERE"'}, "NOT_SET_HERE is not set in the gateway's"),
        ({"secret": ""}, "needs one of secret_env or secret_file"),
    ],
)
def test_a_config_that_would_widen_the_gateway_is_refused(
    tmp_path: Path, values: dict[str, str], message: str
) -> None:
    with pytest.raises(GatewayConfigError, match=re.escape(message)):
        load(config(tmp_path, **values), ENV)


def test_a_secret_file_must_be_readable_by_the_gateway_alone(tmp_path: Path) -> None:
    secret = tmp_path / "stripe.key"
    secret.write_text("sk_test_from_file\n")
    os.chmod(secret, 0o644)
    path = config(tmp_path, secret=f'secret_file = "{secret}"')
    token = {"WAKEFUL_GATEWAY_TOKEN": "t" * 32}
    with pytest.raises(GatewayConfigError, match=r"can be read by others \(mode 644\): chmod 600"):
        load(path, token)
    os.chmod(secret, 0o600)
    loaded = load(path, token)
    assert loaded.destinations["stripe"].value == "Bearer sk_test_from_file"
    assert "sk_test_from_file" not in repr(loaded.destinations["stripe"])


def test_rules_allow_their_prefix_and_what_is_under_it_only() -> None:
    rule = Rule("POST", "/v1/refunds")
    assert rule.allows("POST", "/v1/refunds") and rule.allows("POST", "/v1/refunds/re_1")
    assert not rule.allows("POST", "/v1/refunds_all") and not rule.allows("GET", "/v1/refunds")
    under = Rule("GET", "/v1/refunds/")
    assert under.allows("GET", "/v1/refunds/re_1") and not under.allows("GET", "/v1/refunds")


@pytest.mark.parametrize(
    ("path", "plain"),
    [
        ("/stripe/v1/refunds", True),
        ("/stripe/v1/refunds/", True),
        ("/stripe/v1/../x", False),
        ("/stripe/./v1", False),
        ("/stripe//v1", False),
        ("/stripe/v1%2fx", False),
        ("/stripe/v1%2E%2E", False),
        ("/stripe/v1\\x", False),
        ("/stripe/v1\x00", False),
        ("//evil.example/x", False),
    ],
)
def test_only_plain_paths_pass(path: str, plain: bool) -> None:
    assert _plain(path) is plain


def test_revocations_older_than_a_second_are_not_trusted() -> None:
    now = [100.0]
    revocations = Revocations(clock=lambda: now[0])
    assert revocations.state() == (False, frozenset()), "never read: refuse"
    revocations.update(["stripe"])
    assert revocations.state() == (True, frozenset({"stripe"}))
    now[0] += 1.01
    assert revocations.state()[0] is False, "a kill switch that cannot be read fails closed"


def test_a_read_of_the_revocations_is_trusted_for_a_second_from_when_it_began() -> None:
    """A read that began before a revocation's commit may miss it: it is trusted for one
    second from its start, however long its answer took, which is what `revoke` waits."""
    now = [100.0]
    revocations = Revocations(clock=lambda: now[0])
    began = revocations.started()
    now[0] += 0.9  # a slow store
    revocations.update([], began)
    assert revocations.state() == (True, frozenset())
    now[0] += 0.11
    assert revocations.state()[0] is False, "1.01 s after the read began: refuse everything"


@pytest.mark.parametrize(
    ("values", "env", "message"),
    [
        ({}, {}, "WAKEFUL_GATEWAY_TOKEN is not set: a gateway on TCP (127.0.0.1:0)"),
        ({}, {"WAKEFUL_GATEWAY_TOKEN": "short"}, "WAKEFUL_GATEWAY_TOKEN must be at least 32"),
        ({}, {"WAKEFUL_GATEWAY_TOKEN": "a b" * 20}, "visible ASCII characters, no spaces"),
    ],
)
def test_a_gateway_on_tcp_needs_a_token_that_resists_guessing(
    tmp_path: Path, values: dict[str, str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(GatewayConfigError, match=re.escape(message)):
        load(config(tmp_path, **values), {"STRIPE_SECRET_KEY": "sk_test_123456", **env})


def test_a_gateway_on_a_unix_socket_may_run_without_a_token(tmp_path: Path) -> None:
    path = config(tmp_path, listen=f"unix:{tmp_path / 'gw.sock'}")
    assert load(path, {"STRIPE_SECRET_KEY": "sk_test_123456"}).token is None
    token = "t" * 40
    loaded = load(path, {"STRIPE_SECRET_KEY": "sk_test_123456", "WAKEFUL_GATEWAY_TOKEN": token})
    assert loaded.token == token and token not in repr(loaded)
    assert token in loaded.secrets(), "the log redaction masks it"


def _with(tmp_path: Path, line: str, **values: str) -> Path:
    path = config(tmp_path, **values)
    path.write_text(path.read_text() + line + "\n")
    return path


def test_the_headers_a_destination_passes_on_default_to_a_short_list() -> None:
    assert Destination.__dataclass_fields__["headers"].default == frozenset(
        {"content-type", "accept", "user-agent", "idempotency-key"}
    )


@pytest.mark.parametrize(
    ("name", "line", "passed"),
    [
        (
            "stripe",
            "",
            {"content-type", "accept", "user-agent", "idempotency-key", "stripe-version"},
        ),
        ("ledger", "", {"content-type", "accept", "user-agent", "idempotency-key"}),
        ("stripe", 'headers = ["Accept", "stripe-account"]', {"accept", "stripe-account"}),
        ("stripe", "headers = []", set()),
    ],
)
def test_the_headers_a_destination_passes_on(
    tmp_path: Path, name: str, line: str, passed: set[str]
) -> None:
    loaded = load(_with(tmp_path, line, name=name), ENV)
    assert loaded.destinations[name].headers == passed


@pytest.mark.parametrize(
    "header",
    [
        "Authorization",
        "Cookie",
        "Host",
        "X-HTTP-Method-Override",
        "X-Method-Override",
        "X-Forwarded-For",
        "Forwarded",
        "Wakeful-Run",
        "Proxy-Authorization",
        "Transfer-Encoding",
        "Stripe-Key",
    ],
)
def test_a_header_list_naming_a_credential_framing_or_override_header_is_refused(
    tmp_path: Path, header: str
) -> None:
    path = _with(tmp_path, f'headers = ["Accept", "{header}"]\ncredential_header = "Stripe-Key"')
    with pytest.raises(GatewayConfigError, match=re.escape(f"headers: {header} is never passed")):
        load(path, ENV)


def test_a_rule_may_list_the_query_parameters_it_allows() -> None:
    rule = Rule("GET", "/v1/refunds", frozenset({"payment_intent", "limit", "expand[]"}))
    assert rule.allows("GET", "/v1/refunds", "payment_intent=pi_1&limit=3")
    assert rule.allows("GET", "/v1/refunds", "expand%5B%5D=charge&expand%5B%5D=x")
    assert rule.allows("GET", "/v1/refunds", "")
    assert not rule.allows("GET", "/v1/refunds", "payment_intent=pi_1&customer=c")
    assert not rule.allows("GET", "/v1/refunds", "&")
    assert str(rule) == "GET /v1/refunds?expand[]&limit&payment_intent"
    none = Rule("GET", "/v1/balance", frozenset())
    assert none.allows("GET", "/v1/balance") and not none.allows("GET", "/v1/balance", "a=1")
    assert Rule("GET", "/v1/x").allows("GET", "/v1/x", "anything=1"), "no ?: any query"


def test_a_rule_with_a_malformed_query_list_is_refused(tmp_path: Path) -> None:
    path = config(tmp_path)
    path.write_text(path.read_text().replace('"POST /v1/refunds"', '"GET /v1/refunds?a b"'))
    with pytest.raises(GatewayConfigError, match="after \\? come parameter names joined by &"):
        load(path, ENV)
    path.write_text(path.read_text().replace("?a b", "?payment_intent&limit"))
    [rule] = load(path, ENV).destinations["stripe"].rules
    assert rule.query == {"payment_intent", "limit"}
