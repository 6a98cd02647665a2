"""The outbox through the store and the Dispatcher, for the tests: a recording Sender that
can fail as Slack does, and a Rig of a store, a dispatcher and a hand-moved clock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.conftest import T0
from tests.support.approvals import ApprovalRequest
from wakeful.core.clock import ManualClock
from wakeful.core.dispatcher import Dispatcher
from wakeful.core.dispatcher import Sender as BaseSender
from wakeful.core.effects import Effects, Post
from wakeful.core.rules.outbox import Part
from wakeful.core.store import Store

GAP = 3600
INBOX = "T1:U8"

MakeStore = Callable[..., Store]
Failure = Callable[[Part], BaseException | None]


class Sender(BaseSender):
    """Stands in for Slack. Keeps every call, and what was really posted, by part id; a retried
    part that already went out is found and not posted again, as the real sender does with
    message metadata. `fail(part)` may return an exception to raise instead of posting;
    `after` exceptions are raised after the post reached Slack (a lost response)."""

    def __init__(self) -> None:
        self.calls: list[Part] = []
        self.posted: list[Part] = []
        self.ts_of: dict[str, str] = {}
        self.duplicates: list[str] = []
        self.fail: Failure = lambda part: None
        self.after: Failure = lambda part: None
        self.during: Callable[[Part], None] = lambda part: None

    def send(self, part: Part) -> str:
        self.calls.append(part)
        self.during(part)
        if part.part_id in self.ts_of:
            if not part.retry:
                self.duplicates.append(part.part_id)
            else:
                return self.ts_of[part.part_id]
        exc = self.fail(part)
        if exc is not None:
            raise exc
        self.posted.append(part)
        ts = f"{1000 + len(self.posted)}.000100"
        self.ts_of[part.part_id] = ts
        late = self.after(part)
        if late is not None:
            raise late
        return ts

    @property
    def texts(self) -> list[str]:
        return [p.text for p in self.posted]

    def texts_to(self, channel: str, thread_ts: str = "") -> list[str]:
        return [p.text for p in self.posted if (p.channel, p.thread_ts) == (channel, thread_ts)]


class Rig:
    def __init__(self, store: Store, now: int = T0) -> None:
        self.store = store
        self.clock = ManualClock(now)
        self.sender = Sender()
        self.dispatcher = Dispatcher(store=store, clock=self.clock, sender=self.sender)

    def post(
        self,
        text: str,
        at: int,
        channel: str = "C1",
        thread: str | None = None,
        urgent: bool = False,
        **kw: Any,
    ) -> None:
        self.clock.now = at
        msg = Post(
            channel=channel,
            text=text,
            thread_ts=thread,
            priority="urgent" if urgent else "normal",
            **kw,
        )
        self.store.post(INBOX, [msg], at)

    def tick(self, at: int) -> int:
        self.clock.now = at
        return self.dispatcher.tick(at)


def statuses(store: Store) -> list[str]:
    return [r.status for r in store.outbox(inbox=INBOX)]


def request_with_prompt(store: Store, prompt: Post, before: list[Post]) -> None:
    store.ingest(INBOX, "slack", "ask", {"text": "refund"}, T0)
    claim = store.acquire_and_claim(INBOX, "W", T0)
    assert claim is not None
    req = ApprovalRequest(
        id="req-1",
        tool="refund",
        args={"order": 1},
        requester="U8",
        deadline=T0 + GAP,
        prompt=prompt,
    )
    assert store.finish(claim, Effects(messages=before, approvals=[req]), T0, release=True)
