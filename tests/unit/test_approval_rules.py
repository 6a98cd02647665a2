from wakeful.core.records import ApprovalState
from wakeful.core.rules.approvals import judge_answer


def state(answer: str | None = None) -> ApprovalState:
    return ApprovalState(
        id="r1",
        inbox="I",
        tool="refund_order",
        args={},
        requester="U1",
        approvers=("U9",),
        deadline=100,
        created_at=0,
        answer=answer,  # type: ignore[arg-type]
        answered_by=None,
        answered_at=None,
        prompt_channel=None,
        prompt_ts=None,
    )


def test_unknown_request() -> None:
    assert judge_answer(None, "yes", "U1", 10) == ("unknown", "keep")


def test_forbidden_user_stores_nothing() -> None:
    assert judge_answer(state(), "yes", "U2", 10) == ("forbidden", "keep")


def test_requester_and_approver_may_answer() -> None:
    assert judge_answer(state(), "yes", "U1", 10) == ("yes", "store")
    assert judge_answer(state(), "no", "U9", 10) == ("no", "store")


def test_the_current_approvers_replace_the_stored_ones() -> None:
    assert judge_answer(state(), "yes", "U9", 10, approvers=("U5",)) == ("forbidden", "keep")
    assert judge_answer(state(), "yes", "U5", 10, approvers=("U5",)) == ("yes", "store")
    assert judge_answer(state(), "no", "U1", 10, approvers=()) == ("no", "store")


def test_first_answer_stands() -> None:
    assert judge_answer(state("yes"), "no", "U1", 10) == ("yes", "keep")
    assert judge_answer(state("expired"), "yes", "U1", 10) == ("expired", "keep")


def test_deadline_is_checked_by_the_answer_itself() -> None:
    assert judge_answer(state(), "yes", "U1", 100) == ("expired", "store")
    assert judge_answer(state(), "yes", "U1", 99) == ("yes", "store")


def test_self_approval_is_allowed_by_default() -> None:
    """Issue 34, item 6 (e): a requester approving their own request is allowed, as
    documented (docs/slack.md), unless WAKEFUL_SELF_APPROVAL=off."""
    assert judge_answer(state(), "yes", "U1", 10, approvers=("U9",)) == ("yes", "store")
    assert judge_answer(state(), "yes", "U1", 10, self_approval=True) == ("yes", "store")


def test_with_self_approval_off_only_another_approvers_answer_counts() -> None:
    def judge(answer: str, user: str, approvers: tuple[str, ...] | None = None) -> object:
        return judge_answer(state(), answer, user, 10, approvers, self_approval=False)

    for answer in ("yes", "no"):  # the requester may not answer at all, not even Deny
        assert judge(answer, "U1") == ("forbidden", "keep")
        assert judge(answer, "U1", ("U1", "U9")) == ("forbidden", "keep")  # an approver who asked
    assert judge("yes", "U9") == ("yes", "store")
    assert judge("no", "U9", ("U1", "U9")) == ("no", "store")
    assert judge("yes", "U2") == ("forbidden", "keep")
    answered = judge_answer(state("yes"), "no", "U1", 10, self_approval=False)
    assert answered == ("forbidden", "keep")
