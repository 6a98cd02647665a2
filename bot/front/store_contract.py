"""The store as the Slack front uses it. The listeners (listeners.py), the webhook endpoints
(webhooks.py), /healthz and /metrics (wsgi.py) share one store, so the front's whole contract
with it reads here, next to the proof that the real store keeps it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from wakeful.core.effects import Post
from wakeful.core.metrics import GaugeSource
from wakeful.core.records import Answered, ApprovalState, Ingested
from wakeful.core.settings import Settings
from wakeful.core.store.base import Connector
from wakeful.core.store.threads import ThreadWhy
from wakeful.core.tenancy import Workspace


class WebhookStore(Protocol):
    """What a webhook delivery needs: its event stored once under its delivery id."""

    def ingest(
        self, inbox: str, source: str, source_id: str, payload: Any, now: int
    ) -> Ingested: ...


class FrontStore(WebhookStore, GaugeSource, Protocol):
    """Slack's events and clicks in (and a note or two out), the health check, the gauges."""

    @property
    def settings(self) -> Settings: ...

    @property
    def db(self) -> Connector: ...

    def healthy(self) -> bool: ...

    def takes_part(self, channel: str, thread_ts: str) -> bool: ...

    def remember_thread(self, channel: str, thread_ts: str, why: ThreadWhy, now: int) -> None: ...

    def note_home_opened(self, inbox: str, now: int) -> None: ...

    def requeue_event(self, event_id: int, now: int, scope: Workspace | None) -> bool: ...

    def requeue_outbox(self, row_id: int, now: int, scope: Workspace | None) -> bool: ...

    def post(self, inbox: str, messages: Sequence[Post], now: int) -> None: ...

    def answer(
        self, request_id: str, answer: str, user: str, now: int, approvers: Sequence[str] | None
    ) -> Answered: ...

    def approval(self, request_id: str) -> ApprovalState | None: ...


if TYPE_CHECKING:
    from wakeful.core.store import Store

    def _kept(store: Store) -> FrontStore:
        return store  # mypy proves the real store keeps this contract
