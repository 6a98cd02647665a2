"""What a Claude call is estimated to cost: the one price table, and the setting that overrides it.

Prices are US dollars per million tokens, as Anthropic lists them: input, output, and the
prompt cache's writes (1.25x the input price for the 5-minute TTL, 2x for the 1-hour one) and
reads (0.1x). A model is priced by its name or the longest listed name it starts with
(`claude-sonnet-5-20261001` is priced as `claude-sonnet-5`). WAKEFUL_CLAUDE_PRICES (JSON,
`{"model": {"input": 3, "output": 15}}`, the cache prices optional) adds models or replaces
listed ones. A model with no price has an unknown cost: its tokens are still counted.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wakeful.agents import InvalidInput, SpendBudget

log = logging.getLogger("wakeful")

WRITE_5M, WRITE_1H, READ = 1.25, 2.0, 0.1
"""Cache prices as multiples of the input price (Anthropic's prompt-caching pricing)."""


@dataclass(frozen=True, slots=True)
class Price:
    """Dollars per million tokens of one model."""

    input: float
    output: float
    cache_write_5m: float
    cache_write_1h: float
    cache_read: float

    @classmethod
    def of(cls, input: float, output: float, **cache: float) -> Price:
        return cls(
            input,
            output,
            cache.get("cache_write_5m", input * WRITE_5M),
            cache.get("cache_write_1h", input * WRITE_1H),
            cache.get("cache_read", input * READ),
        )

    def cost(self, input: int, output: int, write_5m: int, write_1h: int, read: int) -> float:
        """Dollars for one call's tokens."""
        dollars = (
            input * self.input
            + output * self.output
            + write_5m * self.cache_write_5m
            + write_1h * self.cache_write_1h
            + read * self.cache_read
        )
        return dollars / 1_000_000


PRICES: dict[str, Price] = {
    "claude-opus-5": Price.of(5, 25),
    "claude-sonnet-5": Price.of(3, 15),
    "claude-haiku-4-5": Price.of(1, 5),
    "claude-opus-4-8": Price.of(5, 25),
    "claude-opus-4-5": Price.of(5, 25),
    "claude-sonnet-4-6": Price.of(3, 15),
    "claude-sonnet-4-5": Price.of(3, 15),
}
"""List prices per million tokens as published when this was written (December 2026; Sonnet 5's
introductory $2 / $10 ended on 2026-09-01). Check Anthropic's pricing page and override with
WAKEFUL_CLAUDE_PRICES when they change."""
_FIELDS = ("input", "output", "cache_write_5m", "cache_write_1h", "cache_read")


def prices(setting: str = "") -> dict[str, Price]:
    """The table with WAKEFUL_CLAUDE_PRICES applied; InvalidInput says what is wrong with it."""
    table = dict(PRICES)
    if not setting.strip():
        return table
    try:
        given = json.loads(setting)
    except ValueError as exc:
        raise InvalidInput(f"WAKEFUL_CLAUDE_PRICES is not JSON: {exc}") from None
    if not isinstance(given, dict):
        raise InvalidInput('WAKEFUL_CLAUDE_PRICES must map models to prices: {"model": {...}}')
    for model, item in given.items():
        table[str(model)] = _price(str(model), item)
    return table


def _price(model: str, item: Any) -> Price:
    if not isinstance(item, Mapping) or not {"input", "output"} <= set(item):
        raise InvalidInput(f"WAKEFUL_CLAUDE_PRICES: {model} needs an input and an output price")
    unknown = set(item) - set(_FIELDS)
    if unknown:
        raise InvalidInput(
            f"WAKEFUL_CLAUDE_PRICES: {model} has {', '.join(sorted(unknown))}; "
            f"the prices are {', '.join(_FIELDS)}"
        )
    values: dict[str, float] = {}
    for name, value in item.items():
        if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
            raise InvalidInput(f"WAKEFUL_CLAUDE_PRICES: {model}.{name} must be a number >= 0")
        values[str(name)] = float(value)
    return Price.of(**values)


def price_of(table: Mapping[str, Price], model: str) -> Price | None:
    """The model's price: its own, else the longest listed name it starts with."""
    if model in table:
        return table[model]
    found = [name for name in table if model.startswith(name)]
    return table[max(found, key=len)] if found else None


PER_PERSON_DAY = 5.0
"""WAKEFUL_CLAUDE_BUDGET_PER_PERSON_DAY's default, in US dollars: a few hundred messages a day
at Sonnet's list price with caching, far below what a flood of timers or messages runs up."""


def spend_budget(env: Mapping[str, str]) -> SpendBudget:
    """WAKEFUL_CLAUDE_BUDGET_PER_PERSON_DAY (default $5) and _PER_WORKSPACE_DAY (default
    off): US dollars a person's, a workspace's, model calls may cost in any 24 hours, or
    `off`. InvalidInput names the one that is malformed."""
    return SpendBudget(
        per_person=_dollars(env, "WAKEFUL_CLAUDE_BUDGET_PER_PERSON_DAY", PER_PERSON_DAY),
        per_workspace=_dollars(env, "WAKEFUL_CLAUDE_BUDGET_PER_WORKSPACE_DAY", None),
    )


def _dollars(env: Mapping[str, str], name: str, default: float | None) -> float | None:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if raw.lower() == "off":
        return None
    try:
        value = float(raw.removeprefix("$"))
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value <= 0:
        raise InvalidInput(
            f"{name} must be US dollars above 0 (e.g. 5 or 0.50) or off, got {raw!r}"
        )
    return value


DEFAULT_BUDGET = SpendBudget(per_person=PER_PERSON_DAY)
