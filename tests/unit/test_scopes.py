"""The scopes the doctor asks Slack for are the manifest's own, read without a YAML library."""

from __future__ import annotations

import re
from pathlib import Path

from wakeful.bot.slack.scopes import manifest_scopes, required_scopes

ROOT = Path(__file__).resolve().parents[2]


def test_the_required_scopes_are_exactly_the_bot_scopes_manifest_yml_lists() -> None:
    text = (ROOT / "manifest.yml").read_text()
    # Independently of the reader: the `- scope` lines between `bot:` and the next key.
    block = re.search(r"^ {4}bot:\n((?: {6}- .*\n)+)", text, re.MULTILINE)
    assert block is not None
    listed = [line.split("#")[0].strip()[2:].strip() for line in block.group(1).splitlines()]
    assert required_scopes(str(ROOT / "manifest.yml")) == listed
    assert "chat:write" in listed


def test_block_and_flow_lists_comments_and_quotes_are_read() -> None:
    block = """
display_information:
  name: "x # not a comment"
oauth_config:
  scopes:
    user:
      - search:read
    bot:
    - chat:write   # same indent as the key is YAML too
    - "users:read"
settings:
  bot_events:
    - app_mention
"""
    assert manifest_scopes(block) == ["chat:write", "users:read"]
    flow = "oauth_config:\n  scopes:\n    bot: [chat:write, 'im:history']  # inline\n"
    assert manifest_scopes(flow) == ["chat:write", "im:history"]


def test_no_bot_scopes_is_an_empty_list_and_no_manifest_is_none(tmp_path: Path) -> None:
    assert manifest_scopes("oauth_config:\n  scopes:\n    user:\n      - a:b\n") == []
    assert required_scopes(str(tmp_path / "missing.yml")) is None
