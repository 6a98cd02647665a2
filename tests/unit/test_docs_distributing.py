"""docs/distributing.md kept true: its sample start-up refusal is the one wakeful prints, and
every setting its table names is one wakeful reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from wakeful.bot.process.config import Config, ConfigError

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs/distributing.md").read_text()


def test_the_sample_refusal_is_what_wakeful_prints() -> None:
    [sample] = [line for line in DOC.splitlines() if line.startswith("wakeful: WAKEFUL_TOKEN_KEY")]
    env = {"SLACK_CLIENT_ID": "1.2", "SLACK_CLIENT_SECRET": "s"}
    with pytest.raises(ConfigError) as caught:
        Config.from_env(env, need={"token"})
    assert sample == f"wakeful: {caught.value}"


def test_every_setting_in_the_table_is_read() -> None:
    source = (ROOT / "bot/process/config.py").read_text()
    table = [line for line in DOC.splitlines() if line.startswith("| `")]
    names = {n for line in table for n in re.findall(r"`([A-Z][A-Z_]+)`", line.split("|")[1])}
    assert len(names) >= 8
    for name in names:
        assert f'"{name}"' in source, name
