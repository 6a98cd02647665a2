"""How an approved tool's failure is read: transient (retried later under the same idempotency
key, spending none of the event's attempts) or permanent (an answer that stands, told to the
person at once).

A tool says which by raising `ToolUnavailable` or `ToolFailed`; anything else it raises is
read here: the destination or the gateway unreachable, a timeout, HTTP 429, a 5xx the
destination did not keep under the idempotency key are transient; every other error is
permanent. Stripe's SDK errors are read by their attributes (the SDK is an extra; the engine
does not import it). docs/agents.md "When a tool fails" has the table.
"""

from __future__ import annotations

import http.client
import socket
import urllib.error
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

from wakeful.core.errors import WakefulError

MAX_REASON = 300
"""A reason is one line a person reads: longer ones are cut."""


class ToolUnavailable(WakefulError):
    """The tool could not do its work now and may later (its service down, busy, or not
    answering). wakeful retries it under the same idempotency key, with backoff (or after
    `retry_after` seconds), for up to WAKEFUL_TOOL_RETRY_FOR; `reason` is told to the person
    ("the payment service did not answer")."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


class ToolFailed(WakefulError):
    """The tool's work cannot be done, now or later (refused, declined, invalid): it is not
    retried, and the agent gets `ApprovalAnswer.error` = `reason`, told to the person.
    `tell_ops` for a failure only an operator can mend (a revoked destination, a credential
    refused): it is said in the operators' channel too."""

    def __init__(self, reason: str, *, tell_ops: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.tell_ops = tell_ops


@dataclass(frozen=True, slots=True)
class Verdict:
    """A failure as read: `transient` or not, the one-line reason a person is told, and
    the seconds the destination asked to wait (None: the backoff's own)."""

    transient: bool
    reason: str
    retry_after: float | None = None


def classify(exc: BaseException) -> Verdict:
    """Transient or permanent, and why, for any exception a tool raised."""
    if isinstance(exc, ToolUnavailable):
        return Verdict(True, _line(exc.reason), _seconds(exc.retry_after))
    if isinstance(exc, ToolFailed):
        return Verdict(False, _line(exc.reason))
    stripe_verdict = _stripe(exc)
    if stripe_verdict is not None:
        return stripe_verdict
    if isinstance(exc, urllib.error.HTTPError):
        return _http(exc.code, exc.headers, f"the service answered {exc.code} {exc.reason}")
    if isinstance(exc, urllib.error.URLError):
        inner = exc.reason
        if isinstance(inner, BaseException):
            return classify(inner)
        return Verdict(True, _line(f"the service could not be reached ({inner})"))
    if isinstance(exc, TimeoutError | socket.timeout):
        return Verdict(True, "the service did not answer in time")
    if isinstance(exc, ConnectionRefusedError):
        return Verdict(True, "the service refused the connection (it may be down)")
    if isinstance(exc, ConnectionError | http.client.HTTPException | socket.gaierror):
        return Verdict(True, _line(f"the service could not be reached ({type(exc).__name__})"))
    if isinstance(exc, OSError) and exc.errno is not None:
        return Verdict(True, _line(f"the service could not be reached ({exc.strerror or exc})"))
    return Verdict(False, _line(f"{type(exc).__name__}: {exc}"))


def _http(status: int, headers: Any, reason: str) -> Verdict:
    if status >= 500 and _replayed(headers):
        return Verdict(False, _line(f"{reason}, kept under the idempotency key"))
    if status in (408, 409, 429) or status >= 500:
        # 409: the idempotency key is still in use by an earlier try (Stripe's, and others')
        return Verdict(True, _line(reason), _retry_after(headers))
    return Verdict(False, _line(reason))


def _replayed(headers: Any) -> bool:
    """The destination answered from what it kept under the idempotency key."""
    return str(_header(headers, "Idempotent-Replayed")).lower() == "true"


def _stripe(exc: BaseException) -> Verdict | None:
    """Stripe's SDK errors (stripe.StripeError and its kinds), read without importing it."""
    if not type(exc).__module__.startswith("stripe"):
        return None
    kinds = {cls.__name__ for cls in type(exc).__mro__}
    if "StripeError" not in kinds:
        return None
    status = getattr(exc, "http_status", None)
    headers = getattr(exc, "headers", None) or {}
    message = str(getattr(exc, "user_message", None) or exc)
    if "APIConnectionError" in kinds:
        return Verdict(True, "the payment service could not be reached")
    if "RateLimitError" in kinds or status == 429:
        return Verdict(True, "the payment service asked to slow down", _retry_after(headers))
    if status == 409:  # the key is still in use by an earlier try: its answer will come
        return Verdict(True, "the payment service is still busy with an earlier try")
    if isinstance(status, int) and status >= 500:
        if _replayed(headers):
            # Stripe kept this answer under the key: a retry would only replay it.
            return Verdict(False, _line(f"the payment service failed ({status}): {message}"))
        return Verdict(True, f"the payment service did not answer ({status})")
    return Verdict(False, _line(message))


def _header(headers: Any, name: str) -> Any:
    try:
        value = headers.get(name)
        if value is None:
            value = headers.get(name.lower())
        return value
    except AttributeError:
        return None


def _retry_after(headers: Any) -> float | None:
    """Retry-After in seconds (a number or an HTTP date), or None."""
    raw = _header(headers, "Retry-After") if headers is not None else None
    if raw is None:
        return None
    text = str(raw).strip()
    try:
        return _seconds(float(text))
    except ValueError:
        pass
    try:
        from datetime import UTC, datetime

        return _seconds((parsedate_to_datetime(text) - datetime.now(UTC)).total_seconds())
    except (TypeError, ValueError, OverflowError):
        return None


def _seconds(value: float | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    if seconds != seconds or seconds < 0:  # NaN or negative: the backoff's own
        return None
    return min(seconds, 86_400.0)


def _line(text: str) -> str:
    """One line, at most MAX_REASON characters."""
    line = " ".join(str(text).split())
    return line if len(line) <= MAX_REASON else line[: MAX_REASON - 1] + "…"
