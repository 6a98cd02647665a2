"""manifest.yml against Slack's manifest schema (the part it uses, copied into
tests/fixtures/slack_manifest_schema.json with its source), and against what the app does:
every event it subscribes to has a listener, every Web API method it calls a scope."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from wakeful.bot.front import payloads
from wakeful.bot.slack.scopes import METHOD_SCOPES

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "tests/fixtures/slack_manifest_schema.json").read_text())
TYPES = {"object": dict, "array": list, "string": str, "boolean": bool}


def problems(value: Any, schema: dict[str, Any], where: str = "") -> list[str]:
    """What in `value` breaks `schema` (the JSON Schema keywords the fixture uses)."""
    found: list[str] = []
    kind = schema.get("type")
    if kind and not isinstance(value, TYPES[kind]):
        return [f"{where or '/'}: expected {kind}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{where}: {value!r} is not one of Slack's values")
    if isinstance(value, str):
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            found.append(f"{where}: longer than {schema['maxLength']}")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            found.append(f"{where}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        found += [
            f"{where}/{name}: required" for name in schema.get("required", ()) if name not in value
        ]
        for name, item in value.items():
            if name in props:
                found += problems(item, props[name], f"{where}/{name}")
            elif schema.get("additionalProperties") is False:
                found.append(f"{where}/{name}: not a manifest field")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            found += problems(item, schema["items"], f"{where}[{i}]")
    return found


def manifest() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "manifest.yml").read_text())
    return loaded


def test_manifest_yml_validates_against_slacks_schema() -> None:
    assert problems(manifest(), SCHEMA) == []


@pytest.mark.parametrize(
    ("path", "bad", "expected"),
    [
        (("display_information",), {}, "/display_information/name: required"),
        (("settings", "event_subscriptions", "bot_events"), ["message.channel"], "not one of"),
        (("features", "slash_commands"), [{"command": "/wakeful"}], "description: required"),
        (("features", "agent_view"), {"suggested_prompts": []}, "agent_description"),
        (("features", "agent_view"), {"agent_description": "x", "prompts": []}, "not a manifest"),
        (("features", "assistant_view"), {"suggested_prompts": []}, "assistant_description"),
        (("settings", "interactivity"), {"request_url": "https://x"}, "is_enabled: required"),
        (("features", "app_home", "home_tab"), True, "not a manifest field"),
    ],
)
def test_the_check_refuses_what_slack_refuses(
    path: tuple[str, ...], bad: Any, expected: str
) -> None:
    broken = manifest()
    node = broken
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = bad
    assert any(expected in p for p in problems(broken, SCHEMA)), problems(broken, SCHEMA)


def test_the_surfaces_of_issue_13_are_declared() -> None:
    m = manifest()
    events = set(m["settings"]["event_subscriptions"]["bot_events"])
    assert {"message.channels", "message.groups", "message.mpim", "app_home_opened"} <= events
    assert m["features"]["app_home"]["home_tab_enabled"] is True
    [command] = m["features"]["slash_commands"]
    assert command["command"] == "/wakeful" and command["should_escape"] is False


def test_the_manifest_declares_slacks_agent_messaging_experience() -> None:
    """Issue 24: `agent_view` (with `agent_description`) instead of `assistant_view`, which Slack
    will deprecate; the DM is the Messages tab (`app_home_opened`, tab `messages`), the status
    needs only `chat:write`. An app still on `assistant_view` keeps working: its
    `assistant_thread_started` has a listener."""
    m = manifest()
    features = m["features"]
    assert "assistant_view" not in features
    assert features["agent_view"]["agent_description"].strip()
    assert features["agent_view"]["suggested_prompts"]
    assert features["app_home"]["messages_tab_enabled"] is True
    assert "app_home_opened" in m["settings"]["event_subscriptions"]["bot_events"]
    assert "chat:write" in METHOD_SCOPES["assistant.threads.setStatus"]
    assert "assistant_thread_started" in payloads.HANDLED_EVENTS
    broken = manifest()
    broken["features"]["assistant_view"] = {"assistant_description": "old"}
    del broken["features"]["agent_view"]
    assert problems(broken, SCHEMA) == []  # an older app's manifest still validates


def test_every_subscribed_event_has_a_listener() -> None:
    events = manifest()["settings"]["event_subscriptions"]["bot_events"]
    for name in events:
        assert name.split(".")[0] in payloads.HANDLED_EVENTS, name


def test_every_method_wakeful_calls_is_covered_by_the_manifests_scopes() -> None:
    granted = set(manifest()["oauth_config"]["scopes"]["bot"])
    for method, scopes in METHOD_SCOPES.items():
        assert not scopes or granted & set(scopes), f"{method} needs one of {scopes}"


def distribution_manifest() -> dict[str, Any]:
    """manifest.yml with its commented-out distribution lines turned on (issue 26)."""
    text = (ROOT / "manifest.yml").read_text()
    for line in ("# redirect_urls:", "#   - https://", "# token_rotation_enabled:"):
        text = text.replace(line, line.replace("# ", "", 1).replace("#   ", "  ", 1))
    loaded: dict[str, Any] = yaml.safe_load(text)
    return loaded


def test_the_distribution_lines_are_there_commented_out_and_valid_when_on() -> None:
    from wakeful.bot.front.wsgi import REDIRECT_PATH

    default = manifest()
    assert "redirect_urls" not in default["oauth_config"]
    assert "token_rotation_enabled" not in default["settings"]
    on = distribution_manifest()
    assert problems(on, SCHEMA) == []
    [url] = on["oauth_config"]["redirect_urls"]
    assert url.endswith(REDIRECT_PATH)
    assert on["settings"]["token_rotation_enabled"] is True
    events = set(on["settings"]["event_subscriptions"]["bot_events"])
    assert {"tokens_revoked", "app_uninstalled"} <= events


@pytest.mark.parametrize(
    ("path", "bad", "expected"),
    [
        (("settings", "token_rotation_enabled"), "yes", "expected boolean"),
        (("oauth_config", "redirect_urls"), "https://x/slack/oauth_redirect", "expected array"),
        (("oauth_config", "redirect_url"), ["https://x"], "not a manifest field"),
    ],
)
def test_the_check_refuses_distribution_settings_slack_refuses(
    path: tuple[str, ...], bad: Any, expected: str
) -> None:
    broken = distribution_manifest()
    node = broken
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = bad
    assert any(expected in p for p in problems(broken, SCHEMA)), problems(broken, SCHEMA)
