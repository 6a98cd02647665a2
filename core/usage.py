"""What an agent's model calls cost: tokens by kind and an estimated cost, per model.

An agent that calls a model reports each call (`run.record_usage`). The run adds them up per
model, its finish writes the sum to the run log (`wakeful inspect <inbox>` shows it), and the
metrics count each call at once (`wakeful_model_tokens_total`, `wakeful_model_cost_dollars_total`),
so a call billed in a run that never finished (a worker killed mid-run) is still counted. A
call replayed from its recorded step (a retried run) was billed once, the first time: it counts
as `replayed`, its tokens not again. The engine knows no vendor: which prices apply is the
agent's business (the Claude agent's table is bot/builtin/claude_prices.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from wakeful.core.errors import InvalidInput

KINDS = ("input", "output", "cache_write", "cache_read")
"""Token kinds: input billed at the full price, output, written to the prompt cache, read
from it."""
_MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@-]{0,99}")


@dataclass(frozen=True, slots=True)
class ModelUsage:
    """One model's tokens over one call or a run's calls, and what they are estimated to cost."""

    model: str
    input: int = 0
    output: int = 0
    cache_write: int = 0
    cache_read: int = 0
    cost: float | None = None
    """Estimated US dollars from the agent's price table; None when the price is unknown."""
    calls: int = 1
    """Calls made (billed)."""
    replayed: int = 0
    """Calls a retried run got back from their recorded step instead of making them again."""

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not _MODEL.fullmatch(self.model):
            raise InvalidInput(f"a model name is 1 to 100 plain characters, got {self.model!r}")
        for name in (*KINDS, "calls", "replayed"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InvalidInput(f"usage {name} must be a whole number >= 0, got {value!r}")
        if self.cost is not None and (not isinstance(self.cost, int | float) or self.cost < 0):
            raise InvalidInput(f"usage cost must be a number >= 0, got {self.cost!r}")

    @classmethod
    def replay(cls, model: str) -> ModelUsage:
        """A call answered from its recorded step: nothing billed."""
        return cls(model, calls=0, replayed=1, cost=0.0)

    def tokens(self, kind: str) -> int:
        if kind not in KINDS:
            raise InvalidInput(f"no token kind {kind!r} (kinds: {', '.join(KINDS)})")
        return int(getattr(self, kind))

    def __add__(self, other: ModelUsage) -> ModelUsage:
        if other.model != self.model:
            raise InvalidInput("usage of two models does not add up")
        cost = (
            None
            if self.cost is None and other.cost is None
            else ((self.cost or 0.0) + (other.cost or 0.0))
        )
        sums = {
            f.name: getattr(self, f.name) + getattr(other, f.name)
            for f in fields(self)
            if f.name not in ("model", "cost")
        }
        return ModelUsage(self.model, cost=cost, **sums)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        del out["model"]
        if self.cost is not None:
            out["cost"] = round(self.cost, 8)
        return out

    @classmethod
    def from_json(cls, model: str, data: Mapping[str, Any]) -> ModelUsage:
        known = {f.name for f in fields(cls)} - {"model"}
        return cls(model, **{k: v for k, v in data.items() if k in known})


def by_model(usages: Iterable[ModelUsage]) -> dict[str, ModelUsage]:
    """The usages added up per model, in the order each model first appears."""
    out: dict[str, ModelUsage] = {}
    for u in usages:
        out[u.model] = out[u.model] + u if u.model in out else u
    return out


def known_cost(usages: Iterable[ModelUsage]) -> float | None:
    """What the calls are estimated to have cost, the priced ones (None: no call was priced):
    the run log keeps it beside the usage, and spend budgets add it up."""
    costs = [u.cost for u in usages if u.cost is not None]
    return sum(costs) if costs else None


def to_json(usages: Iterable[ModelUsage]) -> dict[str, Any]:
    """What the run log stores: {model: {input, output, cache_write, cache_read, cost, ...}}."""
    return {model: u.to_json() for model, u in by_model(usages).items()}


def from_json(data: Any) -> dict[str, ModelUsage]:
    """The run log's usage column read back (an unreadable one reads as none)."""
    if not isinstance(data, Mapping):
        return {}
    out: dict[str, ModelUsage] = {}
    for model, item in data.items():
        try:
            out[str(model)] = ModelUsage.from_json(str(model), item)
        except (InvalidInput, TypeError):
            continue
    return out


Scope = Literal["person", "workspace"]


@dataclass(frozen=True, slots=True)
class SpendBudget:
    """What an agent lets its model calls cost in any 24 hours, in US dollars, from the costs
    the run log recorded (`ModelUsage.cost`, from the agent's price table): `per_person` for
    one inbox, `per_workspace` for every inbox of its workspace. None: no budget. A call of a
    model with no price costs nothing here (its cost is unknown)."""

    per_person: float | None = None
    per_workspace: float | None = None

    def __post_init__(self) -> None:
        for name in ("per_person", "per_workspace"):
            value = getattr(self, name)
            if value is None:
                continue
            if (
                not isinstance(value, int | float)
                or isinstance(value, bool)
                or not math.isfinite(value)
                or value <= 0
            ):
                raise InvalidInput(f"a spend budget {name} must be dollars > 0, got {value!r}")

    def spent(self, spent: ModelSpend, own: float = 0.0) -> OverBudget | None:
        """Which budget `spent` (plus `own`, the calls of the run asking) has used up, the
        person's first; None: neither."""
        mine = spent.inbox + own
        if self.per_person is not None and mine >= self.per_person:
            return OverBudget("person", mine, self.per_person)
        if self.per_workspace is not None and spent.workspace is not None:
            theirs = spent.workspace + own
            if theirs >= self.per_workspace:
                return OverBudget("workspace", theirs, self.per_workspace)
        return None


@dataclass(frozen=True, slots=True)
class ModelSpend:
    """What model calls cost since a time, in US dollars, as the run log recorded them."""

    inbox: float
    workspace: float | None
    """Every inbox of the inbox's workspace; None for an inbox of no workspace (a
    conversation's)."""


@dataclass(frozen=True, slots=True)
class OverBudget:
    """A model call not to make: the `scope`'s calls of the last 24 hours cost `spent`,
    which is `budget` or more."""

    scope: Scope
    spent: float
    budget: float
