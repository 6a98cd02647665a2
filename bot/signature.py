"""Slack's request signature: checked before anything in the body is parsed."""

from __future__ import annotations

from slack_sdk.signature import Clock, SignatureVerifier


class RequestSignature:
    """`X-Slack-Signature` over the raw body with the signing secret, and a timestamp within
    Slack's five minutes (slack_sdk's verifier, with an injectable clock for tests)."""

    def __init__(self, signing_secret: str, clock: Clock | None = None) -> None:
        self._verifier = SignatureVerifier(signing_secret, clock=clock or Clock())

    def valid(self, body: bytes, timestamp: str, signature: str) -> bool:
        # A Unix time has 10 digits; anything much longer is an attack on int() or the clock.
        if not signature or not timestamp.isdigit() or len(timestamp) > 12:
            return False
        try:
            return bool(self._verifier.is_valid(body, timestamp, signature))
        except (ValueError, TypeError, UnicodeError, OverflowError):
            return False
