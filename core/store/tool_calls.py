"""Idempotency records for tools with side effects: a tool an unattended run may repeat records
its effect under a key (an approval's request id) and acts only the first time."""

from __future__ import annotations

from typing import Any

from wakeful.core.effects import check_json
from wakeful.core.storable import check_name, is_storable
from wakeful.core.store.base import StoreBase
from wakeful.core.store.rows import require
from wakeful.core.store.sql import Row


class ToolCalls(StoreBase):
    def record_tool_call(self, key: str, tool: str, args: Any, inbox: str, now: int) -> bool:
        """Record a side effect under an idempotency key; False if it was already recorded, in
        which case the tool must not act again."""
        require(key=key, tool=tool)
        check_name("inbox", inbox)
        params = {
            "key": key,
            "tool": tool,
            "inbox": inbox,
            "args": check_json(args, "tool args"),
            "now": now,
        }
        with self._tx() as tx:
            return tx.run("insert_tool_call", params) > 0

    def tool_call(self, key: str) -> Row | None:
        """The side effect recorded under `key` (key, tool, inbox, args JSON, created_at)."""
        if not is_storable(key):
            return None  # no such key can have been recorded
        with self._tx(write=False) as tx:
            row = tx.one("get_tool_call", {"key": key})
        return None if row is None else dict(row)

    def tool_calls(self, tool: str | None = None, inbox: str | None = None) -> list[Row]:
        with self._tx(write=False) as tx:
            return [dict(r) for r in tx.all("list_tool_calls", {"tool": tool, "inbox": inbox})]
