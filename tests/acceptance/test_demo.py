"""`wakeful demo` runs the whole app against the emulator and checks itself; here we check what
a person reading its transcript sees."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_wakeful_demo_plays_every_scene_and_exits_zero(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "wakeful"
    out = subprocess.run(
        [str(exe), "--log-level", "WARNING", "demo"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = out.stdout
    for line in (
        "wakeful: Handled 1 message.",
        "Slack delivers it again (X-Slack-Retry-Num: 1): HTTP 200, then 200",
        "wakeful: Handled 3 messages.",
        "Refunded order 1001 through Stripe (re_",
        "made with Idempotency-Key refund-order-",
        "Slack [DM alice]  wakeful: Stripe confirmed the refund of order 1001 (re_",
        "Approved by @alice",
        "Refund for order 1002 denied; nothing was done.",
        "(only bob sees) This approval is not yours to answer",
        "Refund request for order 1003 expired; nothing was done.",
        "Expired with no answer; nothing was done.",
        "... and nothing was posted. Now news, period after period:",
        "This digest covers ",
        "- messages handled: 3",
        "Slack [#refunds] (thread)  wakeful: Handled 1 message.\n",
        "(the channel chatter was acknowledged, HTTP 200, and dropped)",
        "| == Pending approvals ==",
        "| *Approval needed:* refund order 1005",  # the Home tab says what the prompt says
        "| [Approve]  [Deny]",
        "| == Recent refunds ==",
        "then redelivers it (same X-GitHub-Delivery): HTTP 200 'stored', then 200 "
        "'duplicate delivery; already stored'",
        "Slack [#ops]  wakeful: GitHub issues.opened Codertocat/Hello-World: Spelling error in "
        "the README file https://github.com/Codertocat/Hello-World/issues/1",
        "demo finished: every step above was checked against what Slack received.",
    ):
        assert line in text, f"missing from the transcript: {line!r}"
    assert text.count("wakeful: Handled 1 message.\n") >= 1
    # The held digests went out as ONE digest: one header in that post, not one per period.
    merged_digest = text.split("This digest covers ", 1)[0].rsplit("wakeful: ", 1)[1]
    assert merged_digest.count("Digest since") == 1
    # The thread follow-up was answered in the thread, with its approval prompt there too.
    follow_up = text.split("bob → #refunds (thread): ", 1)[1]
    assert "Slack [#refunds] (thread)  wakeful: Handled 1 message.\n" in follow_up
    assert "Asked for approval to refund order 1005." in follow_up
    assert text.count("wakeful: GitHub issues.opened") == 1  # the redelivery added nothing
    # The three Stripe events arrived inside the gap: one post, their lines in order (the
    # refund's charge.refunded was reported in #ops on its own, scenes before).
    assert text.count("Slack [#ops]  wakeful: Stripe charge.succeeded") == 1
    merged = text.split("Slack [#ops]  wakeful: Stripe charge.succeeded", 1)[1].split("Slack [")[0]
    merged = "charge.succeeded" + merged
    assert merged.index("charge.succeeded") < merged.index("charge.dispute.created")
    assert merged.index("charge.dispute.created") < merged.index("invoice.payment_failed")
    assert list(tmp_path.iterdir()) == []  # a temporary store, nothing left behind
    # Shutting down is quiet: no thread dies with a traceback as the servers close.
    assert "uncaught" not in out.stderr and "Traceback" not in out.stderr, out.stderr[-3000:]
