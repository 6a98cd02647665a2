"""The store: every operation the engine owes, one module per concern, over one backend.

`Store` is the whole contract, assembled from its concerns (inbox, claims, timers, approvals,
outbox, admin, steps, threads, installations, gateway revocations, processes, model spend); a
backend (`Connector`) supplies only transactions over its own named SQL. Every operation takes
`now` in integer seconds: no backend reads a clock of its own. `open_store` picks the backend
from a URL or a path (`store_target`: the one rule of what names a store).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wakeful.core.errors import InvalidInput
from wakeful.core.kinds import ENGINE_KINDS, Kinds
from wakeful.core.settings import Settings
from wakeful.core.store.admin import Admin
from wakeful.core.store.approvals import Approvals
from wakeful.core.store.base import Connector
from wakeful.core.store.claims import Claims
from wakeful.core.store.dead_letters import DeadLetterOps
from wakeful.core.store.forget import ForgetRows
from wakeful.core.store.inbox import Inbox
from wakeful.core.store.installations import Installations
from wakeful.core.store.memory import MemoryRows
from wakeful.core.store.outbox import Outbox
from wakeful.core.store.overview import OverviewReads
from wakeful.core.store.processes import Processes
from wakeful.core.store.restores import Restores
from wakeful.core.store.retention import Retention
from wakeful.core.store.revocations import Revocations
from wakeful.core.store.spend import Spend
from wakeful.core.store.steps import StepRows
from wakeful.core.store.target import ACCEPTED, Target, store_target
from wakeful.core.store.threads import Threads
from wakeful.core.store.timers import Timers


class Store(
    Inbox,
    Claims,
    Timers,
    Approvals,
    Outbox,
    Admin,
    DeadLetterOps,
    StepRows,
    Retention,
    OverviewReads,
    Threads,
    Installations,
    Revocations,
    Restores,
    Processes,
    Spend,
    MemoryRows,
    ForgetRows,
):
    """The durable state of every inbox, and the only way the engine touches it."""


def open_connector(target: str | Path, **options: Any) -> Connector:
    """`postgresql://...` opens PostgreSQL (needs the `postgres` extra); `sqlite:///path` or a
    plain path opens a SQLite file; anything else is refused before anything is created
    (`store_target`). `options` go to the backend (e.g. `busy_timeout_ms`)."""
    backend, where = store_target(target)
    if backend == "postgres":
        try:
            from wakeful.core.store.postgres import PostgresConnector
        except ImportError as exc:
            raise InvalidInput(
                "WAKEFUL_DB is a PostgreSQL URL but psycopg is not installed: "
                "pip install 'wakeful[postgres]'"
            ) from exc
        return PostgresConnector(where, **options)
    from wakeful.core.store.sqlite import SQLiteConnector

    return SQLiteConnector(where, **options)


def open_store(
    target: str | Path,
    settings: Settings | None = None,
    *,
    kinds: Kinds = ENGINE_KINDS,
    **options: Any,
) -> Store:
    """A store on the backend `target` names (see `open_connector`), taking and planning the
    outbox rows of `kinds` (the engine's alone unless the process's assembly says more)."""
    return Store(open_connector(target, **options), settings, kinds)


__all__ = [
    "ACCEPTED",
    "Connector",
    "Store",
    "Target",
    "open_connector",
    "open_store",
    "store_target",
]
