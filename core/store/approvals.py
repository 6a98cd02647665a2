"""Approvals: deferred tool calls with a deadline and one answer.

The answer is stored as an inbox event under (`approval`, request id), the same key the expiry
uses, so the database holds one answer whatever races with it; the deadline is checked inside
the answer's transaction."""

from __future__ import annotations

from wakeful.core import metrics
from wakeful.core.effects import check_json
from wakeful.core.errors import InvalidInput
from wakeful.core.records import AnswerOutcome, ApprovalState
from wakeful.core.rules.approvals import decide
from wakeful.core.storable import check_name
from wakeful.core.store.base import StoreBase, insert_event
from wakeful.core.store.outbox import queue
from wakeful.core.store.rows import PreparedApproval, approval_record
from wakeful.core.store.sql import Tx


def request(tx: Tx, approval: PreparedApproval, now: int) -> None:
    """Open an approval with its prompt and expiry timer, in the finish's transaction.

    A retried run re-requests the same id: one approval, one prompt, one expiry."""
    if not tx.run("insert_approval", {**approval.request, "now": now}):
        return
    tx.after_commit(metrics.APPROVALS.labels("requested").inc)
    if approval.prompt is not None:
        queue(tx, [approval.prompt], now)
    tx.run("upsert_timer", {**approval.expiry, "now": now})


def store_answer(tx: Tx, state: ApprovalState, outcome: str, user: str | None, now: int) -> bool:
    """Store the answer event and mark the approval; False when an answer was stored first."""
    payload = {
        "approval": state.id,
        "answer": outcome,
        "user": user,
        "tool": state.tool,
        "args": state.args,
        "answered_at": now,
    }
    body = check_json(payload, "answer")
    if insert_event(tx, state.inbox, "approval", state.id, body, now) is None:
        return False
    tx.run("set_answer", {"id": state.id, "answer": outcome, "user": user, "now": now})
    tx.after_commit(metrics.APPROVALS.labels(outcome).inc)
    return True


class Approvals(StoreBase):
    def answer(self, request_id: str, answer: str, user: str, now: int) -> AnswerOutcome:
        """Answer an approval; return the outcome that stands (see rules.approvals.decide)."""
        return self.answer_detail(request_id, answer, user, now)[0]

    def answer_detail(
        self, request_id: str, answer: str, user: str, now: int
    ) -> tuple[AnswerOutcome, bool]:
        """`answer`, plus whether this call is the one that stored the outcome (False for a
        second tap, a forbidden user or an unknown request)."""
        if answer not in ("yes", "no"):
            raise InvalidInput(f"answer must be 'yes' or 'no', got {answer!r}")
        if not isinstance(request_id, str) or not request_id or len(request_id) > 255:
            raise InvalidInput("an answer needs a request id of 1 to 255 characters")
        if not isinstance(user, str) or not user:
            raise InvalidInput("an answer needs a user")
        check_name("request id", request_id)
        check_name("user", user)
        with self._tx(urgent=True) as tx:
            state = approval_record(tx.one("get_approval_for_update", {"id": request_id}))
            outcome, action = decide(state, answer, user, now)
            if action != "store" or state is None:
                return outcome, False
            if store_answer(tx, state, outcome, user, now):
                return outcome, True
            stored = approval_record(tx.one("get_approval_for_update", {"id": request_id}))
            assert stored is not None and stored.answer is not None
            return stored.answer, False

    def approval(self, request_id: str) -> ApprovalState | None:
        with self._tx(write=False) as tx:
            return approval_record(tx.one("get_approval", {"id": request_id}))

    def open_approvals(self, tool: str | None = None) -> list[ApprovalState]:
        """Approvals of every inbox that no one has answered yet (expired ones too, until their
        expiry is stored), of one tool or all, soonest deadline first."""
        with self._tx(write=False) as tx:
            rows = tx.all("open_approvals", {"tool": tool})
        return [a for r in rows if (a := approval_record(r)) is not None]

    def approvals(self, inbox: str) -> list[ApprovalState]:
        with self._tx(write=False) as tx:
            rows = tx.all("inbox_approvals", {"inbox": inbox})
        return [a for r in rows if (a := approval_record(r)) is not None]
