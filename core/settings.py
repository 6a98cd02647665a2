"""The engine's tunables in one frozen value, so every loop and test sees the same numbers."""

from __future__ import annotations

import re
from dataclasses import dataclass

from wakeful.core.errors import InvalidInput

MAX_PAYLOAD_BYTES = 256 * 1024
"""Cap on an event payload's JSON, in UTF-8 bytes. Slack's largest event bodies are far below."""
DAY = 86_400
REDELIVERY_WINDOW = 4 * DAY
"""How long a stored event (and with it its dedupe key) must outlive its handling: the longest
redelivery window of any source (Stripe retries for up to three days; GitHub redelivers on
request within three days; Slack retries within an hour), plus a day of margin."""


OPS_CHANNEL = re.compile(r"(?:[TE][A-Z0-9]{2,}:)?[CG][A-Z0-9]{2,}")
"""An operators' channel: a public or private channel id, after its workspace's team id."""


DURATION_SYNTAX = "90 (seconds), 90s, 15m, 1h or 30d"
"""The one way every duration setting is written, as error messages show it."""
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": DAY}
_DURATION = re.compile(r"(\d{1,9}(?:\.\d{1,6})?)\s*([smhd]?)")


def parse_duration(name: str, raw: str, whole: bool = True) -> float:
    """`raw` as seconds: a number alone is seconds, or one with a unit (s, m, h, d). The one
    parser of every duration setting, so `1h` means the same wherever it is accepted;
    `whole` refuses a fraction of a second. InvalidInput names `name`, what was given and
    the syntax."""
    text = raw.strip().lower()
    m = _DURATION.fullmatch(text)
    if m is None:
        raise InvalidInput(f"{name} must be a duration: {DURATION_SYNTAX}, got {raw.strip()!r}")
    seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if whole and seconds != int(seconds):
        raise InvalidInput(
            f"{name} must be a whole number of seconds ({DURATION_SYNTAX}), got {raw.strip()!r}"
        )
    return seconds


@dataclass(frozen=True, slots=True)
class Settings:
    lease_ttl: int = 120
    heartbeat: int = 2
    """Seconds between a process's records that it is alive (WAKEFUL_HEARTBEAT). A process on
    another host silent for three of them is dead, and its leases end before their TTL."""
    max_attempts: int = 3
    claim_cap: int = 50
    backoff_base: int = 10
    backoff_cap: int = 900
    outbox_gap: int = 3600
    send_timeout: int = 60
    """How long a batch may stay `sending` before another dispatcher may retry it."""
    max_catch_up: int = 1000
    """A `catch_up` timer replays at most this many missed occurrences per pass."""
    approval_ttl: int = 14400
    """Seconds an approval stays open before its expiry answers it."""
    max_approvals_per_run: int = 5
    """Approvals one run may ask for (WAKEFUL_MAX_APPROVALS_PER_RUN); the finish asks for no
    more, whatever the agent returned, and says how many were not asked."""
    max_open_approvals: int = 20
    """Approvals one inbox may have open at once (WAKEFUL_MAX_OPEN_APPROVALS), enforced the
    same way: one person's message cannot flood a conversation with prompts."""
    max_timers_per_inbox: int = 50
    """Timers one inbox may have set at once (WAKEFUL_MAX_TIMERS_PER_INBOX): reminders, digests,
    any agent's; approvals' expiries are not counted (the approval caps bound them). The
    finish sets no more, whatever the agent returned, and says how many were not set."""
    tool_retry_for: int = DAY
    """Seconds an approved call that fails transiently is retried (WAKEFUL_TOOL_RETRY_FOR),
    counted from its first failure; then it is given up and the person told."""
    retention: int = 30 * DAY
    """Seconds done events, sent outbox rows, run-log rows and answered approvals are kept
    before pruning; never less than REDELIVERY_WINDOW, so a late redelivery is still refused."""
    ops_channel: str = ""
    """Where operators are told what went wrong (WAKEFUL_OPS_CHANNEL): a channel id `C…`, or
    `T…:C…` naming its workspace (distribution mode); empty: nobody is told (core/store/ops.py)."""
    memory_doc_bytes: int = 102_400
    """UTF-8 bytes one memory document holds at most (WAKEFUL_MEMORY_DOC_BYTES)."""
    memory_docs: int = 200
    """Memory documents one inbox keeps at most (WAKEFUL_MEMORY_DOCS)."""
    stream_segment: int = 240
    """Seconds a streamed reply's message takes text before it is ended and the text goes on
    in a new one (WAKEFUL_STREAM_SEGMENT): Slack ends a stream after about five minutes."""
    self_approval: bool = True
    """Whether a requester's own click answers their approval (WAKEFUL_SELF_APPROVAL); off:
    only another approver's does (core/rules/approvals.py `judge_answer`), whoever calls
    the store's `answer`."""

    def __post_init__(self) -> None:
        for name in (
            "lease_ttl",
            "heartbeat",
            "max_attempts",
            "claim_cap",
            "backoff_base",
            "backoff_cap",
            "send_timeout",
            "max_catch_up",
            "approval_ttl",
            "max_approvals_per_run",
            "max_open_approvals",
            "max_timers_per_inbox",
            "tool_retry_for",
            "stream_segment",
            "memory_doc_bytes",
            "memory_docs",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidInput(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.retention, int) or self.retention < REDELIVERY_WINDOW:
            raise InvalidInput(
                f"retention must be at least {REDELIVERY_WINDOW} seconds (4 days): a handled "
                f"event's key must outlive the longest redelivery window (Stripe's 3 days), "
                f"got {self.retention!r}"
            )
        if not isinstance(self.ops_channel, str) or not (
            self.ops_channel == "" or OPS_CHANNEL.fullmatch(self.ops_channel)
        ):
            raise InvalidInput(
                f"ops_channel must be a channel id like C012AB3CD or T012AB3CD:C012AB3CD, "
                f"got {self.ops_channel!r}"
            )
        if not isinstance(self.self_approval, bool):
            raise InvalidInput(f"self_approval must be True or False, got {self.self_approval!r}")
        if not isinstance(self.outbox_gap, int) or self.outbox_gap < 0:
            raise InvalidInput(f"outbox_gap must be an integer >= 0, got {self.outbox_gap!r}")

    def backoff(self, attempts: int) -> int:
        """Seconds a retry waits after its `attempts`-th claim: base doubling, capped."""
        if attempts < 1:
            return 0
        return min(self.backoff_cap, self.backoff_base * (1 << min(attempts - 1, 30)))


DEFAULTS = Settings()
"""Every tunable's default, written once: configuration, agents and docs read it from here."""
