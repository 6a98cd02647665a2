"""`wakeful demo` runs the whole app against the emulator and checks itself; here we check what
a person reading its transcript sees: each step's lines under its heading, the help written
under alice's message flush by flush, one post per refund ask, the Home tab in the prompt's
words, nothing after `digest off`, no log line, and a last line that says where to go next."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from wakeful.bot.builtin.refund_desk import HELP_LINES
from wakeful.devtools.demo import NEXT

HEADING = re.compile(r"^(\d+)\. ", re.MULTILINE)
POST = re.compile(r"^ +\d+\.\ds  Slack ", re.MULTILINE)
LOG_LINE = re.compile(r"\b(DEBUG|INFO|WARNING|ERROR|CRITICAL)\b|^\{\"ts\"|^\d{4}-\d\d-\d\d ", re.M)


def steps(text: str) -> dict[int, str]:
    """The transcript's steps by number: each heading's lines, up to the next heading."""
    starts = [(int(m.group(1)), m.start()) for m in HEADING.finditer(text)]
    ends = [start for _, start in starts[1:]] + [text.index("\ndemo finished")]
    return {n: text[start:end] for (n, start), end in zip(starts, ends, strict=True)}


def posts_after(step: str, needle: str) -> list[str]:
    """The Slack posts of a step after the line holding `needle`, each with its own lines."""
    rest = step.split(needle, 1)[1]
    return [re.split(r"\n {9}(?=\S)", p)[0] for p in POST.split(rest)[1:]]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`wakeful demo` as the README's first command runs it (default log level), in an
    empty folder: what it printed, and the folder."""
    here = tmp_path_factory.mktemp("demo")
    exe = Path(sys.executable).parent / "wakeful"
    out = subprocess.run([str(exe), "demo"], capture_output=True, text=True, timeout=120, cwd=here)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out, here


def test_wakeful_demo_plays_every_scene_and_exits_zero(
    demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    out, tmp_path = demo
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
    # It counts the notes whose digests the gap held (the last may fall in the next gap).
    assert re.search(r"This digest covers \d+ periods\.\n +- messages handled: [23]\n", text)
    # The thread follow-up was answered in the thread by its approval prompt.
    follow_up = text.split("bob → #refunds (thread): ", 1)[1]
    assert "Slack [#refunds] (thread)  wakeful: *Approval needed:* refund order 1005" in follow_up
    assert text.count("wakeful: GitHub issues.opened") == 1  # the redelivery added nothing
    # The three Stripe events arrived inside the gap: one post, their lines in order (the
    # refund's charge.refunded was reported in #ops on its own, scenes before).
    assert text.count("Slack [#ops]  wakeful: Stripe charge.succeeded") == 1
    merged = text.split("Slack [#ops]  wakeful: Stripe charge.succeeded", 1)[1].split("Slack [")[0]
    merged = "charge.succeeded" + merged
    assert merged.index("charge.succeeded") < merged.index("charge.dispute.created")
    assert merged.index("charge.dispute.created") < merged.index("invoice.payment_failed")
    assert list(tmp_path.iterdir()) == []  # a temporary store, nothing left behind
    # No log line in the narration, nor on stderr: at the default level the app's lines go
    # to a file beside the store (--verbose shows them).
    assert out.stderr == "", out.stderr[-3000:]
    assert not LOG_LINE.search(text), LOG_LINE.search(text)
    # The last line says where to go next.
    assert text.splitlines()[-1] == NEXT
    assert "docs/slack.md" in NEXT and "docs/agents.md" in NEXT


def test_the_transcript_keeps_each_steps_lines_under_its_heading(
    demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    text = demo[0].stdout
    by_step = steps(text)
    assert sorted(by_step) == list(range(1, 11))
    # Every line about an order is in the step that asked for it: its prompt, its answer,
    # its expiry (step 8's prompt once came under step 9's heading, its expiry in step 10).
    asked = {}
    for n, step in by_step.items():
        for order in re.findall(r"→ [^\n]*refund order (\d+)", step):
            asked[order] = n
    assert set(asked) == {"1001", "1002", "1003", "1005"}
    for order, n in asked.items():
        for m, step in by_step.items():
            about = [line for line in step.splitlines() if f"order {order}" in line]
            if m == n:
                assert any("Approval needed" in line for line in about), (order, step)
            elif m != 9 or order != "1005":  # bob answers 1005 in step 9, after his Home tab
                assert not about, f"order {order} (step {n}) shows in step {m}: {about}"
    assert "Refund for order 1005 denied" in by_step[9]
    # One post per refund ask: the first post after the ask is its prompt, nothing before it.
    assert "Asked for approval" not in text
    for order, n in asked.items():
        [ask_line] = [
            ln for ln in by_step[n].splitlines() if "→" in ln and f"refund order {order}" in ln
        ]
        first = posts_after(by_step[n], ask_line)[0]
        assert f"wakeful: *Approval needed:* refund order {order}" in first, first
        assert text.count(f"wakeful: *Approval needed:* refund order {order}\n") == 1
    # The Home tab says what the prompt says.
    assert "refund_order" not in text
    assert "         | *Approval needed:* refund order 1005\n" in by_step[9]
    # `digest off` sends nothing more: its post is its confirmation, and no digest follows.
    [confirmation] = posts_after(by_step[7], "'digest off'")
    assert confirmation.endswith("wakeful: Handled 1 message.\n" + " " * 31 + "Digest off.")
    after = text.split("'digest off'", 1)[1]
    assert "Digest since" not in after


def test_the_help_is_written_under_alices_message_flush_by_flush_then_ended(
    demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    """Step 3: `help` is answered by one streamed message under hers and nothing else; the
    narration shows each flush as Slack took it (the first line at once, alone; the rest as
    the edge's buffer sends it), their texts joined being the desk's help, then its end."""
    step = steps(demo[0].stdout)[3]
    *flushes, end = posts_after(step, "alice → DM: 'help'")
    streaming = "[DM alice] (thread)  (streaming) wakeful: "
    assert len(flushes) >= 2 and all(f.startswith(streaming) for f in flushes), step
    shown = [f.removeprefix(streaming).rstrip("\n").replace("\n" + " " * 31, "\n") for f in flushes]
    assert shown[0] == HELP_LINES[0].rstrip("\n")  # the first line showed at once, alone
    assert "\n".join(shown) == "".join(HELP_LINES)
    lines = len(HELP_LINES)
    assert end.rstrip("\n") == f"[DM alice] (thread)  (stream ended: one message of {lines} lines)"
    assert "Handled" not in step
