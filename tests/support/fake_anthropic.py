"""A local fake of the Anthropic Messages API: a real HTTP server on 127.0.0.1 (port 0) that
the real `anthropic` SDK talks to.

Each test scripts the answers in order (status code, JSON body, optional delay), or sets a
`responder` that answers each request from its body, and reads back every request body the SDK
sent, so it can assert what the model was shown: the history, the labelled batch, the tools
offered and the tool results. A request with nothing scripted for it gets a 400 and is counted
in `unscripted`, so a test cannot pass by accident. One the real API refuses (the memory tool
without its beta header, a fifth breakpoint) gets that 400, and is listed in `refused`.

Usage is computed as the real API reports it (Anthropic's prompt-caching guide): the prompt is
tools, then system, then messages, block by block; a block marked `cache_control` is a
breakpoint (at most 4, a `1h` one never after a `5m` one, else 400); the longest prefix a
breakpoint (or one of the 20 blocks before it) ends on that was written within its TTL is a
read (and its TTL starts again), each later breakpoint's prefix is written, unless the prefix
is shorter than the model's minimum cacheable length, and the rest is `input_tokens`. Tokens
are estimated as characters / 4 of each block's canonical JSON, plus the tool-use system prompt
the API adds (the real tokenizer differs; the ratios are what the tests and the bench measure).
The clock is injectable, so a simulated hour passes in no time.

A request with `"stream": true` gets the same answer as server-sent events, paced and with the
faults its `Scripted` reply names (see `fake_anthropic_stream`); `on_request` and `wait_deltas`
let a test act at a precise point of a request or of a streamed answer.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Unpack

from tests.support.fake_anthropic_stream import Deltas, StreamFaults, Writer, stream_events

_ids = itertools.count(1)

MIN_CACHEABLE = {
    "claude-opus-5": 512,
    "claude-sonnet-5": 1024,
    "claude-opus-4-8": 1024,
    "claude-opus-4-7": 2048,
    "claude-opus-4-6": 4096,
    "claude-opus-4-5": 4096,
    "claude-sonnet-4-6": 1024,
    "claude-sonnet-4-5": 1024,
    "claude-haiku-4-5": 4096,
}
"""The shortest prefix each model caches, in tokens (Anthropic's prompt-caching guide, as
reported in December 2026); any other model: `DEFAULT_MIN_CACHEABLE`."""
DEFAULT_MIN_CACHEABLE = 1024
TTLS = {"5m": 300, "1h": 3600}
LOOKBACK = 20
"""Blocks before a breakpoint where a cached prefix is still found."""
MAX_BREAKPOINTS = 4
MEMORY_BETA = "context-management-2025-06-27"
"""The beta header a request declaring the memory tool (`memory_20250818`) must carry."""
TOOL_USE_SYSTEM_PROMPT = 346
"""Tokens of the system prompt the API itself adds when a request has tools (Anthropic's
tool-use pricing table: 346 for the Claude 4 models with tool_choice auto); billed, and part of
the prompt's prefix."""


@dataclass(frozen=True)
class Scripted:
    """One reply. The fields after `headers` apply when the request asked for a stream: `pace`
    (seconds between deltas; None: the fake's `token_delay`), and, counted in deltas sent,
    `cut_after` (the body ends there, without `message_delta`/`message_stop`), `drop_after` (the
    connection drops mid-body), `error_after` (an `overloaded_error` event, as the real API sends
    mid-stream) and `hold_after` (pause until `hold` is set or the fake closes)."""

    status: int
    body: dict[str, Any]
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    pace: float | None = None
    cut_after: int | None = None
    drop_after: int | None = None
    error_after: int | None = None
    hold: threading.Event | None = None
    hold_after: int = 0

    def faults(self) -> StreamFaults:
        return StreamFaults(
            cut_after=self.cut_after,
            drop_after=self.drop_after,
            error_after=self.error_after,
            hold=self.hold,
            hold_after=self.hold_after,
        )


def message(content: list[dict[str, Any]], stop_reason: str = "end_turn") -> dict[str, Any]:
    """A Messages API response body (its usage is filled in by the fake, per request)."""
    return {
        "id": f"msg_fake{next(_ids)}",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 0, "output_tokens": 0},
    }


def text(
    answer: str, stop_reason: str = "end_turn", delay: float = 0.0, **stream: Unpack[StreamFaults]
) -> Scripted:
    content = [{"type": "text", "text": answer}] if answer else []
    return Scripted(200, message(content, stop_reason), delay, **stream)


def tool_use(
    name: str,
    args: dict[str, Any],
    tool_id: str,
    *,
    say: str = "",
    stop_reason: str = "tool_use",
    **stream: Unpack[StreamFaults],
) -> Scripted:
    content: list[dict[str, Any]] = [{"type": "text", "text": say}] if say else []
    content.append({"type": "tool_use", "id": tool_id, "name": name, "input": args})
    return Scripted(200, message(content, stop_reason), **stream)


def tool_uses(*uses: tuple[str, dict[str, Any], str], **stream: Unpack[StreamFaults]) -> Scripted:
    """Several tool_use blocks in one assistant turn."""
    content = [{"type": "tool_use", "id": i, "name": n, "input": a} for n, a, i in uses]
    return Scripted(200, message(content, "tool_use"), **stream)


ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    429: "rate_limit_error",
    500: "api_error",
    503: "api_error",
    529: "overloaded_error",
}


def error(status: int, delay: float = 0.0, text: str = "") -> Scripted:
    kind = ERROR_TYPES.get(status, "invalid_request_error")
    body = {"type": "error", "error": {"type": kind, "message": text or f"fake {kind}"}}
    headers = {"retry-after": "1"} if status == 429 else {}
    return Scripted(status, body, delay, headers)


def plain(value: Any) -> Any:
    """`value` without its cache_control markers (what a test compares against)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def system_text(request: dict[str, Any]) -> str:
    """The system prompt of a request, as one text."""
    system = request.get("system")
    if isinstance(system, list):
        return "".join(str(b.get("text", "")) for b in system)
    return str(system or "")


def tokens(value: Any) -> int:
    """The fake's token count: characters / 4 of the canonical JSON, at least 1."""
    return max(1, len(json.dumps(plain(value), sort_keys=True, ensure_ascii=False)) // 4)


class BadRequest(ValueError):
    """What the real API refuses with a 400 invalid_request_error."""


@dataclass
class Usage:
    input_tokens: int
    output_tokens: int
    cache_read: int
    cache_5m: int
    cache_1h: int

    @property
    def cache_write(self) -> int:
        return self.cache_5m + self.cache_1h

    def billed_input(self) -> float:
        """Input in input-token equivalents: writes at 1.25x (5m) / 2x (1h), reads at 0.1x."""
        return self.input_tokens + 1.25 * self.cache_5m + 2 * self.cache_1h + 0.1 * self.cache_read

    def body(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_input_tokens": self.cache_write,
            "cache_read_input_tokens": self.cache_read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": self.cache_5m,
                "ephemeral_1h_input_tokens": self.cache_1h,
            },
        }


class PromptCache:
    """The prompt cache of one organisation, as the real API keeps it (see the module's doc)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.min_cacheable = dict(MIN_CACHEABLE)
        self._entries: dict[tuple[str, str], float] = {}
        """(model, prefix hash) -> when the entry expires."""

    def usage(self, request: dict[str, Any], output: int) -> Usage:
        model = str(request.get("model") or "")
        blocks, marks = _blocks(request)
        now = self.clock()
        cum_tokens: list[int] = []
        cum_hash: list[str] = []
        total = TOOL_USE_SYSTEM_PROMPT if request.get("tools") else 0
        digest = hashlib.sha256(model.encode())
        for block in blocks:
            total += tokens(block)
            digest.update(json.dumps(plain(block), sort_keys=True, ensure_ascii=False).encode())
            cum_tokens.append(total)
            cum_hash.append(digest.copy().hexdigest())
        read_at = -1
        for at, _ in marks:
            for p in range(at, max(-1, at - LOOKBACK), -1):
                expires = self._entries.get((model, cum_hash[p]))
                if expires is not None and expires >= now:
                    read_at = max(read_at, p)
                    break
        if read_at >= 0:
            ttl = max((TTLS[t] for a, t in marks if a >= read_at), default=300)
            key = (model, cum_hash[read_at])
            self._entries[key] = max(self._entries[key], now + ttl)
        least = self.min_cacheable.get(model, DEFAULT_MIN_CACHEABLE)
        read = cum_tokens[read_at] if read_at >= 0 else 0
        written = {"5m": 0, "1h": 0}
        upto = read
        for at, mark_ttl in marks:
            if at <= read_at or cum_tokens[at] < least:
                continue  # read already, or too short to be cached at all
            written[mark_ttl] += cum_tokens[at] - upto
            upto = cum_tokens[at]
            key = (model, cum_hash[at])
            self._entries[key] = max(self._entries.get(key, 0.0), now + TTLS[mark_ttl])
        input_tokens = (cum_tokens[-1] if cum_tokens else 0) - upto
        return Usage(input_tokens, output, read, written["5m"], written["1h"])


def _blocks(request: dict[str, Any]) -> tuple[list[Any], list[tuple[int, str]]]:
    """The prompt's blocks in the API's order (tools, system, messages) and its breakpoints:
    (block index, ttl), checked as the API checks them."""
    blocks: list[Any] = []
    marks: list[tuple[int, str]] = []

    def add(block: Any, role: str | None = None) -> None:
        if isinstance(block, dict) and "cache_control" in block:
            control = block["cache_control"]
            if not isinstance(control, dict) or control.get("type") != "ephemeral":
                raise BadRequest("cache_control.type: Input should be 'ephemeral'")
            ttl = control.get("ttl", "5m")
            if ttl not in TTLS:
                raise BadRequest("cache_control.ttl: Input should be '5m' or '1h'")
            marks.append((len(blocks), ttl))
        blocks.append({"role": role, "block": block} if role else block)

    for tool in request.get("tools") or []:
        add(tool)
    system = request.get("system")
    if isinstance(system, str) and system:
        add({"type": "text", "text": system})
    elif isinstance(system, list):
        for b in system:
            add(b)
    for turn in request.get("messages") or []:
        content = turn.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for b in content or []:
            add(b, str(turn.get("role")))
    top = request.get("cache_control")
    if isinstance(top, dict) and blocks:
        marks.append((len(blocks) - 1, str(top.get("ttl", "5m"))))
    if len(marks) > MAX_BREAKPOINTS:
        raise BadRequest(
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {len(marks)}."
        )
    seen_5m = False
    for _, ttl in marks:
        if ttl == "1h" and seen_5m:
            raise BadRequest(
                "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block"
            )
        seen_5m = seen_5m or ttl == "5m"
    return blocks, marks


Responder = Callable[[dict[str, Any]], Scripted | None]


class FakeAnthropic:
    """POST /v1/messages answered from a queue of scripted replies (or a responder), with
    usage computed by a prompt cache of its own; streamed when the request asks for a stream."""

    def __init__(self, clock: Callable[[], float] = time.time, token_delay: float = 0.0) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.usages: list[Usage] = []
        """The usage reported for each answered request, in order."""
        self.unscripted = 0
        self.refused: list[str] = []
        """What the fake refused as the real API would (400s the script did not ask for)."""
        self.cache = PromptCache(clock)
        self.responder: Responder | None = None
        self.token_delay = token_delay
        """Seconds between two deltas of a streamed answer (a reply's `pace` overrides it)."""
        self.on_request: Callable[[dict[str, Any]], None] | None = None
        """Called with each request's body as it arrives, before any answer."""
        self.deltas = Deltas()
        self._script: deque[Scripted] = deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                if self.path.split("?")[0] != "/v1/messages":
                    self._send(404, {"type": "error", "error": {"type": "not_found_error"}}, {})
                    return
                headers = {k.lower(): v for k, v in self.headers.items()}
                request = json.loads(raw)
                if fake.on_request is not None:
                    fake.on_request(request)
                with fake._lock:
                    fake.requests.append(request)
                    fake.headers.append(headers)
                    refused = _refusal(request, headers)
                    reply = None
                    if refused is None:
                        reply = fake._next(request)
                        if reply is None:
                            fake.unscripted += 1
                    else:
                        fake.refused.append(refused.body["error"]["message"])
                if refused is not None:
                    self._send(refused.status, refused.body, {})
                    return
                if reply is None:
                    body = {"type": "error", "error": {"type": "unscripted", "message": "no reply"}}
                    self._send(400, body, {})
                    return
                if reply.delay:
                    fake._closing.wait(reply.delay)
                answer = reply.body
                if reply.status == 200:
                    answer = fake._with_usage(request, reply.body)
                    if request.get("stream") is True:
                        self._stream(reply, answer)
                        return
                self._send(reply.status, answer, reply.headers)

            def _stream(self, reply: Scripted, answer: dict[str, Any]) -> None:
                try:
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream; charset=utf-8")
                    self.send_header("transfer-encoding", "chunked")
                    self.send_header("cache-control", "no-cache")
                    self.send_header("request-id", f"req_fake{next(_ids)}")
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                except OSError:
                    return
                slot = fake.deltas.start()
                pace = fake.token_delay if reply.pace is None else reply.pace
                writer = Writer(
                    self.wfile,
                    pace=pace,
                    closing=fake._closing,
                    sent=lambda: fake.deltas.one_more(slot),
                    faults=reply.faults(),
                )
                if not writer.write(stream_events(answer)):
                    self.close_connection = True

            def _send(self, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
                data = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.send_header("request-id", f"req_fake{next(_ids)}")
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up (its timeout): nothing to answer

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            block_on_close = False

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that hung up mid-answer is part of the timeout tests

        self.server = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def _next(self, request: dict[str, Any]) -> Scripted | None:
        if self._script:
            return self._script.popleft()
        return self.responder(request) if self.responder is not None else None

    def _with_usage(self, request: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        """The scripted answer with the usage the real API would report for this request."""
        answer: dict[str, Any] = json.loads(json.dumps(body))
        answer["id"] = f"msg_fake{next(_ids)}"
        answer["model"] = request.get("model", answer.get("model"))
        with self._lock:
            usage = self.cache.usage(request, tokens(answer.get("content") or []))
            self.usages.append(usage)
        answer["usage"] = usage.body()
        return answer

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def calls(self) -> int:
        """Requests received (answered or not)."""
        with self._lock:
            return len(self.requests)

    def script(self, *replies: Scripted) -> None:
        with self._lock:
            self._script.extend(replies)

    def wait_deltas(self, n: int, timeout: float, reply: int | None = None) -> bool:
        """True once streamed reply `reply` (0 the first; None the latest started) has sent `n`
        deltas, False after `timeout` seconds. With None, a reply not started yet is not seen:
        wait for an earlier point (`on_request`, `calls`) first when replies follow each other."""
        return self.deltas.wait(n, timeout, reply)

    @property
    def left(self) -> int:
        """Scripted replies not yet used."""
        with self._lock:
            return len(self._script)

    def close(self) -> None:
        self._closing.set()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)


def _refusal(request: dict[str, Any], headers: dict[str, str]) -> Scripted | None:
    """A 401 or 400 where the real API refuses the request before any model runs."""
    key = headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")
    if not key.strip():
        return error(401, text="invalid x-api-key")
    if not headers.get("anthropic-version"):
        return error(400, text="anthropic-version: header is required")
    for name in ("model", "max_tokens", "messages"):
        if name not in request:
            return error(400, text=f"{name}: Field required")
    betas = {b.strip() for b in headers.get("anthropic-beta", "").split(",")}
    for i, tool in enumerate(request.get("tools") or []):
        if tool.get("type") == "memory_20250818" and MEMORY_BETA not in betas:
            return error(
                400, text=f"tools.{i}: the memory tool needs anthropic-beta: {MEMORY_BETA}"
            )
    try:
        _blocks(request)
    except BadRequest as exc:
        return error(400, text=str(exc))
    return None
