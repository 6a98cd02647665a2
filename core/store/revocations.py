"""The credential gateway's kill switch: destinations an operator has revoked.

Kept in the store, not in a gateway's memory, so one `wakeful gateway revoke <name>` reaches
every gateway process on every host that reads this store; each polls this small table a few
times a second and refuses a revoked destination from then on (core/gateway/server.py).
"""

from __future__ import annotations

import re

from wakeful.core.errors import InvalidInput
from wakeful.core.records import Revocation
from wakeful.core.store.base import StoreBase

DESTINATION_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
"""A destination's name: what a tool puts first in its path, `<gateway>/<name>/...`."""


def check_destination(name: str) -> str:
    """`name` if it can name a destination, else InvalidInput saying what one looks like."""
    if not isinstance(name, str) or not DESTINATION_NAME.match(name):
        raise InvalidInput(
            f"{name!r} is not a destination name (lower-case letters, digits, '-' and '_', "
            "starting with a letter, at most 32)"
        )
    return name


class Revocations(StoreBase):
    def revoke_destination(self, name: str, now: int, by: str = "", reason: str = "") -> bool:
        """Cut `name` off at every gateway; False when it was revoked already (the first
        revocation's time and reason stand)."""
        check_destination(name)
        params = {"destination": name, "now": now, "by": by[:200], "reason": reason[:500]}
        with self._tx() as tx:
            return tx.run("revoke_destination", params) > 0

    def restore_destination(self, name: str) -> bool:
        """Let `name` through again; False when it was not revoked."""
        check_destination(name)
        with self._tx() as tx:
            return tx.run("restore_destination", {"destination": name}) > 0

    def revoked_destinations(self) -> dict[str, Revocation]:
        """Every revoked destination, by name."""
        with self._tx(write=False) as tx:
            rows = tx.all("revoked_destinations")
        return {
            str(r["destination"]): Revocation(
                destination=str(r["destination"]),
                revoked_at=int(r["revoked_at"]),
                revoked_by=str(r["revoked_by"] or ""),
                reason=str(r["reason"] or ""),
            )
            for r in rows
        }
