"""Durable steps: a call's result recorded under a key stable across retries, so a retried run
gets it back instead of calling again (`Run.step`), or a business object is acted on once
whoever asks (`Steps.once`, keyed by the agent's own key in the asking workspace)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from wakeful.core import tenancy
from wakeful.core.effects import check_json

if TYPE_CHECKING:
    from wakeful.core.events import Event
    from wakeful.core.records import StepRecord

T = TypeVar("T")


class StepLedger(Protocol):
    """Where step results are kept (the store): looked up before a call, recorded after."""

    def recorded_step(self, key: str) -> StepRecord | None:
        """The step recorded under `key`, if any."""
        ...

    def record_step(
        self,
        key: str,
        inbox: str | None,
        name: str,
        args: Any,
        result: Any,
        now: int,
        replay: bool = False,
        error: str | None = None,
    ) -> Any:
        """Record a step's result unless one is recorded; return the result that stands.
        `replay`: recorded only for a retry to replay (pruned after the retention); `error`:
        the call ended in a failure that stands (the result None)."""
        ...


@dataclass(frozen=True)
class Steps:
    """Durable steps keyed by a key of the agent's own choosing (an order id), in the
    workspace of the run that asks (core/tenancy.py), or in every one: for a tool that must
    act once per business object, whoever asks."""

    _ledger: StepLedger
    _clock: Callable[[], int]

    def once(self, key: str, fn: Callable[[str], T], *, name: str, everywhere: bool = False) -> T:
        """`fn(key)` unless a result is recorded under `key`; the result that stands (the
        first recorded: two racing callers both get it). At least once, like `Run.step`.

        The key is the run's workspace's: `refund_order:1001` in workspace T1 is stored as
        `T1:refund_order:1001`, and workspace T2's `refund_order:1001` is another step. A
        record made for every workspace (`everywhere=True`, or by a wakeful from before keys
        were scoped) counts in each. `everywhere=True`: one record for all workspaces (a key
        that names something no two customers share). Outside a run, or in a run of an inbox
        of no workspace (a conversation's, where webhooks report), the key is used as it is."""
        workspace = None if everywhere else tenancy.current()
        now = self._clock()
        if workspace is None:
            return durable_step(self._ledger, key, fn, name, None, now)
        found = tenancy.recorded_in(workspace, key, self._ledger.recorded_step)
        if found is not None:
            return found.result  # type: ignore[no-any-return]
        scoped = workspace.scoped(key)
        return durable_step(self._ledger, scoped, fn, name, tenancy.serving_inbox(), now)


def durable_step(
    ledger: StepLedger,
    key: str,
    fn: Callable[[str], T],
    name: str,
    inbox: str | None,
    now: int,
    replay: bool = False,
) -> T:
    """The recorded result under `key`, else `fn(key)` recorded: the one that stands (the
    first recorded, when two callers race). `Run.step` and `Steps.once` both go through it."""
    recorded = ledger.recorded_step(key)
    if recorded is not None:
        return recorded.result  # type: ignore[no-any-return]
    result = fn(key)
    check_json(result, f"the result of step {name!r}")
    stood = ledger.record_step(key, inbox, name, None, result, now, replay=replay)
    return stood  # type: ignore[no-any-return]


def step_key(inbox: str, cause: Event, name: str) -> str:
    """A durable step's idempotency key: the inbox, the event that caused the step (by its
    source key, the same in every retry and in every copy of the store) and the step's name."""
    raw = "\x1f".join((inbox, cause.source, cause.key, name))
    return "wk-" + hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:40]
