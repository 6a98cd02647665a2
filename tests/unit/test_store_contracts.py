"""Each caller of the store names what it uses in a Protocol (a consumer's contract): the
Protocol lists exactly the store members its caller's code touches, and a real store has each.
mypy proves the signatures (each contract's module has a `_kept(store: Store) -> Contract`
that .ci/mypy checks); these catch a contract that drifts from its caller's code."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from wakeful.bot.commands import dead_letters, doctor, inspection, ops
from wakeful.bot.front import listeners, store_contract, webhooks, wsgi
from wakeful.core import dispatcher, metrics, outage, scheduler, worker
from wakeful.core.store import open_store

CONTRACTS: dict[str, tuple[Any, list[ModuleType], list[Any]]] = {
    # name: (the Protocol, the modules whose code uses it, Protocols the store is handed to)
    "worker": (worker.WorkerStore, [worker, outage], []),
    "outage": (outage.OutageStore, [outage], []),
    "scheduler": (scheduler.SchedulerStore, [scheduler], []),
    "dispatcher": (dispatcher.DispatcherStore, [dispatcher], []),
    "front": (store_contract.FrontStore, [listeners, wsgi, webhooks], [metrics.GaugeSource]),
    "webhooks": (store_contract.WebhookStore, [webhooks], []),
    "dead-letters": (dead_letters.DeadLetterStore, [dead_letters], []),
    "inspect views": (inspection.Described, [inspection], []),
    "inspect and restore": (ops.OpsStore, [ops], [inspection.Described]),
    "doctor": (doctor.DoctorStore, [doctor], []),
}


def members(protocol: Any) -> set[str]:
    """A Protocol's members, its bases' included (what `typing.get_protocol_members` gives
    from Python 3.13 on)."""
    names: set[str] = set()
    for cls in protocol.__mro__:
        if cls in (object,) or cls.__module__ == "typing":
            continue
        names |= set(getattr(cls, "__annotations__", {}))
        names |= {n for n in vars(cls) if not n.startswith("_")}
    return names


def touched(module: ModuleType) -> set[str]:
    """The members read, called or set on the store in a module's code: `store.x`,
    `self.store.x`, `self.listeners.store.x`."""
    tree = ast.parse(Path(inspect.getfile(module)).read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        if (isinstance(owner, ast.Name) and owner.id == "store") or (
            isinstance(owner, ast.Attribute) and owner.attr == "store"
        ):
            found.add(node.attr)
    return found


@pytest.mark.parametrize("name", list(CONTRACTS))
def test_each_contract_lists_exactly_what_its_caller_touches(name: str) -> None:
    protocol, modules, handed_to = CONTRACTS[name]
    used = set().union(*(touched(m) for m in modules), *(members(p) for p in handed_to))
    listed = members(protocol)
    assert listed - used == set(), f"{name}: listed but never used"
    assert used - listed == set(), f"{name}: used but not in its contract"


def test_a_real_store_has_every_member_of_every_contract(tmp_path: Path) -> None:
    store = open_store(tmp_path / "contracts.db")
    try:
        for name, (protocol, _, _) in CONTRACTS.items():
            missing = {m for m in members(protocol) if not hasattr(store, m)}
            assert not missing, f"{name}: the store has no {sorted(missing)}"
    finally:
        store.close()
