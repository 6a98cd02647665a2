"""Slack's request signature: checked before anything in the body is parsed.

A wrong SLACK_SIGNING_SECRET is the commonest first-day mistake, and every request it refuses
is a 401 that Slack shows nowhere near the server: so repeated refusals are said in the log,
at most one line a minute for each cause, with the count and what to check.
"""

from __future__ import annotations

import collections
import hmac
import logging
import threading

from slack_sdk.signature import Clock, SignatureVerifier

log = logging.getLogger("wakeful")
WINDOW = 60.0
"""Seconds over which refusals are counted, and the least time between two warnings."""
REPEATED = 3
"""Refusals within WINDOW before a warning: Slack itself retries a refused event 3 times."""
SKEW = 300
"""Slack's limit: a request signed more than 5 minutes from this host's time is refused."""
MISMATCH = (
    "{n} requests refused in the last 60 s: their signature does not match "
    "SLACK_SIGNING_SECRET; check that it is the app's Signing Secret (Basic Information page)"
)
STALE = (
    "{n} requests refused in the last 60 s: correctly signed, but their timestamp is more than "
    "5 minutes from this host's clock; fix this host's time (NTP)"
)


class RefusalLog:
    """Counts refusals of one cause over the last WINDOW seconds and says so in one WARNING
    once they repeat, then at most once per WINDOW (a flood of bad requests is one line a
    minute, not one a request)."""

    def __init__(self, text: str, clock: Clock) -> None:
        self._text = text
        self._clock = clock
        self._times: collections.deque[float] = collections.deque()
        self._said: float | None = None
        self._lock = threading.Lock()

    def refused(self) -> None:
        now = float(self._clock.now())
        with self._lock:
            self._times.append(now)
            while self._times and self._times[0] <= now - WINDOW:
                self._times.popleft()
            count = len(self._times)
            if count < REPEATED or (self._said is not None and now - self._said < WINDOW):
                return
            self._said = now
        log.warning(self._text.format(n=count))


class RequestSignature:
    """`X-Slack-Signature` over the raw body with the signing secret, and a timestamp within
    Slack's five minutes (slack_sdk's verifier, with an injectable clock for tests)."""

    def __init__(self, signing_secret: str, clock: Clock | None = None) -> None:
        self._clock = clock or Clock()
        self._verifier = SignatureVerifier(signing_secret, clock=self._clock)
        self.mismatches = RefusalLog(MISMATCH, self._clock)
        self.stale = RefusalLog(STALE, self._clock)

    def valid(self, body: bytes, timestamp: str, signature: str) -> bool:
        # A Unix time has 10 digits; anything much longer is an attack on int() or the clock.
        if (
            not signature
            or not (timestamp.isascii() and timestamp.isdigit())
            or len(timestamp) > 12
        ):
            return False  # not signed at all: not Slack, nothing to say about the secret
        try:
            expected = self._verifier.generate_signature(timestamp=timestamp, body=body)
            matches = expected is not None and hmac.compare_digest(expected, signature)
        except (ValueError, TypeError, UnicodeError, OverflowError):
            return False  # not ASCII, not UTF-8: garbage, not a wrong secret
        if not matches:
            self.mismatches.refused()
            return False
        if abs(self._clock.now() - int(timestamp)) > SKEW:
            self.stale.refused()
            return False
        return True
