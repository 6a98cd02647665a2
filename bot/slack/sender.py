"""Outbox parts to Slack Web API calls. The dispatcher's side of the token: nothing else in
wakeful posts to Slack.

Posts carry message metadata (`wakeful_dispatch` with the part id), so when a batch is retried
after a crash or a timeout the sender first looks in the conversation for that id and never posts
the same part twice. Only posts can be looked up: an update, a Home view or an assistant status
sent again rewrites the same thing (harmless); an ephemeral or a slash command's answer cannot be
found, but the dispatcher records each part the moment it is sent, so a retry repeats one only
when its dispatcher died between Slack's answer and that commit. Slack errors map to core's
transient / permanent failures.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import urllib.error
from collections.abc import Callable
from http.client import HTTPException
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.webhook import WebhookClient

from wakeful.bot.slack.kinds import NOTICE, SLACK_KINDS
from wakeful.bot.slack.refusals import notice_for
from wakeful.bot.slack.streams import end_segment
from wakeful.bot.slack.web_client import KeepAliveWebClient, WithToken, error_code
from wakeful.core import metrics
from wakeful.core.errors import PermanentSendError, TransientSendError
from wakeful.core.inbox_id import InboxId
from wakeful.core.kinds import STREAM
from wakeful.core.rules.outbox import Part

log = logging.getLogger("wakeful.sender")
_RESPONSE_URL_LOG = logging.getLogger("wakeful.sender.response_url")
_RESPONSE_URL_LOG.setLevel(logging.INFO)
"""slack_sdk's WebhookClient logs each request's URL at DEBUG; a slash command's response_url
is a bearer credential for 30 minutes, so its client logs through this logger, which never
writes DEBUG lines."""
EVENT_TYPE = "wakeful_dispatch"
PER_CHANNEL_INTERVAL = 1.0  # Slack: about one message per second per channel
TRANSIENT_ERRORS = frozenset(
    {
        "ratelimited",
        "rate_limited",
        "internal_error",
        "fatal_error",
        "service_unavailable",
        "request_timeout",
        "team_added_to_org",
        "timeout",
    }
)
LOOKBACK = 200
TOKEN_ERRORS = frozenset({"token_expired", "invalid_auth", "token_revoked", "account_inactive"})
"""Slack refused the token itself: in distribution mode its workspace is read again (a
refreshed token is used; a workspace whose installation ended has its rows parked)."""


def make_client(token: str, api_url: str, timeout: int = 10) -> KeepAliveWebClient:
    """A WebClient with no automatic retries (a blind retry of chat.postMessage can post
    twice; the outbox retries instead, after looking for the earlier attempt) that keeps one
    HTTP connection per thread instead of opening one per call."""
    return KeepAliveWebClient(token=token, base_url=api_url, timeout=timeout, retry_handlers=[])


class SlackSender:
    """Implements core's Sender with slack_sdk."""

    def __init__(
        self,
        client: WebClient,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        interval: float = PER_CHANNEL_INTERVAL,
        tokens: Callable[[str | None], str] | None = None,
        forget: Callable[[str | None], None] | None = None,
    ) -> None:
        self.client = client
        self.tokens = tokens
        """Distribution mode: the bot token of the workspace a part's inbox belongs to (the
        installation's own; raising PermanentSendError when it has none, so the row is
        parked with the reason). None: `client`'s one token for every call."""
        self.forget = forget
        """Told the team whose token Slack refused, so the next call reads it again."""
        self._sleep = sleep
        self._clock = clock
        self._interval = interval
        self._last_post: dict[str, float] = {}
        """Per channel: when its latest post was (or is reserved to be) made."""
        self._turns: dict[str, float] = {}
        # When each channel's last post actually went: a turn taken on time but reached late (a
        # busy machine) must not bring the next post closer than the interval to it.
        self._went: dict[str, float] = {}
        """Turns taken by `reserve`, by part id: when that part's post may go."""
        self._lock = threading.Lock()
        self._assistant_off: set[str] = set()

    def send(self, part: Part) -> str | None:
        team = InboxId(part.inbox).team
        try:
            client = self._client(team)
            if part.kind == "update":
                return self._update(part, client)
            if part.kind == "ephemeral" and part.ref:
                return self._respond(part, client)  # a command's answer: its response_url first
            if part.kind == "ephemeral":
                return self._ephemeral(part, client)
            if part.kind == "respond":
                return self._respond(part, client)  # rows written before 0.2
            if part.kind == "home":
                return self._home(part, client)
            if part.kind in ("status", "prompts"):
                return self._assistant(part, client)
            if part.kind == NOTICE.name:
                return self._notice(part, client)
            if part.kind == STREAM.name:
                return end_segment(
                    client, part.channel, part.ref or "", part.text, part.blocks, part.facts
                )
            if part.retry or (part.look_first and part.answers):
                found = self.find_posted(part, client)
                if found is not None:
                    with self._lock:
                        self._turns.pop(part.part_id, None)
                    log.info("part %s already posted as %s; not posting again", part.part_id, found)
                    return found
            return self._post(part, client)
        except SlackApiError as exc:
            failure = classify(exc)
            count_error(exc)
            error = error_code(exc)
            if self.forget is not None and error in TOKEN_ERRORS:
                self.forget(team)  # read the installation again: refreshed, or gone
                if error == "token_expired":
                    raise TransientSendError("token_expired", retry_after=1) from exc
            if isinstance(failure, PermanentSendError):
                failure.notice = notice_for(part, error)
            raise failure from exc
        except (
            urllib.error.URLError,
            TimeoutError,
            ConnectionError,
            HTTPException,
            OSError,
        ) as exc:
            metrics.SLACK_ERRORS.labels(_METHODS.get(part.kind, "unknown"), "network").inc()
            raise TransientSendError(f"network: {exc}", retry_after=5) from exc

    def workspace_of(self, part: Part) -> str:
        """Whose Web API limits a part counts against (the dispatcher pauses by it): its
        workspace in distribution mode, else one for all."""
        if self.tokens is None:
            return ""
        return InboxId(part.inbox).team or "-"

    def _client(self, team: str | None) -> Any:
        """The client a part's calls go through: the one client, or (distribution mode) the
        same client with the token of the part's workspace on every call."""
        if self.tokens is None:
            return self.client
        return WithToken(self.client, self.tokens(team))

    def reserve(self, part: Part) -> float:
        """Take `part`'s turn in its channel's pace and return the seconds until it comes (0:
        now). Its `send` then posts at that turn instead of taking another, so a dispatcher can
        wait for the turn without holding a thread. Only posts are paced: anything else has no
        turn to wait for."""
        if not SLACK_KINDS.paced(part.kind):  # not a post in the conversation: no pace applies
            return 0.0
        with self._lock:
            now = self._clock()
            if len(self._turns) > 10_000:  # turns reserved but never used (a batch given up)
                self._turns = {k: at for k, at in self._turns.items() if at > now - 60}
            at = self._turns[part.part_id] = self._take_turn(part.channel, now)
        return max(0.0, at - now)

    def _take_turn(self, channel: str, now: float) -> float:
        """The next free turn of `channel`, taken (call with the lock held)."""
        last = self._last_post.get(channel)
        at = now if last is None else max(now, last + self._interval)
        self._last_post[channel] = at
        return at

    def _pace(self, part: Part) -> None:
        """Wait for the part's turn: the one it reserved, or the next free one, and never less
        than the interval after the channel's previous post actually went."""
        channel = part.channel
        with self._lock:
            now = self._clock()
            at = self._turns.pop(part.part_id, None)
            if at is None:
                at = self._take_turn(channel, now)
            went = self._went.get(channel)
            if went is not None and at < went + self._interval:
                at = went + self._interval
                self._last_post[channel] = max(self._last_post.get(channel, at), at)
        if at > now:
            self._sleep(at - now)
        with self._lock:
            self._went[channel] = max(at, self._clock())

    def _post(self, part: Part, client: Any) -> str | None:
        self._pace(part)
        payload = {"dispatch_id": part.dispatch_id, "part_id": part.part_id}
        if part.answers:
            # One string (Slack's payload values are scalars or objects): the events it answers.
            payload["answers"] = json.dumps(list(part.answers))
        if part.ref:
            payload["prompt"] = "1"  # an approval prompt: found only as a prompt (it is rewritten)
        metadata = {"event_type": EVENT_TYPE, "event_payload": payload}
        response = client.chat_postMessage(**_content(part, threaded=True), metadata=metadata)
        ts = response.get("ts")
        return None if ts is None else str(ts)

    def _notice(self, part: Part, client: Any) -> str | None:
        """A word to one person (bot/slack/refusals.py), in their DM with the bot: chat.postMessage
        to the user's id opens it. Not paced (the DM is not the refused channel)."""
        response = client.chat_postMessage(channel=part.user or part.channel, text=part.text)
        ts = response.get("ts")
        return None if ts is None else str(ts)

    def _update(self, part: Part, client: Any) -> str | None:
        if not part.target_ts:
            raise PermanentSendError("an update needs the posted prompt's ts")
        client.chat_update(**_content(part, threaded=False), ts=part.target_ts)
        return part.target_ts

    def _ephemeral(self, part: Part, client: Any) -> str | None:
        if not part.user:
            raise PermanentSendError("an ephemeral needs the user who sees it")
        response = client.chat_postEphemeral(**_content(part, threaded=True), user=part.user)
        ts = response.get("message_ts")
        return None if ts is None else str(ts)

    def _respond(self, part: Part, client: Any) -> str | None:
        """A slash command's answer, to the caller alone: through its response_url while that
        works (Slack honours it 5 times within 30 minutes), else chat.postEphemeral. A part
        whose facts say `replace_original` (a click's answer, core/privacy.py) rewrites the
        message the click came from in place, its buttons gone; if the URL fails, the words
        still reach the person as a new ephemeral."""
        if part.ref:
            replace = isinstance(part.facts, dict) and part.facts.get("replace_original") is True
            try:
                answer = WebhookClient(part.ref, timeout=10, logger=_RESPONSE_URL_LOG).send(
                    text=part.text,
                    blocks=part.blocks,
                    response_type=None if replace else "ephemeral",
                    replace_original=True if replace else None,
                )
                if answer.status_code == 200:
                    return None
                log.info("response_url answered %s; posting ephemerally", answer.status_code)
            except (urllib.error.URLError, OSError, HTTPException) as exc:
                log.info("response_url failed (%s); posting ephemerally", exc)
        return self._ephemeral(part, client)

    def _home(self, part: Part, client: Any) -> str | None:
        """Publish a person's Home tab (only the latest view of a batch reaches here)."""
        if not part.user:
            raise PermanentSendError("a Home view needs the user it belongs to")
        view = {"type": "home", "blocks": part.blocks or []}
        client.views_publish(user_id=part.user, view=view)
        return None

    def _assistant(self, part: Part, client: Any) -> str | None:
        """A conversation's "is thinking…" status (its loading messages in `blocks`) or the
        suggested prompts of the Messages tab (no thread) or an assistant thread. An app or a
        conversation that may not have them answers with a refusal: logged once, and the part
        counts as done, so a workspace without the feature simply shows nothing."""
        try:
            if part.kind == "status":
                loading = [str(b["loading"]) for b in part.blocks or [] if b.get("loading")]
                client.assistant_threads_setStatus(
                    channel_id=part.channel,
                    thread_ts=part.thread_ts,
                    status=part.text,
                    loading_messages=loading or None,
                )
            else:
                client.assistant_threads_setSuggestedPrompts(
                    channel_id=part.channel,
                    thread_ts=part.thread_ts or None,
                    title=part.text,
                    prompts=part.blocks or [],
                )
        except SlackApiError as exc:
            count_error(exc)
            error = str(exc.response.get("error") or "")
            if error in TRANSIENT_ERRORS or getattr(exc.response, "status_code", 200) >= 500:
                raise
            if error not in self._assistant_off:
                self._assistant_off.add(error)
                log.warning(
                    "assistant thread %s not shown (%s); carrying on without", part.kind, error
                )
        return None

    def find_posted(self, part: Part, client: Any = None) -> str | None:
        """The ts of a message already carrying this part's id, among the recent ones; or,
        for a part to look for first (after a restore), one naming any event it answers: the
        copy's run was posted before the copy was restored, under another dispatch."""
        answers = set(part.answers) if part.look_first else set()
        client = self._client(InboxId(part.inbox).team) if client is None else client
        seen = 0
        cursor: str | None = None
        while seen < LOOKBACK:
            kwargs: dict[str, Any] = {
                "channel": part.channel,
                "limit": 100,
                "include_all_metadata": True,
            }
            if cursor:
                kwargs["cursor"] = cursor
            if part.thread_ts:
                response = client.conversations_replies(ts=part.thread_ts, **kwargs)
            else:
                response = client.conversations_history(**kwargs)
            messages = response.get("messages") or []
            for message in messages:
                meta = message.get("metadata") or {}
                payload = meta.get("event_payload") or {}
                if meta.get("event_type") != EVENT_TYPE:
                    continue
                if payload.get("part_id") == part.part_id:
                    return str(message.get("ts"))
                if _answers(payload) & answers and bool(payload.get("prompt")) == bool(part.ref):
                    return str(message.get("ts"))
            seen += len(messages)
            cursor = ((response.get("response_metadata") or {}).get("next_cursor")) or None
            if not cursor or not messages:
                return None
        return None


def _answers(payload: dict[str, Any]) -> set[str]:
    """The event keys a post's metadata names (none when unreadable: not ours to judge)."""
    try:
        keys = json.loads(str(payload.get("answers") or "[]"))
    except ValueError:
        return set()
    return {str(k) for k in keys} if isinstance(keys, list) else set()


def _content(part: Part, threaded: bool) -> dict[str, Any]:
    """channel, text, and blocks / thread_ts when the part has them: what every call sends.
    Never `link_names` or `parse`: they would turn the plain words of an escaped text back
    into pings (bot/slack/text.py)."""
    kwargs: dict[str, Any] = {"channel": part.channel, "text": part.text}
    if part.blocks is not None:
        kwargs["blocks"] = part.blocks
    if threaded and part.thread_ts:
        kwargs["thread_ts"] = part.thread_ts
    return kwargs


_METHODS = {
    "post": "chat.postMessage",
    "digest": "chat.postMessage",
    "update": "chat.update",
    "ephemeral": "chat.postEphemeral",
    "respond": "chat.postEphemeral",
    "home": "views.publish",
    "status": "assistant.threads.setStatus",
    "prompts": "assistant.threads.setSuggestedPrompts",
    "notice": "chat.postMessage",
    "stream": "chat.stopStream",
}
_ERROR_CODE = re.compile(r"[a-z0-9_]{1,60}")
_METHOD_NAME = re.compile(r"[a-z]+(\.[A-Za-z]+){1,2}")
"""A Web API method's name (`chat.postMessage`, `assistant.threads.setStatus`): anything else
is counted as `unknown`, so an odd URL never makes a new series."""


def count_error(exc: SlackApiError) -> None:
    """One failed Web API call in the metrics, by method and Slack's error code."""
    response = exc.response
    method = str(getattr(response, "api_url", "") or "").rstrip("/").rsplit("/", 1)[-1]
    status = getattr(response, "status_code", 200)
    error = str(response.get("error") if hasattr(response, "get") else "") or f"http_{status}"
    if not _ERROR_CODE.fullmatch(error):
        error = "other"  # never a new series per odd answer
    known = _METHOD_NAME.fullmatch(method) is not None
    metrics.SLACK_ERRORS.labels(method if known else "unknown", error).inc()


def classify(exc: SlackApiError) -> TransientSendError | PermanentSendError:
    """429 / 5xx / Slack's own transient codes -> transient; anything else -> permanent."""
    response = exc.response
    status = getattr(response, "status_code", 200)
    error = str(response.get("error") if hasattr(response, "get") else "") or f"http {status}"
    if status == 429 or error in ("ratelimited", "rate_limited"):
        headers = getattr(response, "headers", {}) or {}
        raw = headers.get("Retry-After") or headers.get("retry-after") or "1"
        try:
            retry_after = int(float(raw))
        except ValueError:
            retry_after = 1
        return TransientSendError(f"rate limited ({error})", retry_after=max(1, retry_after))
    if status >= 500 or error in TRANSIENT_ERRORS:
        return TransientSendError(f"slack {status}: {error}", retry_after=5)
    if error == "missing_scope":
        needed = response.get("needed") if hasattr(response, "get") else None
        return PermanentSendError(f"missing_scope: add the {needed} scope to the app")
    return PermanentSendError(error)
