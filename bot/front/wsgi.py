"""The HTTP front: one WSGI callable in front of Bolt, answering Slack only after the commit.

It enforces what Bolt leaves open: a body cap (413), the signature before anything is parsed
(401), a malformed body (400), 503 when the store cannot take the write, and 200 instead of
Bolt's 404 for events this app does not handle (a 404 makes Slack retry and counts toward
disabling the app's events). `GET /healthz` reports whether the store answers; `GET /metrics`
is the Prometheus text format (counters of this process and the store's gauges).
`POST /webhooks/<name>` takes signed deliveries from GitHub, Stripe and other sources
(bot/front/webhooks.py) under the same body cap; a name without a secret is a 404. In distribution
mode `GET /slack/install` and `GET /slack/oauth_redirect` are Bolt's OAuth flow.

Each Slack request is verified once and parsed once: Bolt gets the parsed body and does not
verify it again (its RequestVerification is off). The front holds the listeners (as Bolt's own
WSGI adapter holds its app); Socket Mode uses the same listeners without it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import KW_ONLY, dataclass
from typing import Any

from prometheus_client import Counter
from slack_bolt import BoltResponse
from slack_bolt.request import BoltRequest
from slack_sdk.signature import Clock

from wakeful.bot.front import payloads, store_failures
from wakeful.bot.front.listeners import Listeners
from wakeful.bot.front.signature import RequestSignature
from wakeful.bot.front.webhooks import WEBHOOKS_PATH, Webhooks
from wakeful.bot.process.config import WebhookSource
from wakeful.core import metrics, tracing
from wakeful.core.errors import StoreError

log = logging.getLogger("wakeful")
RATE_LIMITED = Counter(
    "wakeful_slack_events_rate_limited_total",
    "app_rate_limited notices: Slack held back a workspace's events past 30,000 an hour, by "
    "workspace (`all` past WAKEFUL_WORKSPACE_LABELS installations).",
    ["workspace"],
    registry=metrics.REGISTRY,
)

BODY_CAP = 1024 * 1024
"""Largest request body accepted, in bytes (413 above). Slack's payloads are far smaller."""
EVENTS_PATH = "/slack/events"
INSTALL_PATH = "/slack/install"
"""Distribution mode: the "Add to Slack" page (Bolt's install path)."""
REDIRECT_PATH = "/slack/oauth_redirect"
"""Distribution mode: where Slack sends the browser back with the code (Bolt's)."""
METRICS_PATH = "/metrics"
Environ = dict[str, Any]
_ACK_CHILDREN: dict[str, Any] = {}
StartResponse = Callable[..., Any]
Reply = tuple[str, list[tuple[str, str]], bytes]


@dataclass(eq=False)
class SlackFront:
    """Slack's HTTP requests (and webhooks, /healthz, /metrics) into core: a WSGI callable
    that checks each request before the listeners' Bolt app sees it."""

    listeners: Listeners
    """The Bolt app and its store, wake-ups, clock and signing secret, shared with webhooks."""
    _: KW_ONLY
    webhook_sources: tuple[WebhookSource, ...] = ()
    """The webhook endpoints served under /webhooks/ (Config.webhooks)."""
    workspace_label: Callable[[str], str] | None = None
    """A workspace as a metric label (bounded: `all` past WAKEFUL_WORKSPACE_LABELS)."""
    verifier_clock: Clock | None = None
    body_cap: int = BODY_CAP

    def __post_init__(self) -> None:
        held = self.listeners
        self.signature = RequestSignature(held.signing_secret, self.verifier_clock)
        self.metrics_registry = metrics.registry_for(held.store)
        self.webhooks = Webhooks(held.store, self.webhook_sources, held.wake_worker, held.clock)

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        started = time.perf_counter()
        path = environ.get("PATH_INFO") or "/"
        if tracing.ON and (path == EVENTS_PATH or path.startswith(WEBHOOKS_PATH)):
            status, headers, body = self._traced(environ, path)
        else:
            status, headers, body = self.handle(environ)
        start_response(status, headers)
        if path == EVENTS_PATH:
            code = status[:3]
            child = _ACK_CHILDREN.get(code)
            if child is None:  # looked up once per status: this runs on every request
                child = _ACK_CHILDREN[code] = metrics.ACK_SECONDS.labels(code)
            child.observe(time.perf_counter() - started)
        return [body]

    def _traced(self, environ: Environ, path: str) -> Reply:
        """`handle` inside the request's span (core/tracing.py), named as the HTTP server
        conventions name its route and status: the event it stores carries the span's trace,
        so the run and the post it causes join it."""
        slack = path == EVENTS_PATH
        attrs = {
            "http.request.method": environ.get("REQUEST_METHOD", "GET"),
            "http.route": path if slack else WEBHOOKS_PATH + "{name}",
            "wakeful.webhook": None if slack else path[len(WEBHOOKS_PATH) :],
        }
        with tracing.span("slack.request" if slack else "webhook.request", attrs, kind="server"):
            answer = self.handle(environ)
            code = int(answer[0][:3])
            tracing.note({"http.response.status_code": code}, str(code) if code >= 500 else None)
        return answer

    def handle(self, environ: Environ) -> Reply:
        path = environ.get("PATH_INFO") or "/"
        method = environ.get("REQUEST_METHOD", "GET")
        if path == "/healthz":
            return self._health()
        if path == METRICS_PATH:
            body = metrics.exposition(self.metrics_registry)
            return "200 OK", [("Content-Type", metrics.CONTENT_TYPE)], body
        if path.startswith(WEBHOOKS_PATH):
            return self._webhook(environ, path[len(WEBHOOKS_PATH) :], method)
        if path in (INSTALL_PATH, REDIRECT_PATH) and self.listeners.oauth_settings is not None:
            return self._oauth(environ, path, method)
        if path != EVENTS_PATH:
            return reply(404, "not found")
        if method != "POST":
            return reply(405, "use POST")
        data = read_body(environ, self.body_cap)
        if isinstance(data, tuple):
            return rejected(data)
        timestamp = environ.get("HTTP_X_SLACK_REQUEST_TIMESTAMP", "")
        signature = environ.get("HTTP_X_SLACK_SIGNATURE", "")
        if not self.signature.valid(data, timestamp, signature):
            return rejected(reply(401, "invalid signature or stale timestamp"))
        try:
            text = data.decode("utf-8")
            parsed = payloads.parse(text, environ.get("CONTENT_TYPE", ""))
        except (ValueError, RecursionError) as exc:
            return rejected(reply(400, f"malformed body: {str(exc)[:200]}"))
        if tracing.ON:
            tracing.note(traced(parsed))
        if parsed["type"] == "app_rate_limited":
            return self._rate_limited(parsed)
        if not payloads.handled(parsed):
            # Acknowledge what this app does not handle (Slack retries a 404 and counts it
            # toward switching the app's events off) without handing it to Bolt at all.
            return reply(200, "")
        return self._dispatch(environ, parsed)

    def _rate_limited(self, body: dict[str, Any]) -> Reply:
        """Slack held back a workspace's events (over 30,000 an hour): said and counted, by
        workspace (bounded labels); nothing is stored, nothing can be done about those."""
        team = str(body.get("team_id") or "")
        minute = body.get("minute_rate_limited")
        log.warning(
            "Slack rate-limited the Events API for workspace %s from minute %s: events of "
            "that hour past 30,000 are not delivered",
            team or "?",
            minute,
        )
        label = self.workspace_label(team) if self.workspace_label is not None else "all"
        RATE_LIMITED.labels(label).inc()
        return reply(200, "")

    def _oauth(self, environ: Environ, path: str, method: str) -> Reply:
        """The "Add to Slack" page and Slack's redirect back, through Bolt's OAuth flow (its
        state cookie and state store, its code exchange, its installation store)."""
        if method != "GET":
            return reply(405, "use GET")
        flow = self.listeners.app.oauth_flow
        assert flow is not None
        request = BoltRequest(
            body="", query=environ.get("QUERY_STRING", ""), headers={**http_headers(environ)}
        )
        try:
            if path == INSTALL_PATH:
                response = flow.handle_installation(request)
            else:
                response = flow.handle_callback(request)
        except StoreError as error:
            return reply(*store_failures.answer_to(error))
        return _bolt_reply(response)

    def _webhook(self, environ: Environ, name: str, method: str) -> Reply:
        if not self.webhooks.serves(name):
            return reply(404, "not found")  # no secret set: the endpoint does not exist
        if method != "POST":
            return reply(405, "use POST")
        data = read_body(environ, self.body_cap)
        if isinstance(data, tuple):
            metrics.count_ingest(name, "rejected")
            return data
        return reply(*self.webhooks.receive(name, http_headers(environ), data))

    def _dispatch(self, environ: Environ, body: dict[str, Any]) -> Reply:
        """Hand Bolt the request already verified and parsed: one HMAC and one parse per
        request (Bolt's own verification is off, see Listeners, and it reads this dict
        instead of the text)."""
        try:
            request = parsed_request(body, environ.get("QUERY_STRING", ""), http_headers(environ))
        except Exception as exc:  # Bolt could not read the payload's structure: bad input
            return rejected(reply(400, f"malformed body: {type(exc).__name__}"))
        try:
            response = self.listeners.app.dispatch(request)
        except StoreError as error:
            return reply(*store_failures.answer_to(error))
        if response.status == 404:
            return reply(200, "")  # an event type or payload this app does not handle
        return _bolt_reply(response)

    def _health(self) -> Reply:
        store = self.listeners.store
        ok = store.healthy()
        body = json.dumps({"ok": ok, "store": type(store.db).__name__}).encode()
        status = "200 OK" if ok else "503 Service Unavailable"
        return status, [("Content-Type", "application/json")], body


def traced(body: dict[str, Any]) -> dict[str, Any]:
    """What a Slack request's span says of it: its type, and the event's id and type, the
    command or the action pressed, and the workspace; its text only with
    WAKEFUL_OTEL_CONTENT=on (core/tracing.py `content`)."""
    event = body.get("event")
    event = event if isinstance(event, dict) else {}
    actions = body.get("actions")
    action = actions[0] if isinstance(actions, list) and actions else {}
    text = event.get("text") if event else body.get("text")
    return {
        # Each attribute costs (made, checked, encoded): an event's type says what type does.
        "wakeful.slack.type": None if event else body.get("type"),
        "wakeful.slack.event_id": body.get("event_id"),
        "wakeful.slack.event_type": event.get("type"),
        "wakeful.slack.command": body.get("command"),
        "wakeful.slack.action": action.get("action_id") if isinstance(action, dict) else None,
        **tracing.content("wakeful.slack.text", text if isinstance(text, str) else None),
    }


def _bolt_reply(response: BoltResponse) -> Reply:
    out_headers = [
        (k, v)
        for k, values in response.headers.items()
        for v in values
        if k.lower() != "content-length"
    ]
    body = (response.body or "").encode("utf-8")
    return f"{response.status} {_REASONS.get(response.status, 'OK')}", out_headers, body


def parsed_request(body: dict[str, Any], query: str, headers: dict[str, str]) -> BoltRequest:
    """A BoltRequest over a body already parsed (payloads.parse): Bolt takes a dict only in
    its Socket Mode form, which is otherwise the same request; it is marked HTTP again so
    nothing downstream mistakes it for an envelope."""
    request = BoltRequest(body=body, query=query, headers={**headers}, mode="socket_mode")
    request.mode = "http"
    return request


def http_headers(environ: Environ) -> dict[str, str]:
    """The request's headers keyed in lower case, Content-Type included: what Bolt (it wraps
    each value in a list) and the webhooks both read."""
    headers = {
        key[5:].replace("_", "-").lower(): str(value)
        for key, value in environ.items()
        if key.startswith("HTTP_")
    }
    headers["content-type"] = str(environ.get("CONTENT_TYPE", ""))
    return headers


def read_body(environ: Environ, cap: int) -> bytes | Reply:
    """The raw body, or the 400 / 413 reply when its length is bad or over `cap` bytes."""
    raw_length = environ.get("CONTENT_LENGTH") or ""
    try:
        length = int(raw_length) if raw_length else -1
    except ValueError:
        return reply(400, "bad Content-Length")
    if length > cap:
        return reply(413, f"body larger than {cap} bytes")
    data: bytes = environ["wsgi.input"].read(length if length >= 0 else cap + 1)
    if len(data) > cap:
        return reply(413, f"body larger than {cap} bytes")
    return data


_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


def rejected(answer: Reply) -> Reply:
    """A request the front refuses before the store sees it (too big, unsigned, malformed),
    counted as a rejected Slack delivery; the store counts the ones it refuses itself."""
    metrics.count_ingest("slack", "rejected")
    return answer


def reply(status: int, text: str) -> Reply:
    return (
        f"{status} {_REASONS.get(status, 'Error')}",
        [("Content-Type", "text/plain; charset=utf-8")],
        text.encode("utf-8"),
    )
