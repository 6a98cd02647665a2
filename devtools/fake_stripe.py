"""A local fake of the Stripe API: a real HTTP server on 127.0.0.1 (port 0), for tests, chaos
runs and the demo, that the official `stripe` SDK talks to (through the gateway).

What it serves, in Stripe's shapes (objects from stripe-mock's fixtures, see
fixtures/webhooks/README.md):

- `GET /v1/payment_intents/search?query=metadata['order_id']:'A-7'` (clauses `metadata['k']:'v'`
  and `status:'v'`, joined by AND), a `search_result`;
- `POST /v1/refunds` (`payment_intent` or `charge`, `amount`, `reason`, `metadata[...]`),
  `GET /v1/refunds/<id>`, and `GET /v1/refunds?payment_intent=...` (a `list`, newest first);
- Stripe's error shapes (`{"error": {"type", "code", "message", "param", "doc_url"}}`) for a
  missing key, a resource that does not exist, a charge already refunded, an amount too large,
  an unknown parameter;
- Stripe's idempotency rules for POSTs: the same key with the same parameters answers the first
  response again (a 500 too), with `Idempotent-Replayed: true`; the same key with other
  parameters is a 400 `idempotency_error`; a key still in progress is a 409; keys expire after
  24 hours; nothing is saved for a request refused before the endpoint ran (a bad key, a bad
  parameter, a rate limit);
- signed webhooks to a `/webhooks/stripe` endpoint: `charge.refunded` when a refund is created
  (its `request.idempotency_key` the key of the creating request), `refund.updated` when a
  pending refund settles (`settle`), each retried until answered 2xx, as Stripe retries.

Faults a test scripts, each for the next N matching requests or for a span of time
(`for_seconds`), and each telling its kind the way the real one does:

- `fail_next`: an answer of Stripe's API in its error shape (a card error, a 400). A 5xx is
  kept under the request's idempotency key: the same key answers it again with
  `Idempotent-Replayed: true` (and `Stripe-Should-Retry: false`, which the SDK obeys); with
  `acted`, the refund was made before the 5xx was answered;
- `rate_limit`: Stripe's 429 (`rate_limit`), refused before the endpoint ran, so nothing is
  kept and a retry with the same key runs for real; `Retry-After` when asked for;
- `unavailable`: a 503 from the load balancer in front of the API: an HTML page, no
  `Request-Id`, no Stripe headers, nothing kept under the key (the request never reached Stripe);
- `down` / `up`: the listening socket closed (connections refused) and opened again on the
  same port; a request on a connection already open is cut off unanswered;
- `hold_next`: the next refund is created and its answer held back, all of it or its body
  only, until `release` (a worker or gateway is killed with the refund done and its answer
  not yet home).
"""

from __future__ import annotations

import copy
import http.client
import json
import queue
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from wakeful.devtools.fake_stripe_api import StripeError, StripeObjects
from wakeful.devtools.fake_stripe_faults import UNAVAILABLE, Fault, Faults
from wakeful.devtools.webhooks import WebhookSender, stripe_event

DAY = 86_400
API_VERSION = "2026-10-28.endive"


@dataclass
class Seen:
    """One request the fake received."""

    method: str
    path: str
    idempotency_key: str | None
    authorized: bool
    status: int = 0
    replayed: bool = False
    front: bool = False
    """Answered by the load balancer in front of the API (`unavailable`): Stripe never saw it."""


@dataclass
class _Saved:
    fingerprint: str
    created: float
    status: int = 0
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)


class FakeStripe(StripeObjects, Faults):
    """The fake; `with FakeStripe(...) as stripe:` starts and stops it."""

    def __init__(
        self,
        api_key: str = "sk_test_fake_" + secrets.token_hex(12),
        webhook_url: str | None = None,
        webhook_secret: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.api_key = api_key
        self.webhook_url = webhook_url
        self.webhook_secret = webhook_secret
        self.offset = 0.0
        self._clock = clock
        self.payment_intents: dict[str, dict[str, Any]] = {}
        self.charges: dict[str, dict[str, Any]] = {}
        self.refunds: dict[str, dict[str, Any]] = {}
        """Every refund created, by id: what a test counts."""
        self.requests: list[Seen] = []
        self.events: list[dict[str, Any]] = []
        """Every webhook event emitted (the delivered ones are in `delivered`)."""
        self.delivered: list[tuple[str, int]] = []
        self.pending_refunds = False
        """Refunds start `pending` and settle with `settle()` (as some payment methods do)."""
        self._saved: dict[tuple[str, str], _Saved] = {}
        self._faults: list[Fault] = []
        self._front: list[Fault] = []
        self._hold: str | None = None
        self.held = threading.Event()
        self._released = threading.Event()
        self._released.set()
        self._lock = threading.RLock()
        self._outbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._unsent = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                fake._handle(self, "GET")

            def do_POST(self) -> None:
                fake._handle(self, "POST")

            def log_message(self, *_args: Any) -> None:
                return None

        self._handler = Handler
        self.server = self._listen(0)
        self.port = int(self.server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._switch = threading.Lock()
        self._serving: threading.Thread | None = None
        self._down = False
        self._closed = False
        self._up_timer: threading.Timer | None = None
        self._delivery = threading.Thread(target=self._deliver_loop, daemon=True)

    # -- lifecycle and test controls -------------------------------------------------------

    def __enter__(self) -> FakeStripe:
        self._serve()
        self._delivery.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._released.set()
        self._outbox.put(None)
        with self._switch:
            self._closed = True
            if self._up_timer is not None:
                self._up_timer.cancel()
            self._stop_serving()

    def _listen(self, port: int) -> ThreadingHTTPServer:
        server = ThreadingHTTPServer(("127.0.0.1", port), self._handler)
        server.daemon_threads = True
        return server

    def _serve(self) -> None:
        # A short poll: `shutdown()` waits for the next one (0.5 s by default, at every stop).
        self._serving = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._serving.start()

    def _stop_serving(self) -> None:
        if self._serving is not None:
            self.server.shutdown()
            self._serving = None
        self.server.server_close()

    def now(self) -> float:
        return self._clock() + self.offset

    def advance(self, seconds: float) -> None:
        """Move the fake's clock on (idempotency keys expire after 24 hours)."""
        self.offset += seconds

    def down(self, for_seconds: float | None = None) -> None:
        """Stop listening: connections are refused (as a host whose API process is gone)
        until `up()`, or for `for_seconds`. A request on a connection already open is cut
        off unanswered."""
        if for_seconds is not None and not for_seconds > 0:
            raise ValueError(f"down: for_seconds must be positive, got {for_seconds!r}")
        with self._switch:
            if self._closed:
                raise RuntimeError("the fake Stripe is stopped")
            self._down = True
            self._stop_serving()
            if self._up_timer is not None:
                self._up_timer.cancel()
                self._up_timer = None
            if for_seconds is not None:
                self._up_timer = threading.Timer(for_seconds, self.up)
                self._up_timer.daemon = True
                self._up_timer.start()

    def up(self) -> None:
        """Listen again on the same port (after `down`)."""
        with self._switch:
            if self._closed or self._serving is not None:
                return
            self.server = self._listen(self.port)
            self._down = False
            self._serve()

    @property
    def listening(self) -> bool:
        with self._switch:
            return self._serving is not None

    def hold_next(self, what: str = "answer") -> None:
        """The next refund is created, then its answer waits until `release()`: `answer`
        holds all of it, `body` sends the status and headers and holds the body."""
        assert what in ("answer", "body")
        self._released.clear()
        self.held.clear()
        self._hold = what

    def release(self) -> None:
        self._released.set()

    @property
    def quiet(self) -> bool:
        """No webhook waits to be delivered or is being delivered."""
        with self._lock:
            return self._unsent == 0

    def keys_seen(self, path: str = "/v1/refunds") -> list[str]:
        """The idempotency keys of the POSTs to `path`, repeats included, in order."""
        return [
            s.idempotency_key or ""
            for s in self.requests
            if s.method == "POST" and s.path == path and s.authorized
        ]

    # -- serving ---------------------------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        if self._down:  # a connection opened before `down`: the process is gone
            h.close_connection = True
            return
        parts = urlsplit(h.path)
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length).decode() if length else ""
        params = parse_qsl(parts.query if method == "GET" else raw, keep_blank_values=True)
        key = h.headers.get("Idempotency-Key") if method == "POST" else None
        authorized = h.headers.get("Authorization", "") == f"Bearer {self.api_key}"
        seen = Seen(method, parts.path, key, authorized)
        with self._lock:
            self.requests.append(seen)
            front = self._front_fault(method, parts.path)
        if front is not None:
            seen.front = True
            headers = {**front.headers, "Content-Type": "text/html"}
            return self._send(h, seen, 503, UNAVAILABLE, headers)
        request_id = "req_" + secrets.token_hex(7)
        headers = {"Request-Id": request_id, "Stripe-Version": API_VERSION}
        if key:
            headers["Idempotency-Key"] = key
        if not authorized:
            status, body = self._auth_error(h.headers.get("Authorization", ""))
            return self._send(h, seen, status, body, headers)
        if key is None:
            status, body, more = self._run(method, parts.path, params, request_id, None)
            more.pop("_saved", None)
            return self._send(h, seen, status, body, {**headers, **more})
        fingerprint = json.dumps([method, parts.path, sorted(params)])
        with self._lock:
            slot = (self.api_key, key)
            saved = self._saved.get(slot)
            if saved is not None and self.now() - saved.created > DAY:
                saved = None  # pruned after 24 hours: a new request
            if saved is None:
                saved = self._saved[slot] = _Saved(fingerprint, self.now())
                mine = True
            else:
                mine = False
        if not mine:
            return self._replay(h, seen, saved, fingerprint, key, headers)
        status, body, more = self._run(method, parts.path, params, request_id, key)
        if more.pop("_saved", "yes") == "no":
            with self._lock:
                self._saved.pop(slot, None)
        else:
            saved.status, saved.body = status, body
            saved.headers = {**more, "Original-Request": request_id}
            saved.done.set()
        self._send(h, seen, status, body, {**headers, **more}, hold=parts.path == "/v1/refunds")

    def _replay(
        self,
        h: BaseHTTPRequestHandler,
        seen: Seen,
        saved: _Saved,
        fingerprint: str,
        key: str,
        headers: dict[str, str],
    ) -> None:
        if saved.fingerprint != fingerprint:
            error = StripeError(
                400,
                "idempotency_error",
                "Keys for idempotent requests can only be used with the same parameters they "
                f"were first used with. Try using a key other than '{key}' if you meant to "
                "execute a different request.",
            )
            return self._send(h, seen, 400, _error(error), headers)
        if not saved.done.is_set():
            error = StripeError(
                409,
                "idempotency_error",
                "There is currently another in-progress request using this Idempotent Key "
                "(that probably means you submitted twice, and the other request is still "
                f"going through): {key}. Please try again later.",
            )
            return self._send(h, seen, 409, _error(error), headers)
        seen.replayed = True
        more = {**saved.headers, "Idempotent-Replayed": "true"}
        self._send(h, seen, saved.status, saved.body, {**headers, **more})

    def _run(
        self,
        method: str,
        path: str,
        params: list[tuple[str, str]],
        request_id: str,
        key: str | None,
    ) -> tuple[int, bytes, dict[str, str]]:
        try:
            with self._lock:
                fault = self._stripe_fault(method, path)
                if fault is not None and fault.error is not None and not fault.acted:
                    raise fault.error
                answer = self._endpoint(method, path, params, request_id, key)
                if fault is not None and fault.error is not None:
                    raise fault.error  # the work is done; the answer is the error
                return 200, _json(answer), {}
        except StripeError as exc:
            more = dict(exc.headers)
            if not exc.saved:
                more["_saved"] = "no"
            return exc.status, _error(exc), more

    def _endpoint(
        self,
        method: str,
        path: str,
        params: list[tuple[str, str]],
        request_id: str,
        key: str | None,
    ) -> dict[str, Any]:
        if method == "GET" and path == "/v1/payment_intents/search":
            return self._search(dict(params))
        if method == "POST" and path == "/v1/refunds":
            return self._refund(params, request_id, key)
        if method == "GET" and path == "/v1/refunds":
            return self._list_refunds(params)
        if method == "GET" and path.startswith("/v1/refunds/"):
            return self._get_refund(path.rsplit("/", 1)[1])
        raise StripeError(
            404,
            "invalid_request_error",
            f"Unrecognized request URL ({method}: {path}).",
            saved=False,
        )

    def _send(
        self,
        h: BaseHTTPRequestHandler,
        seen: Seen,
        status: int,
        body: bytes,
        headers: dict[str, str],
        hold: bool = False,
    ) -> None:
        seen.status = status
        hold_what = self._hold if hold else None
        if hold_what:
            self._hold = None
            self.held.set()
            if hold_what == "answer":
                self._released.wait(120)
        try:
            h.send_response(status)
            for name, value in {"Content-Type": "application/json", **headers}.items():
                h.send_header(name, value)
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.flush()
            if hold_what == "body":
                self._released.wait(120)
            h.wfile.write(body)
            h.wfile.flush()
        except OSError:
            pass  # the caller went away (killed while waiting): Stripe acted all the same

    def _auth_error(self, header: str) -> tuple[int, bytes]:
        if not header:
            message = (
                "You did not provide an API key. You need to provide your API key in the "
                "Authorization header, using Bearer auth (e.g. 'Authorization: Bearer "
                "YOUR_SECRET_KEY')."
            )
        else:
            given = header.removeprefix("Bearer ").strip()
            message = f"Invalid API Key provided: {given[:8]}{'*' * 4}{given[-4:]}"
        return 401, _error(StripeError(401, "invalid_request_error", message, saved=False))

    # -- webhooks --------------------------------------------------------------------------

    def _emit(
        self,
        kind: str,
        obj: dict[str, Any],
        request: dict[str, Any] | None,
        previous: dict[str, Any] | None = None,
    ) -> None:
        event = stripe_event(kind)
        event.update(
            created=int(self.now()),
            api_version=API_VERSION,
            livemode=False,
            pending_webhooks=1,
            request=request or {"id": None, "idempotency_key": None},
        )
        event["data"] = {"object": copy.deepcopy(obj)}
        if previous is not None:
            event["data"]["previous_attributes"] = previous
        self.events.append(event)
        if self.webhook_url:
            with self._lock:
                self._unsent += 1
            self._outbox.put(event)

    def _deliver_loop(self) -> None:
        while (event := self._outbox.get()) is not None:
            pause, deadline = 0.2, time.monotonic() + 120
            while time.monotonic() < deadline:
                # The endpoint as configured now: a restarted app may listen elsewhere.
                url = self.webhook_url or ""
                sender = WebhookSender(url, stripe_secret=self.webhook_secret, timeout=5)
                try:
                    status = sender.stripe(event).status
                except (OSError, http.client.HTTPException):  # refused, or cut off mid-answer
                    status = 0
                self.delivered.append((str(event["id"]), status))
                if 200 <= status < 300:
                    break
                time.sleep(pause)
                pause = min(pause * 2, 2.0)
            with self._lock:
                self._unsent -= 1


def _json(doc: Any) -> bytes:
    return json.dumps(doc, indent=2).encode()


def _error(exc: StripeError) -> bytes:
    return _json({"error": exc.body})
