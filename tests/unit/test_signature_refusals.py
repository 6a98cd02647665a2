"""A wrong signing secret shows in the log: repeated refusals make one WARNING naming
SLACK_SIGNING_SECRET with the count, at most one line a minute (a flood is not a flood of
lines); a correctly signed request from a clock 5 minutes off is said apart."""

from __future__ import annotations

import logging

import pytest
from slack_sdk.signature import Clock

from wakeful.bot.front.signature import RequestSignature
from wakeful.devtools.emulator import EventSender

SECRET = "the-app-s-signing-secret"
BODY = b'{"type":"event_callback"}'


class StepClock(Clock):
    """The time, set by the test (slack_sdk's verifier takes a clock object)."""

    def __init__(self, now: float) -> None:
        self.t = now

    def now(self) -> float:
        return self.t


def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def mismatch(n: int) -> str:
    return (
        f"{n} requests refused in the last 60 s: their signature does not match "
        "SLACK_SIGNING_SECRET; check that it is the app's Signing Secret (Basic Information page)"
    )


def test_repeated_mismatches_are_one_line_a_minute_with_the_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="wakeful")
    clock = StepClock(1_700_000_000)
    check = RequestSignature(SECRET, clock)
    other = EventSender("http://unused", "another-app-s-secret")

    def refuse() -> None:
        ts = int(clock.t)
        assert not check.valid(BODY, str(ts), other.sign(BODY, ts))

    refuse()
    refuse()
    assert said(caplog) == []  # one or two could be noise; a wrong secret repeats
    for _ in range(10):
        refuse()
        clock.t += 1
    assert said(caplog) == [mismatch(3)]  # said at the third, then quiet for a minute
    clock.t += 50  # 60 s after that line
    refuse()
    assert said(caplog) == [mismatch(3), mismatch(10)]  # the refusals of the last 60 s
    good = EventSender("http://unused", SECRET)
    ts = int(clock.t)
    assert check.valid(BODY, str(ts), good.sign(BODY, ts))


def test_unsigned_requests_say_nothing_and_a_skewed_clock_is_said_apart(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="wakeful")
    clock = StepClock(1_700_000_000)
    check = RequestSignature(SECRET, clock)
    for _ in range(5):
        assert not check.valid(BODY, "", "")  # a scanner, not Slack
    assert said(caplog) == []
    right = EventSender("http://unused", SECRET)
    old = int(clock.t) - 600
    for _ in range(3):
        assert not check.valid(BODY, str(old), right.sign(BODY, old))
    assert said(caplog) == [
        "3 requests refused in the last 60 s: correctly signed, but their timestamp is more "
        "than 5 minutes from this host's clock; fix this host's time (NTP)"
    ]
