"""Which answer to an approval stands. Pure; the store calls it inside the answer's transaction
so the deadline and the first answer are read and written atomically."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from wakeful.core.records import AnswerOutcome, ApprovalState

Decision = tuple[AnswerOutcome, Literal["store", "keep"]]


def decide(
    state: ApprovalState | None,
    answer: str,
    user: str,
    now: int,
    approvers: Sequence[str] | None = None,
) -> Decision:
    """Return the outcome and whether it is a new answer to store.

    Never requested: `unknown`. A user who is neither the requester nor an approver:
    `forbidden`, nothing stored. `approvers` is the list as configured now, so someone removed
    from it loses their say over approvals already open (None: the list stored with the
    request). Already answered (by a person or by the expiry): that first answer. Past the
    deadline: `expired`, stored, even if the expiry timer has not run yet.
    """
    if state is None:
        return "unknown", "keep"
    allowed = state.approvers if approvers is None else tuple(approvers)
    if user not in (state.requester, *allowed):
        return "forbidden", "keep"
    if state.answer is not None:
        return state.answer, "keep"
    if now >= state.deadline:
        return "expired", "store"
    return ("yes" if answer == "yes" else "no"), "store"


def expiry_timer_id(inbox: str, request_id: str) -> str:
    return f"{inbox}/approval:{request_id}"
