"""Durable steps: the result of a call to the outside world, recorded under its idempotency key
as soon as it returns, so a retried or resumed run gets it back instead of calling again.

The first result recorded under a key stands: a second recording (a stale worker that made the
same call, a race of two answers) changes nothing and gets the first back. An approved tool's
step is keyed by the approval's request id; an agent's own step by its inbox, cause and name
(core/run.py `step_key`); a step may also be keyed by a business key of the agent's choosing
(`refund_order:<order>`), in the workspace of the run that asks (stored as
`<team>:refund_order:<order>`, core/tenancy.py) or across every one.

A step recorded only so that a retried run can replay it (a model's answer: `replay`) is pruned
once older than the retention; one recording a side effect is kept for good.
"""

from __future__ import annotations

import json
from typing import Any

from wakeful.core.effects import check_json
from wakeful.core.errors import LeaseLost
from wakeful.core.records import StepRecord
from wakeful.core.storable import check_name, is_storable
from wakeful.core.store.base import StoreBase, prefix_match
from wakeful.core.store.codec import require
from wakeful.core.store.sql import Row
from wakeful.core.tenancy import Workspace


class StepRows(StoreBase):
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
        """Record `result` under `key` unless a result is recorded; the one that stands.
        `replay`: kept only so a retried run can replay it (pruned after the retention).
        `error`: the call ended in a failure that stands (its result None): `recorded_step`
        then carries it, and nothing calls the step again."""
        require(key=key, name=name)
        if inbox is not None:
            check_name("inbox", inbox)
        body = check_json(result, "step result")
        params: dict[str, Any] = {
            "key": key,
            "inbox": inbox,
            "name": name,
            "args": None if args is None else check_json(args, "step args"),
            "result": body,
            "replay": 1 if replay else 0,
            "now": now,
            "error": None if error is None else str(error)[:2000],
        }
        with self._tx() as tx:
            if tx.run("insert_step", params):
                return json.loads(body)
            row = tx.one("get_step", {"key": key})
        if row is None:  # refused: the person was forgotten while this run went on
            raise LeaseLost(f"{inbox}: forgotten while the run went on; its step not kept")
        return json.loads(row["result"])

    def recorded_step(self, key: str) -> StepRecord | None:
        if not is_storable(key):
            return None  # no such key can have been recorded
        with self._tx(write=False) as tx:
            row = tx.one("get_step", {"key": key})
        return None if row is None else step_record(row)

    def recorded_steps(
        self,
        inbox: str | None = None,
        name: str | None = None,
        limit: int = 1000,
        scope: Workspace | None = None,
    ) -> list[StepRecord]:
        """Recorded steps, newest first, of one inbox and/or one name; with no inbox, `scope`
        keeps one workspace's inboxes' steps only."""
        with self._tx(write=False) as tx:
            if scope is None or inbox is not None:
                rows = tx.all("list_steps", {"inbox": inbox, "name": name, "limit": limit})
            else:
                params: dict[str, Any] = {"limit": limit, "name": name}
                query = "team_steps" if name is None else "team_named_steps"
                rows = [
                    r for p in scope.prefixes for r in tx.all(query, {**params, **prefix_match(p)})
                ]
        found = [step_record(r) for r in rows]
        if inbox is None and scope is not None and len(scope.prefixes) > 1:
            found.sort(key=lambda s: (s.created_at, s.key), reverse=True)
        return found[:limit]


def step_record(row: Row) -> StepRecord:
    return StepRecord(
        key=str(row["key"]),
        inbox=row["inbox"],
        name=str(row["name"]),
        args=None if row["args"] is None else json.loads(row["args"]),
        result=json.loads(row["result"]),
        created_at=int(row["created_at"]),
        error=row["error"],
    )
