"""Bolt's side of the front: the listeners that turn Slack requests into core calls.

The Bolt app is built with `process_before_response=True`, so a listener finishes (the insert
has committed) before the acknowledgement leaves: messages, mentions and the forget prompt's
clicks go to `ingest`, Approve / Deny clicks to `answer`. Listeners only write to the store; the
dispatcher holds the token. The HTTP front (bot/front/wsgi.py) holds them; Socket Mode uses
them as they are.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from slack_bolt import Ack, App, BoltContext, BoltRequest, BoltResponse
from slack_bolt.oauth.oauth_settings import OAuthSettings
from slack_sdk import WebClient

from wakeful.bot.front import payloads, socket_mode, store_failures
from wakeful.bot.front.authorize import InstallationsAuthorize, OneWorkspace
from wakeful.bot.front.store_contract import FrontStore
from wakeful.bot.slack import blocks
from wakeful.bot.slack.events import AssistantThreadStarted, Feedback, HomeOpened, MessagesTabOpened
from wakeful.bot.slack.installations import StoreInstallations
from wakeful.core import metrics
from wakeful.core.effects import Post
from wakeful.core.errors import InvalidInput, StoreError, StoreUnavailable
from wakeful.core.events import Command, Event, ForgetAnswer
from wakeful.core.inbox_id import InboxId
from wakeful.core.loops import Kicker, Wakeup
from wakeful.core.store.installations import Status
from wakeful.core.tenancy import Workspace, is_approver

log = logging.getLogger("wakeful")
IGNORED_SUBTYPES = frozenset({"message_changed", "message_deleted", "bot_message"})
ACCEPTED_SUBTYPES = frozenset({None, "file_share", "thread_broadcast", "me_message"})
Said = Literal["forget", "cancel"]
"""A `ForgetAnswer`'s answer."""
THREAD_CHANNEL_TYPES = frozenset({"channel", "group", "mpim"})
"""Where only replies in the bot's threads reach the agent (message.channels / .groups /
.mpim); in a DM (`im`) every message does."""


@dataclass(eq=False)
class Listeners:
    """Slack events and clicks into the store, each acknowledged only after its commit."""

    store: FrontStore
    signing_secret: str
    bot_user_id: str = ""
    bot_id: str = ""
    wake_worker: Kicker = field(default_factory=Wakeup)
    """Kicked when an event is stored."""
    wake_dispatcher: Kicker = field(default_factory=Wakeup)
    """Kicked when a reply is queued."""
    clock: Callable[[], int] = field(default=lambda: int(time.time()))
    approvers: tuple[str, ...] = ()
    """WAKEFUL_APPROVERS: who may answer the approvals of their workspace (checked when the
    click arrives, so a removal takes effect on approvals already open) and see and press
    the Home tab's Requeue there (core/tenancy.py `is_approver`)."""
    authorizer: InstallationsAuthorize | None = None
    """Who the bot is in the request's workspace: None is the one workspace of
    SLACK_BOT_TOKEN (`bot_user_id`, `bot_id`); distribution mode passes the installation
    store's (bot/slack/workspaces.py), whose `note_org_team` runs on every request."""
    installations: StoreInstallations | None = None
    """Distribution mode: where tokens_revoked and app_uninstalled end an installation."""
    oauth_settings: OAuthSettings | None = None
    """Distribution mode: Bolt's OAuth flow (/slack/install, /slack/oauth_redirect)."""
    client: WebClient | None = None
    """The Web API client Bolt's OAuth flow exchanges codes with (SLACK_API_URL)."""

    def __post_init__(self) -> None:
        authorize: Any = self.authorizer or OneWorkspace(self.bot_user_id, self.bot_id)
        bolt_log = logging.getLogger("wakeful.bolt")
        bolt_log.addFilter(_quiet_token_notice)
        self.app = App(
            signing_secret=self.signing_secret,
            process_before_response=True,
            authorize=authorize,
            logger=bolt_log,
            # The front verified the signature and parsed the body already (bot/front/wsgi.py);
            # Socket Mode needs no signature. Bolt does neither again.
            request_verification_enabled=False,
            # say / set_status helpers for assistant threads: the listeners only store.
            attaching_conversation_kwargs_enabled=False,
            oauth_settings=self.oauth_settings,
            client=self.client,
        )
        if self.authorizer is not None:  # distribution mode (bot/slack/workspaces.py)
            self.app.use(self.authorizer.note_org_team)
        self.app.event("message")(self._on_message)
        self.app.event("app_mention")(self._on_mention)
        self.app.action(blocks.APPROVE)(self._on_approve)
        self.app.action(blocks.DENY)(self._on_deny)
        self.app.action(payloads.REQUEUE)(self._on_requeue)
        self.app.action(payloads.FEEDBACK)(self._on_feedback)
        self.app.action(payloads.FORGET)(self._on_forget)
        self.app.action(payloads.FORGET_CANCEL)(self._on_forget)
        self.app.command(payloads.COMMAND)(self._on_command)
        self.app.event("app_home_opened")(self._on_home_opened)
        self.app.event("assistant_thread_started")(self._on_assistant_thread)
        self.app.event("tokens_revoked")(self._on_tokens_revoked)
        self.app.event("app_uninstalled")(self._on_uninstalled)
        self.app.error(self._on_error)

    def on_socket_request(self, client: Any, req: Any) -> None:
        """A Socket Mode envelope (a SocketModeClient listener): these listeners without the
        HTTP front, which Socket Mode does not need (bot/front/socket_mode.py)."""
        socket_mode.on_request(self.app, client, req)

    def _is_ours_or_noise(self, event: dict[str, Any], me: str | None = None) -> bool:
        """The bot's own message (`me`: its user id in the request's workspace), an edit or
        deletion, or anything without a person behind it."""
        me = me or self.bot_user_id
        user = event.get("user")
        return (
            bool(event.get("bot_id"))
            or event.get("subtype") in IGNORED_SUBTYPES
            or event.get("subtype") not in ACCEPTED_SUBTYPES
            or not isinstance(user, str)
            or not user
            or (bool(me) and user == me)
        )

    def _ingest(
        self, body: dict[str, Any], event: dict[str, Any], mention: bool, me: str | None
    ) -> None:
        event_id, said = payloads.said(body, event, mention, me or self.bot_user_id)
        self._store(InboxId.person(said.team, said.user), event_id, said)

    def _store(self, inbox: str, key: str, event: Event) -> bool:
        """Store a typed event in `inbox` under Slack's key; the worker is woken for it.
        False: that key was stored before (Slack's retry, a double click)."""
        if self.store.ingest(inbox, "slack", key, event.to_wire(), self.clock()).stored:
            self.wake_worker.kick()
            return True
        return False

    def _on_message(
        self, ack: Ack, body: dict[str, Any], event: dict[str, Any], context: BoltContext
    ) -> None:
        me = context.bot_user_id
        if not self._is_ours_or_noise(event, me) and (
            event.get("channel_type") == "im" or self._follows_up(event, me)
        ):
            self._ingest(body, event, mention=False, me=me)
        ack()

    def _follows_up(self, event: dict[str, Any], me: str | None = None) -> bool:
        """A reply in a channel, private channel or group DM thread the bot posted in or was
        mentioned in. Everything else there is acknowledged and dropped: one read by key, no
        write. A reply that mentions the bot is left to its `app_mention` (stored once)."""
        thread, channel = event.get("thread_ts"), event.get("channel")
        if event.get("channel_type") not in THREAD_CHANNEL_TYPES:
            return False
        if not isinstance(thread, str) or not isinstance(channel, str) or thread == event.get("ts"):
            return False
        me = me or self.bot_user_id
        if me and f"<@{me}>" in str(event.get("text") or ""):
            return False
        return self.store.takes_part(channel, thread)

    def _on_mention(
        self, ack: Ack, body: dict[str, Any], event: dict[str, Any], context: BoltContext
    ) -> None:
        if not self._is_ours_or_noise(event, context.bot_user_id):
            self._ingest(body, event, mention=True, me=context.bot_user_id)
            # The reply goes in the mention's thread (or starts one under it): the replies
            # that follow there reach the agent without another mention.
            thread, channel = event.get("thread_ts") or event.get("ts"), event.get("channel")
            if isinstance(thread, str) and isinstance(channel, str) and thread:
                self.store.remember_thread(channel, thread, "mentioned", self.clock())
        ack()

    def _on_command(self, ack: Ack, body: dict[str, Any], request: BoltRequest) -> None:
        """`/wakeful …`, stored as an inbox event before the ack and answered ephemerally by
        the agent through the outbox. Its key does not depend on the trigger_id: team, user,
        the request's X-Slack-Request-Timestamp (in Socket Mode the envelope id) and a hash of
        the text, so a retry of the same request stores nothing new."""
        team, user = body.get("team_id"), body.get("user_id")
        channel, text = body.get("channel_id"), str(body.get("text") or "")
        stamp = (
            request.headers.get("x-slack-request-timestamp")
            or request.headers.get("x-wakeful-envelope-id")  # Socket Mode
            or [""]
        )[0]
        if not all(isinstance(v, str) and v for v in (team, user, channel, stamp)):
            raise InvalidInput("slash command lacks team_id, user_id, channel_id or timestamp")
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        key = f"command:{team}:{user}:{stamp}:{digest}"
        command = Command(
            command=str(body.get("command") or ""),
            text=text,
            user=str(user),
            team=str(team),
            channel=str(channel),
            response_url=str(body.get("response_url") or "") or None,
        )
        self._store(InboxId.person(str(team), str(user)), key, command)
        ack()

    def _on_home_opened(self, ack: Ack, body: dict[str, Any], event: dict[str, Any]) -> None:
        """The Home tab was opened: a run of the person's inbox refreshes it (its hooks). The
        Messages tab (the DM with the app, Slack's Agent messaging experience): a run pins the
        agent's suggested prompts there and greets the person the first time."""
        team, user, event_id = (
            str(body.get("team_id") or ""),
            event.get("user"),
            body.get("event_id"),
        )
        tab, channel = event.get("tab", "home"), event.get("channel")
        if tab not in ("home", "messages") or not (isinstance(user, str) and user and team):
            ack()
            return
        if not isinstance(event_id, str):
            raise InvalidInput("event envelope lacks team_id or event_id")
        inbox = InboxId.person(team, user)
        if tab == "home":
            self.store.note_home_opened(inbox, self.clock())
            self._store(inbox, event_id, HomeOpened(user=user, team=team))
        elif isinstance(channel, str) and channel:
            self._store(inbox, event_id, MessagesTabOpened(user=user, team=team, channel=channel))
        ack()

    def _on_assistant_thread(self, ack: Ack, body: dict[str, Any], event: dict[str, Any]) -> None:
        """A new assistant thread: an event keyed by the thread, so a retried event stores
        nothing new; its run greets the person with the agent's greeting and prompts."""
        thread = event.get("assistant_thread") or {}
        user, channel, ts, team = (
            str(v or "")
            for v in (
                thread.get("user_id"),
                thread.get("channel_id"),
                thread.get("thread_ts"),
                body.get("team_id"),
            )
        )
        if user and channel and ts and team:
            started = AssistantThreadStarted(user=user, team=team, channel=channel, thread_ts=ts)
            self._store(InboxId.person(team, user), f"assistant_thread:{channel}:{ts}", started)
        ack()

    def _on_tokens_revoked(
        self, ack: Ack, body: dict[str, Any], event: dict[str, Any], context: BoltContext
    ) -> None:
        """The workspace revoked the bot's token: no more sends there (core/store/
        installations.py). A user token alone revoked changes nothing (none is used)."""
        bots = (event.get("tokens") or {}).get("bot") or []
        if bots:
            self._end(body, context, "revoked", f"the bot token was revoked ({bots[0]})")
        ack()

    def _on_uninstalled(self, ack: Ack, body: dict[str, Any], context: BoltContext) -> None:
        """The app was uninstalled from the workspace: as a revocation, and for good."""
        self._end(body, context, "uninstalled", "the app was uninstalled")
        ack()

    def _end(self, body: dict[str, Any], context: BoltContext, status: Status, why: str) -> None:
        team, enterprise = context.team_id, context.enterprise_id
        if self.installations is None:  # one workspace: SLACK_BOT_TOKEN no longer works
            log.warning("workspace %s: %s; SLACK_BOT_TOKEN no longer works there", team, why)
            return
        issued = body.get("event_time")
        self.installations.end(
            enterprise,
            team,
            status,
            why,
            org_wide=bool(context.is_enterprise_install),
            issued_at=issued if isinstance(issued, int) else None,
        )

    def _on_requeue(self, ack: Ack, body: dict[str, Any], action: dict[str, Any]) -> None:
        """Requeue from the Home tab: an approver of the presser's workspace, and a row of
        that workspace only (with one workspace, or of no workspace's inbox), through the
        store's requeue; the Home tab is refreshed by a run of the presser's inbox."""
        user = (body.get("user") or {}).get("id")
        team = (body.get("team") or {}).get("id") or (body.get("user") or {}).get("team_id")
        what, _, raw_id = str(action.get("value") or "").partition(":")
        allowed = isinstance(team, str) and is_approver(self.approvers, str(user or ""), team)
        if not allowed or not raw_id.isdigit() or what not in ("event", "outbox"):
            logging.getLogger("wakeful").warning(
                "requeue refused for %s: %r", user, action.get("value")
            )
            ack()
            return
        now = self.clock()
        scope = Workspace(str(team), (str(team),), unowned=self.installations is None)
        if what == "event":
            done = self.store.requeue_event(int(raw_id), now, scope)
        else:
            done = self.store.requeue_outbox(int(raw_id), now, scope)
        if done:
            self.wake_worker.kick()
            self.wake_dispatcher.kick()
        if isinstance(user, str) and isinstance(team, str) and team:
            key = f"requeue:{what}:{raw_id}:{user}:{action.get('action_ts')}"
            self._store(InboxId.person(team, user), key, HomeOpened(user=user, team=team))
        ack()

    def _on_feedback(self, ack: Ack, body: dict[str, Any], action: dict[str, Any]) -> None:
        """A thumbs up or down under a reply: an inbox event of the person who pressed it,
        keyed by the message, the person and the value, so a double click is one; counted
        (`wakeful_feedback_total`) and thanked, to them alone, when stored."""
        user = (body.get("user") or {}).get("id")
        team = (body.get("team") or {}).get("id") or (body.get("user") or {}).get("team_id")
        container = body.get("container") or {}
        channel = (body.get("channel") or {}).get("id") or container.get("channel_id")
        message_ts = container.get("message_ts") or (body.get("message") or {}).get("ts")
        thread = container.get("thread_ts") or (body.get("message") or {}).get("thread_ts")
        value = action.get("value")
        if value not in ("positive", "negative"):
            raise InvalidInput("a feedback button's value is positive or negative")
        fields = (user, team, channel, message_ts)
        if not all(isinstance(v, str) and v for v in fields):
            raise InvalidInput("feedback lacks its user, team, channel or message")
        feedback = Feedback(
            value=value,
            user=str(user),
            team=str(team),
            channel=str(channel),
            message_ts=str(message_ts),
            thread_ts=thread if isinstance(thread, str) and thread else None,
        )
        key = f"feedback:{channel}:{message_ts}:{user}:{value}"
        inbox = InboxId.person(str(team), str(user))
        if self._store(inbox, key, feedback):
            metrics.FEEDBACK.labels(str(value)).inc()
            # Acknowledged to the clicker alone, where the reply is, once per click stored.
            thanks = Post(
                str(channel),
                blocks.FEEDBACK_THANKS[str(value)],
                thread_ts=feedback.thread_ts,
                kind="ephemeral",
                user=str(user),
                priority="urgent",
            )
            self.store.post(inbox, [thanks], self.clock())
            self.wake_dispatcher.kick()
        ack()

    def _on_forget(self, ack: Ack, body: dict[str, Any], action: dict[str, Any]) -> None:
        """Forget or Cancel under the prompt of `/wakeful forget`: a `ForgetAnswer` in the
        clicker's own inbox, whose run answers it (core/privacy.py). Keyed by the prompt and
        the answer, so Slack's retry or a double click stores one, while Cancel and Forget on
        one prompt stay two. Only the person the prompt asked may answer it: a button whose
        value is another user id (a forged or forwarded click) stores nothing, logged."""
        answer: Said = "forget" if action.get("action_id") == payloads.FORGET else "cancel"
        user = (body.get("user") or {}).get("id")
        team = (body.get("team") or {}).get("id") or (body.get("user") or {}).get("team_id")
        container = body.get("container") or {}
        channel = (body.get("channel") or {}).get("id") or container.get("channel_id")
        if not all(isinstance(v, str) and v for v in (user, team, channel)):
            raise InvalidInput("forget answer lacks its user, team or channel")
        url = body.get("response_url")
        said = ForgetAnswer(
            user=str(user),
            team=str(team),
            channel=str(channel),
            answer=answer,
            response_url=url if isinstance(url, str) and url else None,
        )
        prompt = container.get("message_ts") or action.get("action_ts") or ""
        if action.get("value") == user:
            self._store(
                InboxId.person(str(team), str(user)),
                f"forget:{team}:{user}:{prompt}:{answer}",
                said,
            )
        else:
            log.warning("forget %s refused: %s pressed another person's prompt", answer, user)
        ack()

    def _on_approve(self, ack: Ack, body: dict[str, Any], action: dict[str, Any]) -> None:
        self._on_click(body, action, "yes")
        ack()

    def _on_deny(self, ack: Ack, body: dict[str, Any], action: dict[str, Any]) -> None:
        self._on_click(body, action, "no")
        ack()

    def _on_click(self, body: dict[str, Any], action: dict[str, Any], answer: str) -> None:
        user = (body.get("user") or {}).get("id")
        # An org-wide install sends "team": null; the clicker's team is then user.team_id.
        team = (body.get("team") or {}).get("id") or (body.get("user") or {}).get("team_id")
        request_id = action.get("value")
        container = body.get("container") or {}
        channel = (body.get("channel") or {}).get("id") or container.get("channel_id")
        # The tapper's note goes where the prompt is: its thread, when it is in one.
        thread = container.get("thread_ts") or (body.get("message") or {}).get("thread_ts")
        if not isinstance(user, str) or not user:
            raise InvalidInput("click has no user")
        now = self.clock()
        try:
            if self._other_team(str(request_id or ""), team):
                outcome, stored = "forbidden", False
            else:
                answered = self.store.answer(
                    str(request_id or ""), answer, user, now, self.approvers
                )
                outcome, stored = answered.outcome, answered.stored
        except InvalidInput:
            outcome, stored = "unknown", False  # tampered or malformed id: nothing answered
        if stored:
            self.wake_worker.kick()  # the answer event resumes the agent's run
            return
        note = self._click_note(str(request_id), outcome)
        if note is not None and isinstance(channel, str) and channel:
            text, note_blocks = note
            # The note is not an inbox's reply: it is filed under the tapper's inbox (their
            # team, when the click names one) for the operator's eyes.
            inbox = InboxId.person(str(team), user) if isinstance(team, str) and team else user
            self.store.post(
                inbox,
                [
                    Post(
                        channel,
                        text,
                        thread_ts=thread if isinstance(thread, str) and thread else None,
                        blocks=note_blocks,
                        kind="ephemeral",
                        user=user,
                    )
                ],
                now,
            )
            self.wake_dispatcher.kick()

    def _other_team(self, request_id: str, team: object) -> bool:
        """Whether a click comes from another team than the person who asked: a person's
        inbox is `<team>:<user>`, and only that team's people may answer it (the approvers
        the answer checks are that workspace's). An approval of a conversation's inbox
        (`channel:<id>`, webhook reports) names no team: approvers named by user id alone
        decide."""
        state = self.store.approval(request_id) if request_id else None
        if state is None or InboxId(state.inbox).channel is not None:
            return False
        return not (isinstance(team, str) and team and InboxId(state.inbox).team == team)

    def _click_note(
        self, request_id: str, outcome: str
    ) -> tuple[str, list[dict[str, Any]] | None] | None:
        """What the tapper alone sees when their tap changed nothing."""
        if outcome == "unknown":
            return "This approval request is unknown; nothing was done.", None
        state = self.store.approval(request_id)
        if outcome == "forbidden":
            requester = state.requester if state else "the requester"
            return blocks.NOT_YOURS, blocks.not_yours(requester, self.store.settings.self_approval)
        if state is None or state.answer is None:
            return None
        line = blocks.outcome_line(state.answer, state.answered_by, state.answered_at)
        return f"Already answered: {line}", None

    def _on_error(self, error: Exception, logger: logging.Logger) -> BoltResponse:
        if isinstance(error, StoreError):
            if isinstance(error, StoreUnavailable):
                _unavailable.warn(logger, str(error))
            status, body = store_failures.answer_to(error)
            return BoltResponse(status=status, body=body)
        if isinstance(error, InvalidInput):
            return BoltResponse(status=400, body=f"bad request: {error}")
        logger.exception("listener failed", exc_info=error)
        return BoltResponse(status=500, body="internal error")


class _Throttled:
    """One log line for a run of failures: the first at once, then at most one every `every`
    seconds saying how many requests were answered 503 since (an outage under load would
    otherwise write a line per request)."""

    def __init__(self, every: float = 10.0) -> None:
        self.every = every
        self._lock = threading.Lock()
        self._logged_at: float | None = None
        self._since = 0

    def warn(self, logger: logging.Logger, text: str) -> None:
        now = time.monotonic()
        with self._lock:
            if self._logged_at is not None and now - self._logged_at < self.every:
                self._since += 1
                return
            repeated, self._since, self._logged_at = self._since, 0, now
        more = f" ({repeated} more requests answered 503 since the last line)" if repeated else ""
        logger.warning("store unavailable; answering 503 so Slack retries: %s%s", text, more)


_unavailable = _Throttled()


def _quiet_token_notice(record: logging.LogRecord) -> bool:
    """Bolt notes that SLACK_BOT_TOKEN is ignored when `authorize` is given; that is the point."""
    return "will be ignored" not in record.getMessage()
