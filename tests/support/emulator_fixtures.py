"""The Slack emulator under test (tests/integration/test_emulator*.py): one with two users whose
time zones differ, and a real `slack_sdk.WebClient` on it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from wakeful.devtools.emulator import SlackEmulator

TOKEN = "xoxb-test-token"
SECRET = "shh-signing-secret"


@pytest.fixture
def emu() -> Iterator[SlackEmulator]:
    users: dict[str, dict[str, Any]] = {
        "U1": {"tz": "Europe/Paris"},
        "U2": {"tz": "America/New_York", "is_bot": False},
    }
    with SlackEmulator(bot_token=TOKEN, users=users) as e:
        yield e


@pytest.fixture
def client(emu: SlackEmulator) -> WebClient:
    return WebClient(token=TOKEN, base_url=emu.api_url)


def error_of(exc: pytest.ExceptionInfo[SlackApiError]) -> Any:
    return exc.value.response["error"]
