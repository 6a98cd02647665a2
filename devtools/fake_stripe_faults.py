"""The fake Stripe's scripted faults (devtools/fake_stripe.py): errors of Stripe's API, its
rate limiter's 429, and the load balancer's 503 in front of it, each for the next N matching
requests or for a span of time."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from wakeful.devtools.fake_stripe_api import StripeError


@dataclass
class Fault:
    """One scripted fault: for `count` more matching requests, or until `until` (monotonic)."""

    path: str
    method: str | None
    count: int
    until: float | None
    error: StripeError | None = None
    """Stripe's answer; None: the load balancer's 503."""
    headers: dict[str, str] = field(default_factory=dict)
    acted: bool = False
    """The endpoint ran (the refund was made) before `error` was answered."""

    def takes(self, method: str, path: str) -> bool:
        if not path.startswith(self.path) or self.method not in (None, method):
            return False
        if self.until is not None:
            return time.monotonic() < self.until
        if self.count <= 0:
            return False
        self.count -= 1
        return True


RATE_LIMITED = (
    "Request rate limit exceeded. Learn more about rate limits here "
    "https://stripe.com/docs/rate-limits."
)
"""Stripe's message for its rate limiter's 429 (code `rate_limit`)."""
UNAVAILABLE = (
    b"<html>\r\n<head><title>503 Service Temporarily Unavailable</title></head>\r\n<body>\r\n"
    b"<center><h1>503 Service Temporarily Unavailable</h1></center>\r\n</body>\r\n</html>\r\n"
)
"""What a load balancer (nginx, an AWS ALB) answers with no upstream behind it."""


class Faults:
    """The scripting methods (a mixin: the server supplies `_lock` and reads `_faults`, Stripe's
    own answers, and `_front`, the load balancer's)."""

    _lock: threading.RLock
    _faults: list[Fault]
    _front: list[Fault]

    def fail_next(
        self,
        status: int,
        kind: str,
        message: str,
        code: str | None = None,
        path: str = "/v1/refunds",
        count: int = 1,
        should_retry: bool | None = None,
        *,
        method: str | None = None,
        for_seconds: float | None = None,
        retry_after: int | None = None,
        acted: bool = False,
    ) -> None:
        """Stripe's API answers the next `count` requests under `path` (of `method`, or any)
        with this error, or every one for `for_seconds`. A 5xx is kept under the request's
        idempotency key (Stripe replays it, with Stripe-Should-Retry: false); a 429 is not
        (the rate limiter refused it before the endpoint ran). `acted`: a 5xx that came after
        the endpoint did its work (the refund is made, its answer is the error)."""
        if not 400 <= status <= 599:
            raise ValueError(f"fail_next: an error status is 400-599, got {status}")
        if acted and status < 500:
            raise ValueError("fail_next: only a 5xx comes after the endpoint acted")
        headers = {} if should_retry is None else {"Stripe-Should-Retry": str(should_retry).lower()}
        if status >= 500 and should_retry is None:
            headers["Stripe-Should-Retry"] = "false"
        if retry_after is not None:
            headers["Retry-After"] = str(_whole(retry_after, "retry_after"))
        error = StripeError(status, kind, message, code, saved=status != 429, headers=headers)
        fault = _fault(path, method, count, for_seconds)
        fault.error, fault.acted = error, acted
        with self._lock:
            self._faults.append(fault)

    def rate_limit(
        self,
        count: int = 1,
        *,
        for_seconds: float | None = None,
        retry_after: int | None = 1,
        path: str = "/v1/",
        method: str | None = None,
    ) -> None:
        """Stripe's rate limiter refuses the next `count` requests (or all for `for_seconds`):
        a 429 `rate_limit` in Stripe's error shape with its Request-Id, nothing kept under the
        key. `retry_after`: the Retry-After header's seconds (None: none sent; Stripe does
        not document sending one)."""
        self.fail_next(
            429,
            "invalid_request_error",
            RATE_LIMITED,
            "rate_limit",
            path,
            count,
            method=method,
            for_seconds=for_seconds,
            retry_after=retry_after,
        )

    def unavailable(
        self,
        count: int = 1,
        *,
        for_seconds: float | None = None,
        path: str = "/v1/",
        method: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        """The load balancer in front of the API answers the next `count` requests (or all
        for `for_seconds`) itself: 503 with an HTML page, no Request-Id, nothing kept under
        the idempotency key, so a retry with the same key runs for real."""
        fault = _fault(path, method, count, for_seconds)
        if retry_after is not None:
            fault.headers["Retry-After"] = str(_whole(retry_after, "retry_after"))
        with self._lock:
            self._front.append(fault)

    def _stripe_fault(self, method: str, path: str) -> Fault | None:
        """Stripe's scripted error for this request, if one takes it (under `_lock`)."""
        return next((f for f in self._faults if f.error and f.takes(method, path)), None)

    def _front_fault(self, method: str, path: str) -> Fault | None:
        """The load balancer's scripted 503 for this request, if one takes it (under `_lock`)."""
        return next((f for f in self._front if f.takes(method, path)), None)


def _fault(path: str, method: str | None, count: int, for_seconds: float | None) -> Fault:
    if not path.startswith("/"):
        raise ValueError(f"a fault's path starts with /, got {path!r}")
    if method is not None and method not in ("GET", "POST"):
        raise ValueError(f"a fault's method is GET, POST or None (any), got {method!r}")
    if for_seconds is not None:
        if not for_seconds > 0:
            raise ValueError(f"for_seconds must be positive, got {for_seconds!r}")
        return Fault(path, method, 0, time.monotonic() + for_seconds)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be a whole number of requests (1 or more), got {count!r}")
    return Fault(path, method, count, None)


def _whole(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} is whole seconds (0 or more), got {value!r}")
    return value
