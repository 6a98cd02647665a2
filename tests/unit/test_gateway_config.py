"""The gateway's configuration refuses what would widen it, and its rules mean what they say."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from wakeful.core.gateway.config import GatewayConfigError, Rule, load
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
