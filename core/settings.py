"""The engine's tunables in one frozen value, so every loop and test sees the same numbers."""

from __future__ import annotations

from dataclasses import dataclass

from wakeful.core.errors import InvalidInput

MAX_PAYLOAD_BYTES = 256 * 1024
"""Cap on an event payload's JSON, in UTF-8 bytes. Slack's largest event bodies are far below."""


@dataclass(frozen=True, slots=True)
class Settings:
    lease_ttl: int = 120
    max_attempts: int = 3
    claim_cap: int = 50
    backoff_base: int = 10
    backoff_cap: int = 900
    outbox_gap: int = 3600
    send_timeout: int = 60
    """How long a batch may stay `sending` before another dispatcher may retry it."""
    max_catch_up: int = 1000
    """A `catch_up` timer replays at most this many missed occurrences per pass."""
    approval_ttl: int = 14400
    """Seconds an approval stays open before its expiry answers it."""

    def __post_init__(self) -> None:
        for name in (
            "lease_ttl",
            "max_attempts",
            "claim_cap",
            "backoff_base",
            "backoff_cap",
            "send_timeout",
            "max_catch_up",
            "approval_ttl",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidInput(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.outbox_gap, int) or self.outbox_gap < 0:
            raise InvalidInput(f"outbox_gap must be an integer >= 0, got {self.outbox_gap!r}")

    def backoff(self, attempts: int) -> int:
        """Seconds a retry waits after its `attempts`-th claim: base doubling, capped."""
        if attempts < 1:
            return 0
        return min(self.backoff_cap, self.backoff_base * (1 << min(attempts - 1, 30)))


DEFAULTS = Settings()
"""Every tunable's default, written once: configuration, agents and docs read it from here."""
