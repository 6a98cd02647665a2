"""Claude's model calls: each request with its prompt-cache breakpoints, each call a durable step
of its run, and what each one cost.

**Caching.** The request is tools (the memory tool last, always), then the system prompt and the
memory listing (claude_memory.py), then the conversation. Up to four breakpoints, the API's
most: the end of the system prompt (the stable prefix: tools and system, the same for every
inbox), the end of the memory listing (the same until this inbox's memory changes), the last
turn of the saved history (what the previous run left), and the newest turn (so the next call
of the same run, after a tool, reads everything before it). All of one run's
breakpoints share its TTL: WAKEFUL_CLAUDE_CACHE_TTL (`5m`, `1h` or `off`), except a run woken by a
digest timer firing at most an hour apart, which writes with `1h` so the next digest reads it.

**Durable calls.** Each call of a run is a step keyed by the run's events and the call's index
(`run.step(..., replay=True)`): its answer, the turn it was sent after, and the run's time are
recorded as the answer arrives. A retried run (a worker killed between calls) gets the recorded
answers back in order, replays the recorded tool results with them, and makes only the calls it
had not made. Like any step this is at-least-once: a worker killed after the answer arrived and
before it was recorded pays for that one call again.

**Streamed calls.** A call whose text a person watches (claude_live.py) uses the streaming
Messages API: each text delta is written to the reply as it arrives, and the answer recorded
is the message the SDK accumulates. A stream that ends without `message_stop` (the SDK then
gives the partial message with `stop_reason` None) is a failed call, never an answer.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import anthropic

from wakeful.agents import Event, InvalidInput, ModelUsage, OverBudget, Run, SpendBudget, tracing
from wakeful.bot.builtin.claude_memory import BETA_HEADERS, MEMORY_TOOL_SPEC
from wakeful.bot.builtin.claude_prices import Price
from wakeful.bot.builtin.common import unusable_session
from wakeful.bot.builtin.conversation import Turn


class LiveReply(Protocol):
    """Where a streamed call's text goes as it comes (claude_live.LiveReply)."""

    @property
    def stopped(self) -> bool: ...
    def begin_call(self) -> None: ...
    def block(self) -> None: ...
    def text(self, delta: str) -> None: ...
    def end_call(self) -> None: ...
    def replay(self, content: list[dict[str, Any]]) -> None: ...


log = logging.getLogger("wakeful")

CACHE_TTLS = ("5m", "1h", "off")
BEAT_EVERY = 5.0
"""Seconds between lease renewals while a call streams (it may outlast the lease)."""
DIGEST_LONG_TTL = 3600
"""A digest timer firing at most this many seconds apart writes the cache with the 1-hour TTL."""
_NOT_MARKABLE = ("thinking", "redacted_thinking")


class ModelUnavailable(RuntimeError):
    """The Messages API failed (429, 529, 5xx, timeout, connection): the run fails, so the
    worker retries its events with backoff and counts the attempt."""


class StoppedByUser(Exception):
    """The person pressed stop while this call's text streamed: the call is cut (its HTTP
    stream closed), and no other call of the run is made."""


class BudgetSpent(Exception):
    """A spend budget is spent (`Run.over_budget`): no call was made, and the run says so."""

    def __init__(self, over: OverBudget) -> None:
        super().__init__(f"{over.scope} budget spent")
        self.over = over


def cache_ttl(setting: str) -> str:
    """WAKEFUL_CLAUDE_CACHE_TTL, checked: `5m` (the default), `1h` or `off`."""
    value = setting.strip().lower() or "5m"
    if value not in CACHE_TTLS:
        raise InvalidInput(f"WAKEFUL_CLAUDE_CACHE_TTL must be 5m, 1h or off, got {setting!r}")
    return value


def batch_key(events: Sequence[Event]) -> str:
    """The run's events by their source keys: the same in every retry of the same batch."""
    raw = "\x1f".join(f"{e.source}\x1e{e.key}" for e in events)
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _marked(block: dict[str, Any], ttl: str) -> dict[str, Any]:
    control: dict[str, Any] = {"type": "ephemeral"}
    if ttl != "5m":
        control["ttl"] = ttl
    return {**block, "cache_control": control}


def _mark_last(turn: Turn, ttl: str) -> Turn:
    content = [dict(b) for b in turn.get("content") or []]
    for i in range(len(content) - 1, -1, -1):
        if content[i].get("type") not in _NOT_MARKABLE:
            content[i] = _marked(content[i], ttl)
            break
    return {**turn, "content": content}


def build_request(
    system: str, turns: list[Turn], history_end: int, ttl: str, listing: str | None = None
) -> tuple[list[dict[str, Any]], list[Turn]]:
    """The system blocks (the prompt, then the memory listing when given) and messages of one
    request with their breakpoints (`off`: none). `history_end` is the index of the last saved
    turn (-1: none); the saved turns themselves are never changed."""
    blocks = [{"type": "text", "text": t} for t in (system, listing) if t is not None]
    if ttl == "off":
        return blocks, turns
    messages = list(turns)
    last = len(messages) - 1
    if 0 <= history_end < last:
        messages[history_end] = _mark_last(messages[history_end], ttl)
    if last >= 0:
        messages[last] = _mark_last(messages[last], ttl)
    return [_marked(b, ttl) for b in blocks], messages


@dataclass
class Answer:
    """One call's answer as the run uses it."""

    message: anthropic.types.Message
    sent: Turn
    """The turn the call was sent after (a replay gets the one first sent)."""
    now: int
    """The run's time when the call was first made."""
    replayed: bool


@dataclass
class ModelCaller:
    """Makes (or replays) the calls of one agent's runs."""

    client: anthropic.Anthropic
    model: str
    max_tokens: int
    timeout: float
    system: str
    tools: list[dict[str, Any]]
    price: Price | None
    budget: SpendBudget = field(default_factory=SpendBudget)
    """WAKEFUL_CLAUDE_BUDGET_PER_PERSON_DAY / _PER_WORKSPACE_DAY, asked before each call made."""

    def call(
        self,
        run: Run,
        index: int,
        turns: list[Turn],
        history_end: int,
        ttl: str,
        now: int,
        live: LiveReply | None = None,
        listing: str | None = None,
    ) -> Answer:
        """Call `index` of this run: the recorded answer when a retry finds one, else made
        now and recorded as it arrives. Raises BudgetSpent, calling nothing, when a call
        would be made over a spend budget (a replay costs nothing, and is not asked).
        `live`: the call's text is streamed to it as it comes (a replay's, at once).
        `listing`: the memory listing, the system prompt's second block."""
        name = f"claude:{batch_key(run.events)}:call:{index}"
        made: list[ModelUsage] = []

        def make(key: str) -> dict[str, Any]:
            if (over := run.over_budget(self.budget)) is not None:
                raise BudgetSpent(over)
            request = self._request(turns, history_end, ttl, listing)
            if live is None:
                message = self._create(request)
            else:
                message = self._stream(run, request, ttl, live)
            made.append(self._usage(message, ttl))
            run.record_usage(made[0])
            return {
                "sent": turns[-1],
                "now": now,
                "model": self.model,
                "message": message.model_dump(mode="json", exclude_none=True),
            }

        with self._span(run, index, turns):
            recorded = run.step(name, make, cause=run.events[0], replay=True)
            message = anthropic.types.Message.model_validate(recorded["message"])
            tracing.note(chat_attrs(message, made[0] if made else None))
        if not made:
            run.record_usage(ModelUsage.replay(str(recorded.get("model") or self.model)))
            if live is not None:
                live.replay([b.model_dump(mode="json") for b in message.content])
        return Answer(
            message=message,
            sent=cast(Turn, recorded["sent"]),
            now=int(recorded["now"]),
            replayed=not made,
        )

    def _span(self, run: Run, index: int, turns: list[Turn]) -> AbstractContextManager[None]:
        """The call's `chat <model>` span (OpenTelemetry's GenAI conventions), a child of the
        run's agent span; the newest turn in it only with WAKEFUL_OTEL_CONTENT=on."""
        if not tracing.ON:
            return tracing.NOOP
        attrs = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "anthropic",
            "gen_ai.system": "anthropic",  # the conventions' older name, still widely read
            "gen_ai.request.model": self.model,
            "gen_ai.request.max_tokens": self.max_tokens,
            "gen_ai.conversation.id": run.inbox,
            "wakeful.call.index": index,
            **tracing.content("gen_ai.input.messages", json.dumps(turns[-1:], default=str)),
        }
        return tracing.span(f"chat {self.model}", attrs, kind="client")

    def _request(
        self, turns: list[Turn], history_end: int, ttl: str, listing: str | None = None
    ) -> dict[str, Any]:
        """The request's arguments: the memory tool after the agent's own (the tools open the
        cached prefix: their order never changes), and the beta header it is offered under."""
        system, messages = build_request(self.system, turns, history_end, ttl, listing)
        return {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "system": cast(Any, system),
            "messages": cast(Any, messages),
            "tools": cast(Any, [*self.tools, MEMORY_TOOL_SPEC]),
            "extra_headers": BETA_HEADERS,
        }

    def _create(self, request: dict[str, Any]) -> anthropic.types.Message:
        with self._failures():
            message: anthropic.types.Message = self.client.messages.create(**request)
            return message

    def _stream(
        self, run: Run, request: dict[str, Any], ttl: str, live: LiveReply
    ) -> anthropic.types.Message:
        """The call through the streaming API, its text written to `live` as it comes."""
        live.begin_call()
        beat = time.monotonic()
        with (
            self._failures(),
            self.client.messages.stream(**request) as stream,
        ):
            for event in stream:
                if time.monotonic() - beat >= BEAT_EVERY:  # a long answer keeps the lease
                    run.heartbeat()
                    beat = time.monotonic()
                if event.type == "content_block_start" and event.content_block.type == "text":
                    live.block()
                elif event.type == "text":
                    live.text(event.text)
                if live.stopped:  # the person pressed stop: bill no more tokens
                    run.record_usage(self._usage(stream.current_message_snapshot, ttl))
                    raise StoppedByUser()
            message = stream.get_final_message()
        live.end_call()
        if message.stop_reason is None:
            run.record_usage(self._usage(message, ttl))
            raise ModelUnavailable("the Claude API's stream ended before message_stop")
        return message

    @contextlib.contextmanager
    def _failures(self) -> Iterator[None]:
        """The API's failures as the run's: a refused conversation is the session's fault,
        anything else is the model's service being unavailable (retried with backoff)."""
        try:
            yield
        except (anthropic.BadRequestError, anthropic.RequestTooLargeError) as exc:
            # The request is the saved conversation plus this batch's text: when the API
            # refuses it as malformed or too large, the conversation is what is wrong.
            raise unusable_session(
                f"the Claude API refused the saved conversation ({exc.status_code}: "
                f"{_error_type(exc)})"
            ) from exc
        except anthropic.APIStatusError as exc:
            kind = _error_type(exc)
            raise ModelUnavailable(
                f"Claude API answered {exc.status_code}" + (f" ({kind})" if kind else "")
            ) from exc
        except anthropic.APITimeoutError as exc:
            raise ModelUnavailable(f"Claude API timed out after {self.timeout:g} s") from exc
        except anthropic.APIConnectionError as exc:
            raise ModelUnavailable(f"Claude API unreachable: {exc}") from exc

    def _usage(self, message: anthropic.types.Message, ttl: str) -> ModelUsage:
        """The call's tokens by kind and its estimated cost (cache writes priced by the TTL
        the API says they went to, else the one asked for)."""
        u = message.usage
        written = int(u.cache_creation_input_tokens or 0)
        split = u.cache_creation
        if split is not None:
            w5, w1 = int(split.ephemeral_5m_input_tokens), int(split.ephemeral_1h_input_tokens)
        else:
            w5, w1 = (0, written) if ttl == "1h" else (written, 0)
        read = int(u.cache_read_input_tokens or 0)
        given, output = int(u.input_tokens), int(u.output_tokens)
        cost = None if self.price is None else self.price.cost(given, output, w5, w1, read)
        return ModelUsage(
            self.model,
            input=given,
            output=output,
            cache_write=written,
            cache_read=read,
            cost=cost,
        )


def chat_attrs(message: anthropic.types.Message, used: ModelUsage | None) -> dict[str, Any]:
    """A call's answer as its span's attributes: the response, and, for a call made (`used`),
    its tokens (input counting the cache's reads and writes, as the GenAI conventions ask) and
    estimated cost; a replayed answer was not paid for again (`wakeful.replayed`)."""
    if not tracing.ON:
        return {}
    attrs: dict[str, Any] = {
        "gen_ai.response.model": message.model,
        "gen_ai.response.id": message.id,
        "gen_ai.response.finish_reasons": [message.stop_reason or "none"],
        "wakeful.replayed": used is None,
        "wakeful.cost_usd": 0.0 if used is None else used.cost,
    }
    if used is not None:
        attrs |= {
            "gen_ai.usage.input_tokens": used.input + used.cache_read + used.cache_write,
            "gen_ai.usage.output_tokens": used.output,
            "gen_ai.usage.cache_read.input_tokens": used.cache_read,
            "gen_ai.usage.cache_creation.input_tokens": used.cache_write,
        }
    said = [b.model_dump(mode="json") for b in message.content if b.type == "text"]
    return attrs | tracing.content("gen_ai.output.messages", json.dumps(said))


def log_usage(run: Run) -> None:
    """One line per run: its calls (replayed ones too) and their tokens by kind."""
    used = run.usage
    log.info(
        "claude: %s ran %d events in %d model calls (%d replayed; tokens: %d input, "
        "%d cache write, %d cache read, %d output)",
        run.inbox,
        len(run.events),
        sum(u.calls for u in used),
        sum(u.replayed for u in used),
        sum(u.input for u in used),
        sum(u.cache_write for u in used),
        sum(u.cache_read for u in used),
        sum(u.output for u in used),
    )


def _error_type(exc: anthropic.APIStatusError) -> str | None:
    """The API's own name for the failure (`invalid_request_error`, `overloaded_error` ...)."""
    error = exc.body.get("error") if isinstance(exc.body, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    return None if kind is None else str(kind)
