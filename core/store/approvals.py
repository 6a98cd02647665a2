"""Approvals: deferred tool calls with a deadline and one answer.

The answer is stored as an inbox event under (`approval`, request id), the same key the expiry
uses, so the database holds one answer whatever races with it; the deadline is checked inside
the answer's transaction."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from wakeful.core import metrics, tracing
from wakeful.core.effects import Post, check_json
from wakeful.core.errors import InvalidInput
from wakeful.core.events import ApprovalAnswer
from wakeful.core.records import Answered, ApprovalState
from wakeful.core.rules.approvals import ApprovalBudget, judge_answer, not_asked
from wakeful.core.settings import Settings
from wakeful.core.storable import check_name
from wakeful.core.store.base import StoreBase, insert_event, prefix_match
from wakeful.core.store.codec import PreparedApproval, approval_record, message_params, require
from wakeful.core.store.outbox import queue
from wakeful.core.store.sql import Tx
from wakeful.core.tenancy import Workspace

log = logging.getLogger("wakeful")


def request(tx: Tx, approval: PreparedApproval, now: int) -> bool:
    """Open an approval with its prompt and expiry timer, in the finish's transaction; False
    when it exists already.

    A retried run re-requests the same id: one approval, one prompt, one expiry."""
    if not tx.run("insert_approval", {**approval.request, "now": now}):
        return False
    tx.after_commit(metrics.APPROVALS.labels("requested").inc)
    if approval.prompt is not None:
        queue(tx, [approval.prompt], now)
    tx.run("upsert_timer", {**approval.expiry, "now": now})
    return True


def request_all(
    tx: Tx, inbox: str, approvals: Sequence[PreparedApproval], now: int, settings: Settings
) -> None:
    """A run's approvals, within the caps whatever the agent returned: at most
    `max_approvals_per_run` new ones, and no more once the inbox has `max_open_approvals`
    open. The ones over a cap are not asked, and the person is told so in one line, where the
    first of them would have been asked (a built-in agent keeps within the caps and says it
    in its own reply, so this line is for an agent that does not)."""
    if not approvals:
        return
    row = tx.one("count_open_approvals", {"inbox": inbox})
    open_now = int(row["n"]) if row else 0
    asked, skipped, where = 0, 0, None
    for approval in approvals:
        if asked < settings.max_approvals_per_run and open_now < settings.max_open_approvals:
            if request(tx, approval, now):
                asked, open_now = asked + 1, open_now + 1
        elif tx.one("get_approval", {"id": approval.request["id"]}) is None:
            skipped += 1  # a new one over a cap (a repeat of an open one asks nothing anyway)
            where = where or approval.prompt
    if not skipped:
        return
    text = not_asked(asked, skipped, settings.max_approvals_per_run, settings.max_open_approvals)
    tx.after_commit(lambda: log.warning("%s: %s", inbox, text))
    if where is None:
        return  # no prompt says where the person is: the log line is all there is
    thread = str(where["thread_ts"] or "") or None
    notice = Post(str(where["channel"]), text, thread_ts=thread, priority="urgent")
    queue(tx, [message_params(inbox, notice)], now)


def store_answer(tx: Tx, state: ApprovalState, outcome: str, user: str | None, now: int) -> bool:
    """Store the answer event and mark the approval; False when an answer was stored first."""
    answer = ApprovalAnswer(
        request_id=state.id,
        answer=outcome,  # type: ignore[arg-type]
        tool=state.tool,
        args=state.args,
        by=user,
        answered_at=now,
        summary=state.summary or "",
        channel=state.channel or state.prompt_channel,
        thread_ts=state.thread_ts,
        requester=state.requester,
    )
    body = check_json(answer.to_wire(), "answer")
    waiting = now if answer.awaited else None
    stored = insert_event(tx, state.inbox, "approval", state.id, body, now, waiting) is not None
    if tracing.ON:  # the click's request span says what it stored, as a message's does
        said = "new" if stored else "duplicate"
        tracing.note({"wakeful.inbox": state.inbox, "wakeful.stored": said})
    if not stored:
        return False
    tracing.link(state.trace)  # the click's span (the answer's trace) links to the asking run
    tx.run("set_answer", {"id": state.id, "answer": outcome, "user": user, "now": now})
    tx.after_commit(metrics.APPROVALS.labels(outcome).inc)
    return True


class Approvals(StoreBase):
    def answer(
        self,
        request_id: str,
        answer: str,
        user: str,
        now: int,
        approvers: Sequence[str] | None = None,
    ) -> Answered:
        """Answer an approval: the outcome that stands (see rules.approvals.judge_answer) and
        whether this call stored it.

        `approvers`: who may answer besides the requester, as configured when the answer
        arrives (the Slack front passes WAKEFUL_APPROVERS); None keeps the list stored with
        the request. With `Settings.self_approval` off (WAKEFUL_SELF_APPROVAL=off) the
        requester's own answer is refused, whoever calls this."""
        if answer not in ("yes", "no"):
            raise InvalidInput(f"answer must be 'yes' or 'no', got {answer!r}")
        _check_id(request_id)
        if not isinstance(user, str) or not user:
            raise InvalidInput("an answer needs a user")
        if isinstance(approvers, str):
            raise InvalidInput("approvers is a sequence of user ids, not one string")
        check_name("user", user)
        with self._tx(urgent=True) as tx:
            state = approval_record(tx.one("get_approval_for_update", {"id": request_id}))
            outcome, action = judge_answer(
                state, answer, user, now, approvers, self.settings.self_approval
            )
            if action != "store" or state is None:
                return Answered(outcome, False)
            if store_answer(tx, state, outcome, user, now):
                return Answered(outcome, True)
            stored = approval_record(tx.one("get_approval_for_update", {"id": request_id}))
            assert stored is not None and stored.answer is not None
            return Answered(stored.answer, False)

    def approval(self, request_id: str) -> ApprovalState | None:
        """The approval `request_id` names, or None (also for an id no approval can have:
        empty, over 255 characters, not valid Unicode, as a tampered click may carry)."""
        try:
            _check_id(request_id)
        except InvalidInput:
            return None
        with self._tx(write=False) as tx:
            return approval_record(tx.one("get_approval", {"id": request_id}))

    def open_approvals(
        self, tool: str | None = None, scope: Workspace | None = None
    ) -> list[ApprovalState]:
        """Approvals that no one has answered yet (expired ones too, until their expiry is
        stored), of one tool or all, soonest deadline first: of every inbox, or of the
        inboxes of one workspace (`scope`)."""
        with self._tx(write=False) as tx:
            if scope is None:
                rows = tx.all("open_approvals", {"tool": tool})
            else:
                rows = [
                    r
                    for prefix in scope.prefixes
                    for r in tx.all("team_open_approvals", {"tool": tool, **prefix_match(prefix)})
                ]
        return _soonest([a for r in rows if (a := approval_record(r)) is not None], scope)

    def open_approvals_for(
        self, user: str, approver: bool, limit: int = 20, scope: Workspace | None = None
    ) -> list[ApprovalState]:
        """Open approvals `user` may answer, soonest deadline first: an approver (as
        configured now) may answer every one; anyone else their own requests. Of every inbox,
        or of one workspace's (`scope`: the caller says whether `user` is an approver there,
        core/tenancy.py `is_approver`)."""
        with self._tx(write=False) as tx:
            if scope is None and approver:
                rows = tx.all("open_approvals_first", {"limit": limit})
            elif scope is None:
                rows = tx.all("open_approvals_requested_by", {"user": user, "limit": limit})
            else:
                name = (
                    "team_open_approvals_first" if approver else "team_open_approvals_requested_by"
                )
                params = {"user": user, "limit": limit}
                rows = [
                    r for p in scope.prefixes for r in tx.all(name, {**params, **prefix_match(p)})
                ]
        found = [a for r in rows if (a := approval_record(r)) is not None]
        return _soonest(found, scope)[:limit]

    def approval_budget(self, inbox: str) -> ApprovalBudget:
        """What a run of `inbox` may still ask for under the approval caps (see
        `ApprovalBudget`); read when the run starts: only the inbox's own runs, one at a
        time, open its approvals, so the count can only fall before the finish."""
        require(inbox=inbox)
        with self._tx(write=False) as tx:
            row = tx.one("count_open_approvals", {"inbox": inbox})
        s = self.settings
        return ApprovalBudget(
            s.max_approvals_per_run, s.max_open_approvals, int(row["n"]) if row else 0
        )

    def approvals(self, inbox: str) -> list[ApprovalState]:
        with self._tx(write=False) as tx:
            rows = tx.all("inbox_approvals", {"inbox": inbox})
        return [a for r in rows if (a := approval_record(r)) is not None]


def _soonest(approvals: list[ApprovalState], scope: Workspace | None) -> list[ApprovalState]:
    """Approvals read a prefix at a time, in one order: soonest deadline first (one read is
    in that order already)."""
    if scope is None or len(scope.prefixes) < 2:
        return approvals
    return sorted(approvals, key=lambda a: (a.deadline, a.id))


def _check_id(request_id: str) -> None:
    if not isinstance(request_id, str) or not request_id or len(request_id) > 255:
        raise InvalidInput("an answer needs a request id of 1 to 255 characters")
    check_name("request id", request_id)
