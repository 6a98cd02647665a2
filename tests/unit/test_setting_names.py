"""Unknown WAKEFUL_* names are warned about, each with the closest known name; the list of
known names is every name the code reads (checked against the source tree)."""

from __future__ import annotations

import re
from pathlib import Path

from wakeful.bot.process.setting_names import KNOWN, unknown_settings

REPO = Path(__file__).resolve().parents[2]
NAME = re.compile(r"\bWAKEFUL_[A-Z0-9_]*[A-Z0-9]\b")


def test_the_issue_s_misspelling_names_the_setting_it_meant() -> None:
    assert unknown_settings({"WAKEFUL_OUTBOX_GAPS": "1h"}) == [
        "unknown setting WAKEFUL_OUTBOX_GAPS ignored; did you mean WAKEFUL_OUTBOX_GAP?"
    ]


def test_one_warning_each_and_nothing_for_known_test_or_other_names() -> None:
    env = {
        "WAKEFUL_RETENTON": "30d",
        "WAKEFUL_XYZZY": "1",
        "WAKEFUL_DB": "w.db",
        "WAKEFUL_TEST_PG_DSN": "postgresql://x",
        "WAKEFUL_WEBHOOK_CHANNEL_DEPLOYS": "C1",
        "SLACK_BOT_TOKEN": "xoxb-1",
        "WAKEFUL_STRIPE_KEY": "sk",
    }
    assert unknown_settings(env, also=frozenset({"WAKEFUL_STRIPE_KEY"})) == [
        "unknown setting WAKEFUL_RETENTON ignored; did you mean WAKEFUL_RETENTION?",
        "unknown setting WAKEFUL_XYZZY ignored (no known setting is close; see docs/settings.md)",
    ]


def test_every_name_the_code_reads_is_known() -> None:
    # A new setting that is not added to KNOWN would be warned about as a typo.
    read: set[str] = set()
    for folder in ("bot", "core", "agents", "devtools"):
        for path in (REPO / folder).rglob("*.py"):
            read |= set(NAME.findall(path.read_text()))
    read = {n for n in read if not n.startswith(("WAKEFUL_TEST_", "WAKEFUL_WEBHOOK_CHANNEL_"))}
    assert read - KNOWN == set()
