"""Which answer to an approval stands. Pure; the store calls it inside the answer's transaction
so the deadline and the first answer are read and written atomically."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from wakeful.core.inbox_id import InboxId
from wakeful.core.records import AnswerOutcome, ApprovalState
from wakeful.core.tenancy import is_approver

Decision = tuple[AnswerOutcome, Literal["store", "keep"]]


def judge_answer(
    state: ApprovalState | None,
    answer: str,
    user: str,
    now: int,
    approvers: Sequence[str] | None = None,
    self_approval: bool = True,
) -> Decision:
    """Return the outcome and whether it is a new answer to store.

    Never requested: `unknown`. A user who is neither the requester nor an approver of the
    approval's workspace (core/tenancy.py `is_approver`): `forbidden`, nothing stored.
    `approvers` is the list as configured now, so someone removed from it loses their say over
    approvals already open (None: the list stored with the request). Already answered (by a
    person or by the expiry): that first answer. Past the deadline: `expired`, stored, even if
    the expiry timer has not run yet.

    `self_approval` False (WAKEFUL_SELF_APPROVAL=off): a second person must answer, so the
    requester's own click is `forbidden` too, Approve or Deny, approver or not; only another
    approver's counts.
    """
    if state is None:
        return "unknown", "keep"
    allowed = state.approvers if approvers is None else tuple(approvers)
    team = InboxId(state.inbox).team
    if user == state.requester and not self_approval:
        return "forbidden", "keep"
    if user != state.requester and not is_approver(allowed, user, team):
        return "forbidden", "keep"
    if state.answer is not None:
        return state.answer, "keep"
    if now >= state.deadline:
        return "expired", "store"
    return ("yes" if answer == "yes" else "no"), "store"


EXPIRY_PREFIX = "approval:"
"""How the name of an approval's expiry timer starts (its inbox's own timers cannot)."""


def expiry_timer_id(inbox: str, request_id: str) -> str:
    return f"{inbox}/{EXPIRY_PREFIX}{request_id}"


CAP_SETTINGS = "WAKEFUL_MAX_APPROVALS_PER_RUN, WAKEFUL_MAX_OPEN_APPROVALS"


def not_asked(asked: int, skipped: int, per_run: int, max_open: int) -> str:
    """What the person is told, once, when approvals went unasked because of the caps."""
    were = "was" if skipped == 1 else "were"
    if asked:
        lead = f"I asked for {asked} approval{'' if asked == 1 else 's'}; {skipped} more {were}"
    else:
        lead = f"{skipped} approval{'' if skipped == 1 else 's'} {were}"
    return (
        f"{lead} not asked: at most {per_run} per message and {max_open} open at once "
        f"({CAP_SETTINGS})."
    )


@dataclass(slots=True)
class ApprovalBudget:
    """How many approvals a run may still ask for: the per-run cap and what the inbox's open
    approvals leave of the open cap. An agent takes one before each ask; the finish enforces
    the same caps on whatever a run returns, so a budget only makes the refusal the agent's
    own words instead of the engine's."""

    per_run: int
    max_open: int
    open: int
    """Approvals of the inbox open when the run started."""
    asked: int = 0
    skipped: int = 0

    def take(self) -> bool:
        """True: ask for one more. False: over a cap; it is counted as not asked."""
        if self.asked < self.per_run and self.open + self.asked < self.max_open:
            self.asked += 1
            return True
        self.skipped += 1
        return False

    def note(self, skipped: int | None = None) -> str | None:
        """The line telling the person how many were not asked and why (None: all were);
        `skipped` narrows it to the ones not asked since a count the caller kept."""
        n = self.skipped if skipped is None else skipped
        if not n:
            return None
        return not_asked(self.asked, n, self.per_run, self.max_open)
