"""What the gateway tells about itself: one audit line per request, and its metrics.

The audit log is JSON lines appended to a file of its own (mode 0600) or to standard output:
`time`, `claimed_inbox`, `claimed_run` (what the caller says; any holder of the token can say
anything), `destination` (or `asked_for`, a name it does not have), `method`,
`path` (no query string: a query may carry data), `status`, `idempotency_key`, `duration_ms`,
`outcome` (`forwarded`, `refused`, `upstream_error`) and `reason`. It never holds the
credential, the token or a body, and every line goes through the log redaction with the
gateway's secrets and token registered, should a caller put one in a path.

Metrics (Prometheus, `GET /metrics` on the gateway): `wakeful_gateway_requests_total` by
destination, status and outcome; `wakeful_gateway_request_duration_seconds` by destination.
Destinations are the configured names (or `unknown`), so the series stay few.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import threading
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)

from wakeful.core import logs


class AuditLog:
    """Appends one JSON line per request; `-` writes to standard output."""

    def __init__(self, target: str) -> None:
        self.target = target
        self._lock = threading.Lock()
        self._fd: int | None = None
        if target != "-":
            self._fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def write(self, record: dict[str, Any]) -> None:
        now = datetime.datetime.now(datetime.UTC)
        line = {"time": now.isoformat(timespec="milliseconds").replace("+00:00", "Z"), **record}
        text = logs.redact(json.dumps(line, ensure_ascii=True, sort_keys=False)) + "\n"
        with self._lock:
            if self._fd is None:
                sys.stdout.write(text)
                sys.stdout.flush()
            else:
                os.write(self._fd, text.encode())

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


class Metrics:
    """The gateway's counters, in a registry of its own."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "wakeful_gateway_requests_total",
            "Requests to the gateway by destination, HTTP status and outcome (forwarded, "
            "refused, upstream_error).",
            ["destination", "status", "outcome"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "wakeful_gateway_request_duration_seconds",
            "Time from a request's arrival to its status (the upstream's answer or a refusal).",
            ["destination"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )

    def count(self, destination: str, status: int, outcome: str, seconds: float = 0.0) -> None:
        self.requests.labels(destination, str(status), outcome).inc()
        self.duration.labels(destination).observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
