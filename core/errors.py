"""One root exception for wakeful, so callers can catch the engine's failures apart from bugs."""

from __future__ import annotations


class WakefulError(Exception):
    """Root of every error the engine raises on purpose."""


class InvalidInput(WakefulError, ValueError):
    """The caller passed something malformed; nothing was stored."""


class StoreError(WakefulError):
    """The store failed in a way the caller cannot fix by changing its input."""


class StoreUnavailable(StoreError):
    """The store cannot take a write right now (busy, locked, disk full, unreachable).

    Transient by nature: an HTTP front answers 503 so Slack retries the delivery.
    """


class LeaseLost(WakefulError):
    """The caller no longer holds the inbox's lease in the generation it claimed under."""


class SendError(WakefulError):
    """A sender could not deliver a part."""


class TransientSendError(SendError):
    """Delivery may work later (rate limited, 5xx, network): the rows are kept and retried."""

    def __init__(self, message: str, retry_after: int = 0) -> None:
        super().__init__(message)
        self.retry_after = max(0, int(retry_after))


class PermanentSendError(SendError):
    """Delivery will not work without a person (channel gone, bad auth): the rows are parked."""
