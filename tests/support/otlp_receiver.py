"""A real OTLP/HTTP trace receiver on loopback, for spans exported by other processes.

In-process tests collect spans with OpenTelemetry's in-memory exporter; a subprocess cannot
share that memory, so it exports with OpenTelemetry's own OTLP/HTTP exporter (configured only
by OTEL_EXPORTER_OTLP_ENDPOINT and friends) and this receiver keeps every span it is sent,
decoded with the OTLP protobuf messages the exporter itself uses. The benches use it too, as
the loopback collector that tracing's overhead is measured against.
"""

from __future__ import annotations

import gzip
import signal
import sys
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

TRACES_PATH = "/v1/traces"
COUNT_PATH = "/count"
"""GET: how many spans arrived, as decimal text."""


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span, ids in lowercase hex as W3C traceparents spell them."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    """"" for a root span."""
    links: tuple[tuple[str, str], ...]
    """(trace id, span id) of each link."""
    attributes: dict[str, Any]
    resource: dict[str, Any]
    service: str
    """The resource's `service.name`: which process exported it."""
    kind: int = 0
    start_ns: int = 0
    end_ns: int = 0
    status: int = 0
    """0 unset, 1 ok, 2 error (OTLP's StatusCode)."""
    events: tuple[str, ...] = field(default=())


def value_of(value: AnyValue) -> Any:
    """An OTLP AnyValue as the Python value it carries."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [value_of(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return attributes_of(value.kvlist_value.values)
    return getattr(value, which)


def attributes_of(pairs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        assert isinstance(pair, KeyValue)
        out[pair.key] = value_of(pair.value)
    return out


def decode(body: bytes) -> list[ReceivedSpan]:
    """Every span of one ExportTraceServiceRequest."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    found = []
    for resource_spans in request.resource_spans:
        resource = attributes_of(resource_spans.resource.attributes)
        service = str(resource.get("service.name", ""))
        for scope_spans in resource_spans.scope_spans:
            for s in scope_spans.spans:
                found.append(
                    ReceivedSpan(
                        name=s.name,
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_id=s.parent_span_id.hex(),
                        links=tuple((k.trace_id.hex(), k.span_id.hex()) for k in s.links),
                        attributes=attributes_of(s.attributes),
                        resource=resource,
                        service=service,
                        kind=int(s.kind),
                        start_ns=int(s.start_time_unix_nano),
                        end_ns=int(s.end_time_unix_nano),
                        status=int(s.status.code),
                        events=tuple(e.name for e in s.events),
                    )
                )
    return found


def count_spans(body: bytes) -> int:
    """How many spans an export request holds, parsed in protobuf's C code only: a collector
    that keeps nothing costs the machine little beside the process measured."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    return sum(len(scope.spans) for rs in request.resource_spans for scope in rs.scope_spans)


class OtlpReceiver:
    """`POST /v1/traces` (application/x-protobuf, plain, gzip or deflate) on 127.0.0.1, every
    span kept; `keep=False` decodes and counts only (a bench's collector)."""

    def __init__(self, keep: bool = True) -> None:
        self.keep = keep
        self._spans: list[ReceivedSpan] = []
        self._bodies: list[bytes] = []
        self._count = 0
        self._requests = 0
        self._cond = threading.Condition()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        """What OTEL_EXPORTER_OTLP_ENDPOINT is set to (the exporter appends /v1/traces)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def spans(self) -> list[ReceivedSpan]:
        with self._cond:
            return list(self._spans)

    def bodies(self) -> list[bytes]:
        """Every export request's protobuf body as received (decompressed), kept: all a process
        sent, resources, attributes, events and statuses alike, for a search of its bytes."""
        with self._cond:
            return list(self._bodies)

    @property
    def count(self) -> int:
        """Spans received (kept or not)."""
        with self._cond:
            return self._count

    @property
    def requests(self) -> int:
        with self._cond:
            return self._requests

    def wait_for(
        self, predicate: Callable[[list[ReceivedSpan]], bool], timeout: float = 10.0
    ) -> bool:
        """Whether `predicate` holds of the spans received within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(list(self._spans)):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def wait_count(self, count: int, timeout: float = 10.0) -> bool:
        """Whether `count` spans arrived (kept or not) within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._count < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        return [s for s in self.spans() if s.trace_id == trace_id]

    def _received(self, body: bytes) -> None:
        if self.keep:
            found = decode(body)
            count = len(found)
        else:  # a bench's collector: parsed (refusing what is malformed), counted, no more
            found, count = [], count_spans(body)
        with self._cond:
            self._requests += 1
            self._count += count
            if self.keep:
                self._spans.extend(found)
                self._bodies.append(body)
            self._cond.notify_all()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                if self.path == COUNT_PATH:  # a receiver in a process of its own (`main`)
                    self._answer(200, str(receiver.count).encode())
                else:
                    self._answer(404, b"")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                if self.path != TRACES_PATH:
                    self._answer(404, b"")
                    return
                if "protobuf" not in (self.headers.get("Content-Type") or ""):
                    self._answer(415, b"")
                    return
                encoding = (self.headers.get("Content-Encoding") or "").lower()
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                try:
                    receiver._received(body)
                except Exception:  # a malformed export: a 400, as a collector answers
                    self._answer(400, b"")
                    return
                self._answer(200, ExportTraceServiceResponse().SerializeToString())

            def _answer(self, code: int, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        return Handler


def main() -> None:
    """`python -m tests.support.otlp_receiver`: a receiver that counts, in a process of its own
    (a bench's collector, off the measured process's cores' GIL); prints its endpoint, answers
    GET /count, stops on SIGTERM."""
    with OtlpReceiver(keep=False) as receiver:
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        print(receiver.endpoint, flush=True)
        while not stop.wait(0.5):
            pass
    sys.exit(0)


if __name__ == "__main__":
    main()
