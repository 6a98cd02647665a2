"""The lease rules: who may run an inbox, and under which generation. Pure, so each rule is
tested on its own; the store applies them inside its write transaction."""

from __future__ import annotations

from wakeful.core.records import Lease


def grant(current: Lease | None, inbox: str, holder: str, now: int, ttl: int) -> Lease | None:
    """The lease `holder` gets by asking now, or None when someone else holds it.

    No row: generation 1. Same holder, unexpired: renewal, same generation. Expired: takeover
    with the next generation, even by the same holder (its earlier run may still be alive and
    must be fenced off). Held by someone else: refused.
    """
    if current is None:
        return Lease(inbox, holder, 1, now + ttl)
    if current.expires_at <= now:
        return Lease(inbox, holder, current.gen + 1, now + ttl)
    if current.holder == holder:
        return Lease(inbox, holder, current.gen, now + ttl)
    return None


def holds(current: Lease | None, holder: str, gen: int, now: int) -> bool:
    """True while `holder` still holds the lease in generation `gen`."""
    return (
        current is not None
        and current.holder == holder
        and current.gen == gen
        and current.expires_at > now
    )
