"""A person's time zone from Slack: read off the worker's path, a slow answer never waited for
twice, a failed one read again on a later run, and the person told which zone was used.

ZoneLookup talks to the Slack emulator over HTTP with a real WebClient; the refund desk runs
on the real engine (tests/support/refund_world.py's Desk).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from slack_sdk import WebClient

from tests.conftest import T0
from tests.support.refund_world import INBOX, USER, Desk
from wakeful.bot.slack.zones import ZoneLookup
from wakeful.core.store import Store
from wakeful.devtools.emulator import SlackEmulator

TOKEN = "xoxb-zones"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def emu() -> Iterator[SlackEmulator]:
    users = {USER: {"tz": "Europe/Paris"}, "U2": {"tz": "America/New_York"}}
    with SlackEmulator(bot_token=TOKEN, users=users) as e:
        yield e


@pytest.fixture
def client(emu: SlackEmulator) -> WebClient:
    return WebClient(token=TOKEN, base_url=emu.api_url, timeout=30)


def test_a_slow_users_info_is_waited_for_a_moment_once_and_its_answer_kept(
    emu: SlackEmulator, client: WebClient
) -> None:
    lookup = ZoneLookup(client)
    emu.fault("users.info", delay=3)
    started = time.monotonic()
    assert lookup(USER) == ""  # not known yet: the run goes on without it
    first = time.monotonic() - started
    started = time.monotonic()
    assert lookup(USER) == ""  # still on its way: not waited for again
    second = time.monotonic() - started
    assert first < 1.0 and second < 0.1, (first, second)
    assert lookup("U2") == "America/New_York"  # another person's answer is not held up
    deadline = time.monotonic() + 10
    while lookup(USER) != "Europe/Paris" and time.monotonic() < deadline:
        time.sleep(0.05)  # the answer lands in the background; a later run finds it
    assert lookup(USER) == "Europe/Paris"
    assert [c.params.get("user") for c in emu.calls("users.info")].count(USER) == 1


def test_a_failed_look_up_is_tried_again_on_a_later_run(
    emu: SlackEmulator, client: WebClient
) -> None:
    clock = Clock()
    lookup = ZoneLookup(client, retry_after=30, clock=clock)
    emu.fault("users.info", error="ratelimited")
    assert lookup(USER) == ""
    assert lookup(USER) == ""  # within retry_after: Slack is not asked again
    assert len(emu.calls("users.info")) == 1
    clock.now += 31
    assert lookup(USER) == "Europe/Paris"
    clock.now += 3600
    assert lookup(USER) == "Europe/Paris"  # kept: no new call
    assert len(emu.calls("users.info")) == 2


def test_digest_daily_says_when_utc_stands_in_and_a_later_run_uses_the_real_zone(
    store: Store, emu: SlackEmulator, client: WebClient
) -> None:
    clock = Clock()
    desk = Desk(store, tz_lookup=ZoneLookup(client, retry_after=30, clock=clock))
    emu.fault("users.info", error="ratelimited")
    desk.say("digest daily at 09:00")
    desk.tick()
    assert desk.texts()[-1] == (
        "Handled 1 message.\nDigest set: daily at 09:00 (UTC: your Slack time zone could not be "
        "read; say `digest daily at 09:00` again later)."
    )
    [timer] = store.timers(INBOX)
    assert datetime.fromtimestamp(timer.next_at, ZoneInfo("UTC")).strftime("%H:%M") == "09:00"
    clock.now += 31
    desk.say("digest daily at 09:00")
    desk.tick(T0 + 60)
    assert desk.texts()[-1] == "Handled 1 message.\nDigest set: daily at 09:00 (Europe/Paris)."
    [timer] = store.timers(INBOX)
    local = datetime.fromtimestamp(timer.next_at, ZoneInfo("Europe/Paris"))
    assert local.strftime("%H:%M") == "09:00"
